"""A strategy that exists for the tests only: layer-synchronous, whole-partition, exact full-graph training (bns-gcn at
P = 1), with a `g3 plan` option and a `g3 train` knob of its own. tests/test_fixture_strategy.py registers it, as
a new system would be (one folder and one registration), and finds it in every stage."""

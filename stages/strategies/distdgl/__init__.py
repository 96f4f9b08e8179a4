"""DistDGL (paper 001 §4.1, §5.1; Zheng et al., IA3 2020): mini-batch training with neighbour sampling.

- ``partition.py`` — METIS with DistDGL's five balance constraints (nodes, train, valid, test, arcs).
- ``plan.py`` — the sampling options (``--fanouts``, ``--batch-size``, ``--batch-order``) and the boundary tables
  of exact full-neighbour evaluation.
- ``runtime.py`` — counter-based sampling (remote neighbours sampled by their owners through the sampling
  service), features fetched by id (the KVStore), an all-reduce per step; ``knobs.py`` its prefetch and
  micro-batches.
- ``simulate.py`` — the kit's calibrated step model.
"""

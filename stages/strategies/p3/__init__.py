"""P3 (paper 003, Gandhi & Iyer, OSDI '21): push-pull parallelism on independently partitioned structure and
features.

- the ``p3`` partition method (§3.1): the structure by a hash of node id, the features split by column.
- ``plan.py`` — distdgl's sampling options and where the structure lives (``--topology``).
- ``runtime.py`` — §3.2–3.3: the sampled structure pushed to every worker, layer 1 computed model-parallel on
  each worker's columns and its partial activations pulled, layers 2+ data-parallel, gradients pushed back;
  ``knobs.py`` its pipeline (§3.4, Eq. 3: three steps of staleness with weight stashing).
- ``simulate.py`` — its step (push, partials, data-parallel phase) from a run's rates.
"""

"""NeutronTP (paper 002 §3–4): tensor parallelism on a feature split, naive or decoupled, chunk by chunk.

- the ``feature`` partition method (the kit's column layout): the whole topology on every worker and ceil(F/K)
  feature columns each (§3).
- ``plan.py`` — chunks over the whole graph with interleaved ownership (§4.2), the topology kept in the plan.
- ``runtime.py`` and ``tensor_parallel.py`` — naive TP (§3.2: aggregate the column slice, all-to-all to row
  blocks, dense layers, all-to-all back; exact) and decoupled TP (§4.1: the MLP, then L propagation rounds; a
  different model, dgcn); ``knobs.py`` the inter-chunk pipeline (§4.2.2) and layer 0's cache.
- ``simulate.py`` — its epoch collective by collective, chunk by chunk.
"""

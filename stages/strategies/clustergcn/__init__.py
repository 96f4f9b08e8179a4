"""ClusterGCN (Chiang et al., KDD 2019), the mini-batch baseline of G3 Fig. 12c (paper 000 §7.3).

- ``plan.py`` — every worker's own nodes cut into METIS clusters (``--clusters``, ``--clusters-per-batch``).
- ``runtime.py`` — a step trains on the subgraph induced by a few clusters (the arcs between clusters dropped),
  an all-reduce per step.
- ``simulate.py`` — its epoch from a run's rates, the clusters of another worker count planned again.
"""

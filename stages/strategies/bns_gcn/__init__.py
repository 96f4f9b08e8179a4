"""BNS-GCN (Wan et al., MLSys 2022) as G3 §7.2 ran it (paper 000): layer-synchronous boundary exchange of the
whole partition, with BNS-GCN's random boundary-node sampling.

- ``plan.py`` — the boundary exchange tables (the plan kit's) and the sampling ratio P (``--boundary-sample``).
- ``runtime.py`` — the kit's layer-synchronous execution with the kept boundary rows scaled by 1/P; on a chunk
  partition, the NeutronStar configuration of G3 §7.2 (without its dependency caching).
- ``simulate.py`` — its workers' epoch on a g3 plan's work, for g3's bins simulator.
"""

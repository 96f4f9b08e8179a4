"""G3 (paper 000, Wan et al., SIGMOD 2023): exact full-graph training with hybrid parallelism.

- ``partition.py`` — §4.2 stage 1: one multi-constraint METIS call on (feature size, degree), Eq. 1–3;
  ``repartition.py`` — §4.2 stage 2, Algorithm 1: swaps that balance the remote sets, with the fast neighbour
  counters; ``refine.py`` — an annealing stage g3 adds where Algorithm 1 stops short of γ.
- ``plan.py`` — §5.3 steps 1–3 and §6.2: the BFS priority list (peer-needed nodes first), per-layer bin limits
  from half the device memory, bins, and the peer-to-peer send/receive tables.
- ``runtime.py`` — §5, §6: bins run with peer-to-peer sharing of layer outputs and gradients; ``pipeline.py`` —
  §5.2's multi-level pipeline as data (``--pipeline none|intra|inter|multi``); ``knobs.py`` its train knobs.
- ``simulate.py`` and ``schedules.py`` — §7's comparisons as a model: every full-graph system on one g3 plan's
  bins (g3's schedules, the baselines of §7.2, L-hop halo replication).
"""

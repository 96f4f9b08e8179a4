"""ByteGNN (paper 001 §4.2, §5.2): DistDGL's mini-batch training with sampling as task DAGs under a two-level
scheduler, on its own partition.

- ``partition.py`` — §4.2.3, Algorithm 2: K-hop blocks assigned greedily (the argmax over CE·BS, Algorithm 2's
  typo corrected; α, β, γ exposed as partition options).
- planning: distdgl's (its sampling options). The scheduler's settings change how a run executes, not what it
  computes, so they are ``g3 train`` knobs: one plan runs with the scheduler on or off.
- ``runtime.py`` — each step's sampling a DAG of chunk tasks on a thread pool, launched by Algorithm 1's
  launch-score; ``knobs.py`` its scheduler, pool, σ and task size.
- ``simulate.py`` — the kit's step model with the DAGs on the scheduler's threads.
"""

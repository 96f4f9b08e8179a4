"""SANCUS (paper 001 §4.3, §5.3): full-graph training with cached (stale) remote embeddings and skipped sends.

- ``plan.py`` — the boundary exchange (``--sancus-comm p2p``) or every owner's whole block (``broadcast``, the
  thesis's layout), and the staleness checks E, A and H (``--staleness``).
- ``runtime.py`` — the kit's layer-synchronous execution, each worker keeping its peers' rows and sending its own
  only when they are stale; gradients every epoch, as the authors' code does.
- ``simulate.py`` — its workers' epoch (a sending one and a skipping one) on a g3 plan's work.
"""

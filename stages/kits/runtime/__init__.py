"""The runtime every strategy runs on, shared by `g3 train` and `g3 eval` (docs/DESIGN.md, "Strategies: one
interface, one transport"):

* ``strategies/`` — the strategy interface (``base.py``) and one module per strategy (``g3``, ``bns_gcn``,
  ``sancus``, on ``layersync.py``); ``pipeline.py`` — G3's ``--pipeline`` schedules;
* ``transport.py`` — static P2P tables, all-to-all, broadcast, fetch by global id, counted in one place;
* ``worker.py`` — a rank's set-up (threads, process groups, model, strategy) and accuracy counting;
  ``launch.py`` — local processes or torchrun, per-rank logs and errors;
* ``models/``, ``block.py``, ``kernels/``, ``dropout.py``, ``sampling.py``, ``loss.py`` — the layers, their
  numba kernels and the counter-based hashes that make results independent of the worker count;
* ``config.py`` (how workers run), ``trace.py`` and ``profile.py`` (timelines, PROFILE.json), ``heap.py``,
  ``threads.py``, ``dataflow.py``, ``binexec.py``.
"""

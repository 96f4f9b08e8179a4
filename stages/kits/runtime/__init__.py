"""The runtime engine every strategy runs on, shared by `g3 train` and `g3 eval` (docs/DESIGN.md, "Strategies: one
interface, one transport"): the strategy interface (``strategy.py``) and the executions several strategies share
(``layersync.py``, ``minibatch.py``), the transport, a worker's set-up (``worker.py``), where workers run
(``launch/``), the models and their kernels (``models/``, ``kernels/``), the device path (``device/``), and the
counter-based hashes that make results independent of the worker count (``dropout.py``, ``sampling.py``)."""

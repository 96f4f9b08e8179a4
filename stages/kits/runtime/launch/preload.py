"""What the fork server imports once so that no forked worker pays for it (``stages/kits/runtime/launch/processes.py``).

Importing this module imports what torch and numba load only on first use (the module of the workers' entry, which
imports the strategies, is preloaded beside it: ``processes.preload_for``) (what an evaluation needs too is in ``preload_inference.py``): ``torch._dynamo`` (the first
``torch.optim`` optimizer's constructor imports it, 1.8 s of CPU on the 2-core sandbox),
``torch.fx.experimental.symbolic_shapes`` (the first ``empty_like`` of
``nn.utils.skip_init`` imports it) and numba's registries (below). Measured on a 4-worker run of a 240-node
graph, these were 60 % of each worker's CPU time (docs/BENCHMARKS.md, "The test suite").

Nothing here starts a thread of its own or a process group, so the server stays safe to fork: the one native
thread it gains is OpenBLAS's pool (scipy.linalg, imported by numba's registries), which OpenBLAS shuts down
before a fork and re-creates after, as it does for numpy's, which every torch process already has.
"""

from __future__ import annotations

import torch._dynamo  # noqa: F401  (first optimizer)
import torch.optim  # noqa: F401

from stages.kits.runtime.launch import preload_inference  # noqa: F401  (the strategies, skip_init's import, numba's registries)

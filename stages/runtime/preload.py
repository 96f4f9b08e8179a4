"""What the fork server imports once so that no forked worker pays for it (``stages/runtime/launch.py``).

Importing this module imports every registered strategy's runtime module and what torch and numba load only
on first use: ``torch._dynamo`` (the first ``torch.optim`` optimizer's constructor imports it, 1.8 s of CPU on
the 2-core sandbox), ``torch.fx.experimental.symbolic_shapes`` (the first ``empty_like`` of
``nn.utils.skip_init`` imports it) and numba's registries (below). Measured on a 4-worker run of a 240-node
graph, these were 60 % of each worker's CPU time (docs/BENCHMARKS.md, "The test suite").

Nothing here starts a thread of its own or a process group, so the server stays safe to fork: the one native
thread it gains is OpenBLAS's pool (scipy.linalg, imported by numba's registries), which OpenBLAS shuts down
before a fork and re-creates after, as it does for numpy's, which every torch process already has.
"""

from __future__ import annotations

import numba
import torch._dynamo  # noqa: F401  (first optimizer)
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (first skip_init)
import torch.optim  # noqa: F401

from ..common.strategies import STRATEGIES

for _info in STRATEGIES.values():
    _info.runtime_class()


@numba.njit(cache=True)
def _first_numba_function(x):
    return x + 1


# numba loads its typing and lowering registries (and scipy.linalg's BLAS, whose thread pool OpenBLAS re-creates
# after a fork) on the first compilation or cache load in a process: 0.6 s of CPU per worker, paid here once.
_first_numba_function(1)


from ..common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)

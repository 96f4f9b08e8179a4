"""What the fork server of an evaluation imports once so that no forked worker pays for it (besides the module of
the workers' entry, which imports the strategies: ``processes.preload_for``): ``torch.fx.experimental.symbolic_shapes`` (the first ``empty_like`` of
``nn.utils.skip_init`` imports it) and numba's registries (below). ``stages/kits/runtime/launch/preload.py`` adds what only
training needs (``torch._dynamo``, imported by the first optimizer); docs/BENCHMARKS.md, "g3 eval start-up".

Nothing here starts a thread of its own or a process group, so the server stays safe to fork (preload.py says
why OpenBLAS's pool is no exception).
"""

from __future__ import annotations

import numba
import torch.fx.experimental.symbolic_shapes  # noqa: F401  (first skip_init)


@numba.njit(cache=True)
def _first_numba_function(x):
    return x + 1


# numba loads its typing and lowering registries (and scipy.linalg's BLAS, whose thread pool OpenBLAS re-creates
# after a fork) on the first compilation or cache load in a process: 0.6 s of CPU per worker, paid here once.
_first_numba_function(1)


from stages.common import jit_cache  # noqa: E402 - after every kernel of the module is defined

jit_cache.adopt(globals())  # each missing kernel version compiled by one process (stages/common/jit_cache.py)

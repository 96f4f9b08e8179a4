"""What the fork server imports once for any run's workers (the module of their entry, which imports every
strategy's runtime, beside it: ``processes.preload_for``): ``torch.fx.experimental.symbolic_shapes`` (the first
``skip_init`` imports it) and numba's registries (below). Nothing here starts a thread of its own: the one native
thread the server gains is OpenBLAS's pool (scipy.linalg, imported by numba's registries), which OpenBLAS shuts
down before a fork and re-creates after."""

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

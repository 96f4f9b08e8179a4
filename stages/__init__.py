"""g3 pipeline stages: each subpackage is one stage with one entry function the CLI calls.

Importing it changes nothing outside g3 (numba's compile-once cache is given to g3's own kernels only:
``stages.common.jit_cache.adopt``)."""

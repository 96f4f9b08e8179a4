"""g3 pipeline stages: each subpackage is one stage with one entry function the CLI calls."""

from .common import jit_cache

jit_cache.install()  # before any stage's kernels are decorated: each missing kernel version compiled by one process

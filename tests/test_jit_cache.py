"""A kernel version missing from numba's cache is compiled by one process; the others load what it saved."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

KERNEL = """
import numba

@numba.njit(cache=True)
def kernel(x):
    total = 0.0
    for i in range(x.shape[0]):
        total += x[i] * x[i]
    return total
"""

# each process: wait until every process is ready (a file per process), then call the kernel at the same moment
PROBE = """
import json, os, sys, time
import numpy as np
from stages.common import jit_cache
sys.path.insert(0, sys.argv[1])
import kernel_module
jit_cache.adopt(vars(kernel_module))  # what each g3 kernel module does at its end
ready, n = os.path.join(sys.argv[1], "ready"), int(sys.argv[2])
open(os.path.join(ready, str(os.getpid())), "w").close()
while len(os.listdir(ready)) < n:
    time.sleep(0.005)
value = kernel_module.kernel(np.arange(4.0))
d = kernel_module.kernel
print(json.dumps({"value": value, "misses": sum(d._cache_misses.values()), "hits": sum(d._cache_hits.values()),
                  "cache": type(d._cache).__name__}))
"""


def run_together(folder: Path, n: int) -> list[dict]:
    (folder / "ready").mkdir(exist_ok=True)
    for f in (folder / "ready").iterdir():
        f.unlink()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", PROBE, str(folder), str(n)],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    return [json.loads(o[0].strip().splitlines()[-1]) for o in outs]


def test_processes_missing_the_same_version_compile_it_once(tmp_path):
    (tmp_path / "kernel_module.py").write_text(KERNEL)
    first = run_together(tmp_path, 3)
    assert {r["cache"] for r in first} == {"CompileOnceCache"}
    assert [r["value"] for r in first] == [14.0] * 3
    assert sum(r["misses"] for r in first) == 1 and sum(r["hits"] for r in first) == 2, first
    again = run_together(tmp_path, 2)  # what was saved is complete: later processes only load
    assert sum(r["misses"] for r in again) == 0 and sum(r["hits"] for r in again) == 2, again

"""CPU time of a mini-batch plan's two threads, apart (docs/BENCHMARKS.md, "Mini-batch training, one worker").

    .venv/bin/python examples/bench_minibatch_steps.py PLAN [--steps 40] [--compute-steps 10] [--threads 2]

Opens the plan's rank 0 in this process (a one-worker plan, e.g. `distdgl` from `g3 bench --workers 1`) and
measures, with ``time.process_time`` (CPU seconds of the whole process, so less sensitive to other load on the
machine than wall time): the sampler's work — ``--steps`` calls of the strategy's ``prepare`` (sampling and input
rows), as its sampler thread makes them, buffers given back as the compute thread gives them — and the compute's,
``--compute-steps`` forward + backward + Adam steps over prepared steps with torch and numba on one thread. The
two figures bound an idle epoch on two cores: between the larger of sampler and compute and their sum.
"""

from __future__ import annotations

import argparse
import socket
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from stages.kits.runtime.config import RuntimeConfig
from stages.strategies.registry import open_plan_worker


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("plan", type=Path)
    ap.add_argument(
        "--steps", type=int, default=40, help="prepare calls timed (an epoch of medium's bench: 40)"
    )
    ap.add_argument("--compute-steps", type=int, default=10)
    ap.add_argument(
        "--threads", type=int, default=2, help="threads of the sampler's own kernels (index_select)"
    )
    a = ap.parse_args()
    worker = open_plan_worker(
        0,
        1,
        a.plan,
        RuntimeConfig(threads=a.threads, knobs={"prefetch": "off"}),
        f"tcp://127.0.0.1:{free_port()}",
    )
    st = worker.strategy
    st.prepare(0, 0)  # compiles or loads the kernels
    for epoch in (1, 2):
        held, sample, rows = None, 0.0, 0.0
        cpu, wall = time.process_time(), time.perf_counter()
        for step in range(a.steps):
            prep = st.prepare(epoch, step)
            sample, rows = sample + prep.seconds["sample"], rows + prep.seconds["fetch"]
            if hasattr(st, "row_buffers"):  # (code before the buffers: nothing to give back)
                st.row_buffers.give(held)
            held = getattr(prep, "buffer", None)
        print(
            f"sampler, epoch {epoch}: {time.process_time() - cpu:.3f} s CPU for {a.steps} steps "
            f"({time.perf_counter() - wall:.3f} s wall: sampling {sample:.3f}, input rows {rows:.3f})"
        )
    torch.set_num_threads(1)
    import numba

    numba.set_num_threads(1)
    preps = [st.prepare(1, k) for k in range(a.compute_steps)]
    opt = torch.optim.Adam(st.model.parameters(), lr=0.01)

    def steps() -> None:
        for k, prep in enumerate(preps):
            out = st.run_blocks(1, k, prep)
            loss = F.cross_entropy(out, st.target_labels(prep.blocks[-1].dst))
            opt.zero_grad()
            loss.backward()
            opt.step()

    steps()  # warm
    cpu, wall = time.process_time(), time.perf_counter()
    steps()
    n = len(preps)
    print(
        f"compute, one thread: {(time.process_time() - cpu) / n * 1e3:.1f} ms CPU a step "
        f"({(time.perf_counter() - wall) / n * 1e3:.1f} ms wall)"
    )
    st.close()


if __name__ == "__main__":
    main()

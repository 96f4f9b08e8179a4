"""Usage: python examples/bench_all_to_all.py RATE HOSTS [--bytes N] [--repeat R]

gloo's ``all_to_all_single`` against point-to-point ``isend``/``irecv`` posted at once (what g3's transport does,
stages/kits/runtime/transport.py ``_post_exchange``), on HOSTS emulated hosts joined by links of RATE
(stages/kits/runtime/launch/netemu.py; needs root). Each host runs one gloo process that sends N/4/(HOSTS-1) float32
values to every other host and receives as many; the two ways alternate, R rounds each, and the median time of
each is printed. docs/BENCHMARKS.md ("gloo's all-to-all moved one direction at a time") has the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

PORT = 29511


def worker(rank: int, world: int, master: str, nbytes: int, repeat: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{master}:{PORT}", rank=rank, world_size=world)
    per = max(1, nbytes // 4 // (world - 1))
    send, out = torch.ones(per * world), torch.empty(per * world)
    times: dict[str, list[float]] = {}
    for way in ["all_to_all_single", "isend/irecv"] * repeat:
        dist.barrier()
        t0 = time.perf_counter()
        if way == "all_to_all_single":
            dist.all_to_all_single(out, send, [per] * world, [per] * world)
        else:
            works = [dist.irecv(out[q * per : (q + 1) * per], q) for q in range(world) if q != rank]
            works += [dist.isend(send[q * per : (q + 1) * per], q) for q in range(world) if q != rank]
            for w in works:
                w.wait()
        times.setdefault(way, []).append(time.perf_counter() - t0)
    if rank == 0:
        print(json.dumps({way: statistics.median(t) for way, t in times.items()}), flush=True)
    dist.destroy_process_group()


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(*(int(x) for x in sys.argv[2:4]), sys.argv[4], int(sys.argv[5]), int(sys.argv[6]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rate")
    ap.add_argument("hosts", type=int)
    ap.add_argument(
        "--bytes", type=int, default=26 << 20, help="bytes each host sends in all (default 26 MiB)"
    )
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    from stages.kits.runtime.launch.netemu import EmulatedNetwork, parse_rate, why_not_available

    reason = why_not_available()
    if reason:
        raise SystemExit(f"bench_all_to_all.py: emulated hosts are not available here: {reason}")
    net = EmulatedNetwork(args.hosts, parse_rate(args.rate))
    net.create()
    try:
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0", "TORCH_CPP_LOG_LEVEL": "ERROR"}
        procs = [
            subprocess.Popen(
                [
                    *net.exec_prefix(r),
                    sys.executable,
                    __file__,
                    "--worker",
                    str(r),
                    str(args.hosts),
                    net.address(0),
                    str(args.bytes),
                    str(args.repeat),
                ],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for r in range(args.hosts)
        ]
        out = procs[0].communicate(timeout=600)[0].strip().splitlines()[-1]
        for p in procs:
            p.wait(timeout=60)
    finally:
        net.destroy()
    medians = json.loads(out)
    print(
        f"{args.rate}, {args.hosts} hosts, {args.bytes:,} bytes per host: "
        + ", ".join(f"{way} {t * 1e3:.2f} ms" for way, t in medians.items())
    )


if __name__ == "__main__":
    main()

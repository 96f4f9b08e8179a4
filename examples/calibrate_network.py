"""Usage: python examples/calibrate_network.py [--rates 100mbit,1gbit,10gbit] [--repeat 7] [-o calibration.json]

Fits the network constants of `g3 simulate` (stages/kits/simulate/calibration.py) on g3's emulated hosts: two
network namespaces joined by links shaped to each rate (stages/kits/runtime/launch/netemu.py), one gloo process on each —
the transport g3's workers use. For each message size n it times a ping-pong of n bytes each way (the median
of --repeat rounds) and fits the one-way time

    t(n) = overhead + n / (share × rate)

``overhead`` is the fixed cost of one message (gloo, the kernel, both hosts' Python), ``share``
the fraction of the link's bytes that arrive as payload (TCP/IP and Ethernet headers take the rest: 1448 of
every 1514 bytes with MTU 1500 and TCP timestamps, 0.956). ``overhead`` is the smallest messages' one-way time,
``share`` the slope between the two largest sizes (where the fixed costs cancel). Needs root (or CAP_NET_ADMIN);
takes ~20 s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SIZES = (4, 4096, 65536, 1 << 20, 8 << 20)
PORT = 29500


def worker(rank: int, master: str, sizes: list[int], repeat: int) -> None:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{master}:{PORT}", rank=rank, world_size=2)

    def ping_pong(buf) -> None:  # rank 0 sends, rank 1 sends it back
        if rank == 0:
            dist.send(buf, 1)
            dist.recv(buf, 1)
        else:
            dist.recv(buf, 0)
            dist.send(buf, 0)

    warm = torch.zeros(1 << 18)
    for _ in range(5):  # the connection's first messages (set-up, TCP's slow start) are not what is fitted
        ping_pong(warm)
    out = {}
    for n in sizes:
        buf = torch.zeros(max(1, n // 4), dtype=torch.float32)
        times = []
        for _ in range(repeat + 1):  # the first round warms the connection up
            dist.barrier()
            t0 = time.perf_counter()
            ping_pong(buf)
            times.append((time.perf_counter() - t0) / 2)
        out[n] = statistics.median(times[1:])
    if rank == 0:
        print(json.dumps(out), flush=True)
    dist.destroy_process_group()


def fit(times: dict[int, float], rate_bits: int) -> dict:
    """``overhead``: the one-way time of the smallest messages (4 B, 4 KiB: the link time of 4 KiB is at most
    0.33 ms at 100 Mbit/s, so the larger of the two bounds it); ``share``: from the slope between the two largest
    sizes, where the fixed costs cancel."""
    sizes = sorted(times)
    overhead = min(times[n] for n in sizes[:2])
    big, bigger = sizes[-2], sizes[-1]
    slope = (times[bigger] - times[big]) / (bigger - big)  # seconds per byte
    return {
        "overhead_seconds": overhead,
        "share": 1.0 / (slope * rate_bits / 8),
        "one_way_seconds": {str(n): times[n] for n in sizes},
    }


def measure(rate: str, repeat: int) -> dict:
    from stages.kits.runtime.launch.netemu import EmulatedNetwork, parse_rate

    bits = parse_rate(rate)
    net = EmulatedNetwork(2, bits)
    net.create()
    try:
        env = {**os.environ, "GLOO_SOCKET_IFNAME": "eth0", "TORCH_CPP_LOG_LEVEL": "ERROR"}
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            "RANK",
            net.address(0),
            ",".join(map(str, SIZES)),
            str(repeat),
        ]
        procs = [
            subprocess.Popen(
                [*net.exec_prefix(r), *[str(r) if c == "RANK" else c for c in cmd]],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for r in range(2)
        ]
        outs = [p.communicate(timeout=300)[0] for p in procs]
        if any(p.returncode for p in procs):
            raise SystemExit(f"calibrate_network.py: a worker failed at {rate}")
        times = {int(k): v for k, v in json.loads(outs[0].strip().splitlines()[-1]).items()}
    finally:
        net.destroy()
    return {"rate": rate, "rate_bits": bits, **fit(times, bits)}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], [int(x) for x in sys.argv[4].split(",")], int(sys.argv[5]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="100mbit,1gbit,10gbit")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("-o", "--out", default=None, help="write the fits as JSON here")
    args = ap.parse_args()
    from stages.kits.runtime.launch.netemu import why_not_available

    reason = why_not_available()
    if reason:
        raise SystemExit(f"calibrate_network.py: emulated hosts are not available here: {reason}")
    fits = [measure(r, args.repeat) for r in args.rates.split(",")]
    for f in fits:
        sizes = "  ".join(f"{int(n):>8} B {t * 1e3:8.3f} ms" for n, t in f["one_way_seconds"].items())
        print(
            f"{f['rate']:>8}: overhead {f['overhead_seconds'] * 1e6:7.0f} us  share {f['share']:.3f}   {sizes}"
        )
    if args.out:
        Path(args.out).write_text(
            json.dumps({"created": time.strftime("%Y-%m-%dT%H:%M:%S"), "fits": fits}, indent=1)
        )


if __name__ == "__main__":
    main()

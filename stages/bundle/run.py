"""`g3 bundle PLAN --nodes N`: one self-contained folder per host of a multi-host run, nothing shared.

Entry point: :func:`run_bundle`. Node n of N (``--procs-per-node P``, N × P = the plan's K) runs the ranks
``n·P … n·P + P − 1``; its folder holds exactly what those ranks read (the layout: docs/ARTIFACTS.md, "Bundle").
Under torchrun, a process of a node folder takes the rank ``ranks[LOCAL_RANK]`` of its folder, whatever rank
the rendezvous gave its agent, so every process finds its own shard and plan on its own host.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from stages.common.artifact_json import reference
from stages.common.atomic import atomic_dir, check_target, write_json_atomic
from stages.common.errors import G3InputError
from stages.common.partition_artifact import load_partition_meta, partition_layouts, shard_dir
from stages.strategies.registry import load_plan

BUNDLE_SCHEMA = "g3.bundle"
BUNDLE_VERSION = 1
DEFAULT_PORT = 29400


def node_name(n: int) -> str:
    return f"node-{n:05d}"


def run_bundle(
    plan: str | Path,
    nodes: int,
    procs_per_node: int | None = None,
    out: str | Path | None = None,
    force: bool = False,
) -> dict:
    """Write the node folders of PLAN for ``nodes`` hosts; returns bundle.json."""
    plan = Path(plan)
    meta = load_plan(plan)[0]
    if meta.get("bundle"):
        raise G3InputError(
            "this plan is a node folder of a bundle already; bundle the original plan", path=plan
        )
    part = Path(meta["partition"]["path"])
    layouts = layout_folders(load_partition_meta(part))
    k = int(meta["num_workers"])
    if nodes < 1:
        raise G3InputError("--nodes must be >= 1")
    if procs_per_node is None:
        if k % nodes:
            raise G3InputError(
                f"the plan's {k} workers do not split evenly over {nodes} nodes; give "
                "--procs-per-node, or a node count that divides the workers",
                path=plan,
            )
        procs_per_node = k // nodes
    if procs_per_node < 1 or nodes * procs_per_node != k:
        raise G3InputError(
            f"--nodes {nodes} x --procs-per-node {procs_per_node} = {nodes * procs_per_node} "
            f"processes, the plan has {k} workers (each process runs one)",
            path=plan,
        )
    for r in range(k):  # every input present before anything is written
        for folder in (*(shard_dir(part, r, layout) for layout in layouts), plan / f"worker-{r:05d}"):
            if not folder.is_dir():
                raise G3InputError(f"{folder.name} is missing: cannot bundle rank {r}", path=folder.parent)
    out = Path(out) if out else plan.parent / f"{plan.name}.bundle-{nodes}"
    check_target(out, force, "bundle", (plan, part))
    ranks = [list(range(n * procs_per_node, (n + 1) * procs_per_node)) for n in range(nodes)]
    with atomic_dir(out, force=force, kind="bundle", inputs=(plan, part)) as tmp:
        for n, mine in enumerate(ranks):
            _write_node(tmp / node_name(n), n, mine, nodes, procs_per_node, plan, part, meta, layouts)
        bundle = {
            "schema": BUNDLE_SCHEMA,
            "schema_version": BUNDLE_VERSION,
            "plan": reference(plan, out),
            "strategy": meta["strategy"]["name"],
            "num_workers": k,
            "nodes": nodes,
            "procs_per_node": procs_per_node,
            "ranks": ranks,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        write_json_atomic(tmp / "bundle.json", bundle)
    return {**bundle, "path": str(out)}


def host_folders(plan: Path, hosts: int, out: Path) -> list[tuple[Path, list[int]]]:
    """PLAN's node folders for ``hosts`` hosts written to ``out``, each with the ranks it runs: the disks of the
    emulated hosts (`--emulate-link`), which launch their workers from them as real hosts do."""
    bundle = run_bundle(plan, nodes=hosts, out=out)
    return [(Path(bundle["path"]) / node_name(n), ranks) for n, ranks in enumerate(bundle["ranks"])]


def layout_folders(part_meta: dict) -> tuple[str | None, ...]:
    """The :func:`shard_dir` layout argument of every layout a partition records: None for the primary one
    (``PART/part-RRRRR``), the name of each further one (``PART/<layout>/part-RRRRR``)."""
    return (None, *partition_layouts(part_meta)[1:])


def _write_node(
    folder: Path,
    n: int,
    ranks: list[int],
    nodes: int,
    ppn: int,
    plan: Path,
    part: Path,
    meta: dict,
    layouts: tuple[str | None, ...],
) -> None:
    node_part, node_plan = folder / "partition", folder / "plan"
    node_part.mkdir(parents=True)
    node_plan.mkdir()
    # the same bytes: the plan's digest holds
    shutil.copy2(part / "partition.json", node_part / "partition.json")
    if (part / "assignment.npy").is_file():  # global id -> owner, for strategies that fetch by global id
        shutil.copy2(part / "assignment.npy", node_part / "assignment.npy")
    for r in ranks:
        for layout in layouts:
            shutil.copytree(shard_dir(part, r, layout), shard_dir(node_part, r, layout))
        shutil.copytree(plan / f"worker-{r:05d}", node_plan / f"worker-{r:05d}")
    for shared in sorted(plan.iterdir()):  # what every rank of a plan reads (a replicated topology/, chunks/)
        if shared.is_dir() and not shared.name.startswith("worker-"):
            shutil.copytree(shared, node_plan / shared.name)
    node_meta = json.loads((plan / "plan.json").read_text())
    node_meta["partition"] = {**node_meta["partition"], "relpath": "../partition"}
    node_meta["bundle"] = {"node": n, "nodes": nodes, "procs_per_node": ppn, "ranks": ranks}
    write_json_atomic(node_plan / "plan.json", node_meta, seal=True)
    (folder / "RUN.md").write_text(run_instructions(n, nodes, ppn, ranks, meta))


def run_instructions(n: int, nodes: int, ppn: int, ranks: list[int], meta: dict) -> str:
    return f"""# Node {n} of {nodes}: ranks {ranks[0]}–{ranks[-1]} of the {meta["num_workers"]}-worker plan

Copy this folder to the host (nothing else is needed: its shards and plan folders, the partition and plan
JSONs, references relative to this folder), install g3 there, and from this folder run:

```
torchrun --nnodes {nodes} --nproc-per-node {ppn} --rdzv-backend c10d --rdzv-endpoint HOST0:{DEFAULT_PORT} \\
         --rdzv-conf is_host={1 if n == 0 else 0} --local-addr THIS_HOST \\
         --rdzv-id JOB --max-restarts 3 -m g3cli.main train plan -o run --checkpoint-every 10 --epochs 100
```

- `HOST0:{DEFAULT_PORT}`: the address of the host that serves the rendezvous (node 0 here) and a free port, the
  same on every host; `JOB`: any id, the same on every host. The hosts may start in any order.
- `--rdzv-conf is_host=1` on the host that serves the rendezvous, `is_host=0` on the others: torchrun otherwise
  guesses by comparing HOST0 with the machine's host name, and where names do not identify the hosts (addresses
  given as IPs, containers, several interfaces) no host, or every host, serves it.
- `--local-addr THIS_HOST`: this host's address as the other hosts reach it. Without it, the workers of a host
  publish the address its host name resolves to — often `localhost` or another interface — and the others cannot
  dial it (the group fails after `--timeout`).
- Each process takes the rank `ranks[LOCAL_RANK]` of this folder ({ranks}), whatever rank the rendezvous gives.
- `run/` is this host's run folder: its ranks' logs and every checkpoint (weights are replicated, so any
  host can resume); the host with rank 0 also writes run.json, metrics.jsonl and model.pt.
- With `--max-restarts R`, a worker group that lost a worker restarts and resumes from the newest checkpoint
  every host has, by itself.
- Network: set `GLOO_SOCKET_IFNAME` (and `NCCL_SOCKET_IFNAME` with `--device cuda`) to the interface the hosts
  reach each other on; `--timeout` (seconds) bounds how long a worker waits for a peer.
See docs/MULTINODE.md.
"""

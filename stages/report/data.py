"""Reading a run folder for `g3 report`: run.json, metrics.jsonl, eval.json, and the plan/partition it names.

Everything here is plain Python (no torch), so `g3 report` starts quickly and works on a machine that only has
the run folders. Derived series (throughput, per-worker time breakdown, the summary row) are computed here and
drawn by :mod:`stages.report.plots`.

Throughput follows the G3 paper (§7): the sum of all workers' average throughput, where a worker's throughput
is the number of nodes it processes per second in a training epoch = its owned nodes / its epoch time.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

from stages.common.artifact_json import read_json_file
from stages.common.errors import G3InputError
from stages.common.run_artifact import load_run_meta, read_metrics
from stages.strategies.registry import LEGACY_STRATEGY


def _artifact(ref: str | None, run: Path, marker: str, relpath: str | None = None) -> Path | None:
    """The folder a run.json reference points to — relative to the run first — else a folder of that name beside
    the run (moved together)."""
    if not ref:
        return None
    p = Path(ref)
    for cand in ((run / relpath,) if relpath else ()) + (p, run.parent / p.name, run.parent.parent / p.name):
        if (cand / marker).is_file():
            return cand
    return None


@dataclass
class RunData:
    """One run folder, loaded and checked."""

    path: Path
    meta: dict
    epochs: list[dict]
    label: str = ""
    eval: dict | None = None
    plan: dict | None = None
    partition: dict | None = None
    owned: list[float] | None = None  # owned nodes per worker
    owned_source: str = ""
    notes: list[str] = field(default_factory=list)

    # -- configuration ------------------------------------------------------------------------------------
    @property
    def num_workers(self) -> int:
        k = (self.meta.get("plan") or {}).get("num_workers")
        return int(k) if k else max(len(r.get("workers") or []) for r in self.epochs) or 1

    @property
    def model(self) -> str:
        return str(((self.meta.get("plan") or {}).get("model") or {}).get("model", "?"))

    @property
    def method(self) -> str:
        return str((self.meta.get("partition") or {}).get("method", "?"))

    @property
    def pipeline(self) -> str:
        value = (self.meta.get("config") or {}).get("pipeline", "?")
        return "-" if value is None else str(value)  # strategies without g3's pipeline record none

    @property
    def strategy(self) -> str:
        """The strategy that trained the run (runs older than strategies were all g3's)."""
        return str((self.meta.get("strategy") or {}).get("name", LEGACY_STRATEGY))

    @property
    def strategy_options(self) -> dict:
        return dict((self.meta.get("strategy") or {}).get("options") or {})

    @property
    def store_name(self) -> str:
        return str((self.meta.get("store") or {}).get("name", "?"))

    def attributes(self) -> dict:
        """What distinguishes runs from one another (used to label and group them)."""
        model = (self.meta.get("plan") or {}).get("model") or {}
        bin_size = self.strategy_options.get("bin_size", model.get("bin_size"))
        return {
            "strategy": self.strategy,
            "graph": self.store_name,
            "model": self.model,
            "partition": self.method,
            "pipeline": self.pipeline,
            "bin size": bin_size or "auto",
            "device": (self.meta.get("config") or {}).get("device"),
        }

    # -- series -------------------------------------------------------------------------------------------
    def cumulative_seconds(self) -> list[float]:
        out, t = [], 0.0
        for r in self.epochs:
            t += float(r["epoch_seconds"])
            out.append(t)
        return out

    def accuracy(self, split: str) -> list[tuple[int, float, float]]:
        """(epoch, cumulative training seconds, accuracy) where the split was evaluated."""
        return [
            (int(r["epoch"]), t, float(r[f"{split}_acc"]))
            for r, t in zip(self.epochs, self.cumulative_seconds(), strict=True)
            if r.get(f"{split}_acc") is not None
        ]

    def throughput(self) -> list[float] | None:
        """Nodes per second of every epoch: sum over workers of owned nodes / that worker's epoch time."""
        if self.owned is None:
            return None
        out = []
        for r in self.epochs:
            workers = r.get("workers") or []
            total = 0.0
            for i, owned in enumerate(self.owned):
                w = workers[i] if i < len(workers) and isinstance(workers[i], dict) else {}
                t = float(w.get("epoch_seconds", r["epoch_seconds"]))
                total += owned / t if t > 0 else 0.0
            out.append(total)
        return out

    def bytes_per_epoch(self) -> float:
        """Bytes all workers sent for training per epoch: the mean over the epochs after the first (which also
        fetches the input features) of every phase but evaluation's; the median of ``bytes_sent`` for runs
        that record no phases."""
        epochs = self.steady_epochs()
        phases = [
            [w.get("bytes_sent_per_phase") for w in r.get("workers") or [] if isinstance(w, dict)]
            for r in epochs
        ]
        if epochs and all(p and all(isinstance(x, dict) for x in p) for p in phases):
            return statistics.fmean(
                sum(n for per in p for ph, n in per.items() if not ph.startswith("eval")) for p in phases
            )
        return statistics.median(float(r.get("bytes_sent") or 0) for r in self.epochs)

    def steady_epochs(self) -> list[dict]:
        """The epochs averaged in per-worker figures: all but the first (warm-up, one-time feature exchange)."""
        return self.epochs[1:] if len(self.epochs) > 1 else self.epochs

    def worker_breakdown(self) -> list[dict]:
        """Per worker, mean seconds per epoch of compute, communication wait, all-reduce + step, and idle."""
        epochs = self.steady_epochs()
        k = max(len(r.get("workers") or []) for r in epochs)
        rows = []
        for i in range(k):
            acc = {"compute": 0.0, "comm_wait": 0.0, "sync": 0.0, "idle": 0.0, "epoch": 0.0}
            n, rank = 0, i
            for r in epochs:
                ws = r.get("workers") or []
                if i >= len(ws) or not isinstance(ws[i], dict):
                    continue
                w = ws[i]
                rank = int(w.get("rank", i))
                t = float(w.get("epoch_seconds", r["epoch_seconds"]))
                c, m, s = (float(w.get(f"{key}_seconds") or 0.0) for key in ("compute", "comm_wait", "sync"))
                for key, seconds in zip(acc, (c, m, s, max(0.0, t - c - m - s), t), strict=True):
                    acc[key] += seconds
                n += 1
            rows.append({"rank": rank, **{key: v / n if n else 0.0 for key, v in acc.items()}, "epochs": n})
        return rows

    def summary(self) -> dict:
        times = [float(r["epoch_seconds"]) for r in self.epochs]
        tp = self.throughput()
        out = {
            "label": self.label,
            "path": str(self.path),
            "status": self.meta.get("status"),
            "strategy": self.strategy,
            "graph": self.store_name,
            "model": self.model,
            "partition": self.method,
            "pipeline": self.pipeline,
            "workers": self.num_workers,
            "epochs": len(self.epochs),
            "train_seconds": sum(times),
            "median_epoch_seconds": statistics.median(times),
            "throughput_nodes_per_second": statistics.median(tp) if tp else None,
            "throughput_source": self.owned_source or None,
            "bytes_sent_per_epoch": self.bytes_per_epoch(),
        }
        for split in ("valid", "test"):
            acc = self.accuracy(split)
            out[f"final_{split}_acc"] = acc[-1][2] if acc else None
            out[f"best_{split}_acc"] = max(a for _, _, a in acc) if acc else None
        # one epoch's share is noisy
        for key in ("comm_hidden_share", "comm_waited_share", "comm_moving_share"):
            traced = [float(r[key]) for r in self.epochs if r.get(key) is not None]
            out[key] = statistics.median(traced) if traced else None
        ev = (self.eval or {}).get("accuracy") or {}
        out["eval_test_acc"] = ev.get("test")
        out["eval_valid_acc"] = ev.get("valid")
        return out


def load_run(path: str | Path) -> RunData:
    """Load and check one run folder; bad input raises :class:`G3InputError`."""
    run = Path(path)
    if not run.is_dir():
        raise G3InputError("not a g3 run folder (no such folder)", path=run)
    if not (run / "run.json").is_file():
        raise G3InputError("not a g3 run (no run.json; run `g3 train` first)", path=run)
    meta = load_run_meta(run)  # a "running" run nobody holds the lock of reads as interrupted
    data = RunData(path=run, meta=meta, epochs=read_metrics(run))
    if (run / "eval.json").is_file():
        data.eval = read_json_file(run / "eval.json", required={})
    plan_dir = _artifact(
        (meta.get("plan") or {}).get("path"), run, "plan.json", (meta.get("plan") or {}).get("relpath")
    )
    if plan_dir is not None:
        data.plan = read_json_file(plan_dir / "plan.json", required={})
    part_ref = meta.get("partition") or {}
    part_dir = None
    if plan_dir is not None and part_ref.get("relpath"):  # relative to the plan, as the plan records it
        part_dir = _artifact(part_ref.get("path"), plan_dir, "partition.json", part_ref["relpath"])
    part_dir = part_dir or _artifact(part_ref.get("path"), run, "partition.json")
    if part_dir is not None:
        data.partition = read_json_file(part_dir / "partition.json", required={})
        data.partition.setdefault("path", str(part_dir))
    _owned_nodes(data)
    return data


def _owned_nodes(data: RunData) -> None:
    """Owned nodes per worker: from the metrics if recorded, else the plan, else the partition, else the store's
    node count split evenly (the sum, which is what the throughput adds up, is then still exact)."""
    first = data.epochs[-1].get("workers") or []
    if first and all(isinstance(w, dict) and w.get("num_owned") is not None for w in first):
        data.owned, data.owned_source = [float(w["num_owned"]) for w in first], "metrics.jsonl"
        return
    if data.plan and data.plan.get("workers"):
        data.owned = [
            float(w["num_owned"]) for w in sorted(data.plan["workers"], key=lambda w: w.get("rank", 0))
        ]
        data.owned_source = "plan.json"
        return
    if data.partition and data.partition.get("partitions") and _row_layout(data.partition):
        data.owned = [float(p["nodes"]) for p in data.partition["partitions"]]
        data.owned_source = "partition.json"
        return
    n = (data.meta.get("store") or {}).get("num_nodes")
    k = data.num_workers
    if n:
        data.owned, data.owned_source = [float(n) / k] * k, "run.json store node count / workers"
        data.notes.append("plan and partition not found: throughput uses the store's node count split evenly")
        return
    data.notes.append("no node counts found (plan, partition and store metadata missing): no throughput")


def _row_layout(partition: dict) -> bool:
    """Whether a partition.json's primary layout is ``rows`` (its per-partition node counts are owned nodes);
    a version 1 file without ``layouts`` has those its method implies."""
    from stages.common.partition_artifact import V1_LAYOUTS

    layouts = partition.get("layouts") or V1_LAYOUTS.get(partition.get("method"), ("rows",))
    return layouts[0] == "rows"


def label_runs(runs: list[RunData], labels: list[str] | None = None) -> None:
    """Give every run a short distinct label: the given one, else the folder name (with parents if needed),
    prefixed with the run's strategy when the runs come from several strategies."""
    if labels:
        if len(labels) != len(runs):
            raise G3InputError(f"{len(labels)} --label given for {len(runs)} runs; give one per run or none")
        for r, lab in zip(runs, labels, strict=True):
            r.label = lab
        return
    depth = 1
    while True:
        names = ["/".join(r.path.resolve().parts[-depth:]) for r in runs]
        if len(set(names)) == len(names) or depth > 6:
            break
        depth += 1
    several = len({r.strategy for r in runs}) > 1  # labels say the strategy when runs of several are compared
    for r, name in zip(runs, names, strict=True):
        r.label = f"{r.strategy}: {name}" if several and r.strategy not in name else name

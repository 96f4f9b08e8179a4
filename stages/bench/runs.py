"""g3's own entries of `g3 bench`: each strategy of ``--strategies`` with each ``--workers K``, on the same store,
model, epochs and threads — partition (the strategy's default method, or ``NAME@METHOD``), plan, train.

A strategy spec is ``NAME[@METHOD][{option=value,...}]``, e.g. ``g3``, ``bns-gcn@chunk``,
``bns-gcn{boundary-sample=0.1}``, ``sancus{staleness=drift:0.02,sancus-comm=p2p}``: option names as ``g3 plan``
spells them (without ``--``). Partitions and plans are kept in the bench folder and reused while they match.
"""

from __future__ import annotations

import json
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from stages.common.atomic import write_json_atomic
from stages.common.errors import G3InputError, G3RuntimeError
from stages.common.partition_artifact import partition_digest
from stages.common.store import GraphStore
from stages.strategies.registry import check_partition_method, knob_accepts, strategy_spec

SPEC = re.compile(r"^(?P<name>[a-z0-9-]+)(?:@(?P<method>[a-z0-9-]+))?(?:\{(?P<opts>[^{}]*)\})?$")


@dataclass(frozen=True)
class BenchEntry:
    name: str
    method: str
    options: tuple[tuple[str, str], ...] = field(default_factory=tuple)  # (option name, text) as given

    @property
    def label(self) -> str:
        opts = ", ".join(f"{k.replace('_', '-')}={v}" for k, v in self.options)
        return f"{self.name}@{self.method}" + (f" {{{opts}}}" if opts else "")

    @property
    def slug(self) -> str:
        """A folder-name form of the spec (strategy, method, options)."""
        text = self.name + "".join(f"-{k}-{v}" for k, v in self.options)
        return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def split_specs(text: str) -> list[str]:
    """Comma-separated specs; commas inside ``{...}`` belong to the spec."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return [s for s in out if s]


def parse_spec(text: str) -> BenchEntry:
    """One ``--strategies`` item; bad input names the item and what is wrong."""
    m = SPEC.match(text.strip())
    if not m:
        raise G3InputError(f"--strategies: {text!r} is not NAME[@METHOD][{{option=value,...}}]")
    info = strategy_spec(m.group("name"))
    method = m.group("method") or info.default_method
    check_partition_method(info, method, f"--strategies {text}")
    known = {o.name for o in info.plan_options} | set(info.train_knobs)  # plan options and `g3 train` knobs
    opts = []
    # a comma starts the next option only where ``name=`` follows: values may hold commas (fanouts=25,10)
    for item in filter(None, (s.strip() for s in re.split(r",(?=\s*[-\w]+\s*=)", m.group("opts") or ""))):
        if "=" not in item:
            raise G3InputError(f"--strategies: {text!r}: option {item!r} needs a value (option=value)")
        key, value = (s.strip() for s in item.split("=", 1))
        name = key.lstrip("-").replace("-", "_")
        if name not in known:
            raise G3InputError(
                f"--strategies: {text!r}: {info.name} has no option {key!r} "
                f"(it has {', '.join(sorted(known)) or 'none'})"
            )
        if info.knob(name):
            try:
                info.knob(name).parse(value)
            except ValueError as exc:
                raise G3InputError(
                    f"--strategies: {text!r}: {info.name} does not take {key}={value} ({exc})"
                ) from None
        opts.append((name, value))
    return BenchEntry(info.name, method, tuple(opts))


def candidate_configs(o, spec: BenchEntry, k: int = 1) -> tuple[dict, dict]:
    """A spec's plan options (the bench's memory options where the strategy has them, its own winning) and the
    ``TrainConfig`` keywords of its run with K workers."""
    info = strategy_spec(spec.name)
    knobs = {n: info.knob(n).parse(v) for n, v in spec.options if n in info.train_knobs}
    options = {n: v for n, v in spec.options if n not in info.train_knobs}
    # the bench's memory options go to every strategy that has them (g3's bins, neutrontp's chunks)
    own = {opt.name for opt in info.plan_options}
    options = {
        **{n: v for n, v in (("bin_size", o.bin_size), ("device_memory", o.device_memory)) if n in own},
        **options,
    }
    bench_pipeline = o.pipeline if knob_accepts(info, "pipeline", o.pipeline) else None
    train = dict(
        epochs=o.epochs, lr=o.lr, dropout=o.dropout, workers=k, knobs={"pipeline": bench_pipeline, **knobs}
    )
    return options, train


def check_candidate(o, spec: BenchEntry) -> None:
    """The checks `g3 plan` and `g3 train` apply to a spec's options and settings (their own definitions), so a
    bad value is one line before the first run, not a failure per run."""
    from stages.plan import parse_options
    from stages.train import TrainConfig

    options, train = candidate_configs(o, spec)
    try:
        parse_options(spec.name, {n: None if v is None else str(v) for n, v in options.items()})
    except G3InputError as exc:
        raise G3InputError(f"--strategies {spec.label}: {exc}") from None
    TrainConfig(**train).check()  # the bench's own --lr, --dropout, ... (a spec's knobs were parsed already)


def _reuse_partition(part: Path, store: GraphStore, method: str, k: int) -> bool:
    f = part / "partition.json"
    if not f.is_file():
        return False
    try:
        meta = json.loads(f.read_text())
    except json.JSONDecodeError:
        return False
    sums = store.meta.get("checksums", {})
    return (
        meta.get("num_partitions") == k
        and meta.get("method") == method
        and bool(sums)
        and meta.get("store", {}).get("checksums", {}).get("indices") == sums.get("indices")
    )


def _train_bytes(record: dict) -> int:
    """Bytes sent in an epoch's training (evaluation's exchanges left out), all workers."""
    return sum(
        n
        for w in record["workers"]
        for phase, n in (w.get("bytes_sent_per_phase") or {}).items()
        if not phase.startswith("eval")
    )


def entry(system: str, label: str, status: str = "ok", **kw) -> dict:
    """One row of bench.json's ``entries``: the system, its label and status, a note and its epoch times first."""
    return {
        "system": system,
        "label": label,
        "status": status,
        "note": kw.pop("note", ""),
        "epoch_seconds": kw.pop("epoch_seconds", []),
        **kw,
    }


def _partition_and_plan(store: GraphStore, o, spec: BenchEntry, k: int, part: Path, plan: Path) -> dict:
    """Partition and plan ``spec`` for K workers, reusing what still matches; the spec's training knobs."""
    from stages.partition import PartitionOptions, run_partition
    from stages.plan import PlanConfig, run_plan

    if not _reuse_partition(part, store, spec.method, k):
        run_partition(
            store.path, PartitionOptions(workers=k, method=spec.method, hidden=o.hidden), out=part, force=True
        )
    options, train = candidate_configs(o, spec, k)
    model = {field: getattr(o, field) for field in ("model", "layers", "hidden", "heads")}
    cfg = PlanConfig(**model, strategy=spec.name, options=options)
    # the plan is reused while it was made from the same partition and configuration (a stamp beside it)
    stamp = plan.parent / f"{plan.name}.bench-stamp.json"
    want = {
        "config": model,
        "options": {k_: (None if v is None else str(v)) for k_, v in options.items()},
        "partition": partition_digest(part),
    }
    if not (plan / "plan.json").is_file() or not stamp.is_file() or json.loads(stamp.read_text()) != want:
        run_plan(part, cfg, out=plan, force=True)
        write_json_atomic(stamp, want)
    return train


def _measures(store: GraphStore, records: list[dict], k: int, link: str | None) -> dict:
    """A finished run's bench measures: bytes, memory, accuracy, compute balance and seeds per second."""
    steady = records[1:] if len(records) > 1 else records  # the first epoch also fetches the input features
    peak = [max(int(r["workers"][i]["peak_memory_bytes"]) for r in records) for i in range(k)]
    # seeds: the labelled training nodes an epoch trains on (every strategy visits each once per epoch)
    labels = store.load_labels()
    seeds = int((labels[store.split_index("train")] >= 0).sum())
    median = statistics.median(r["epoch_seconds"] for r in steady)
    return {
        # the mean, not the median: a strategy that skips sends every other epoch moves half per epoch
        "bytes_per_epoch": statistics.fmean(_train_bytes(r) for r in steady),
        # what crossed the emulated links (every byte: collectives, evaluation, TCP/IP headers)
        "link_bytes_per_epoch": _link_bytes(steady) if link else None,
        "comm_hidden_share": _median_of(steady, "comm_hidden_share"),
        "test_acc": records[-1].get("test_acc"),
        "peak_memory_bytes": peak,
        "seeds_per_epoch": seeds,
        "compute_balance": _compute_balance(steady),
        "seeds_per_second": seeds / median if median > 0 else None,
    }


def run_strategy(
    store: GraphStore, o, spec: BenchEntry, k: int, out: Path, threads: int, link: str | None = None
) -> dict:
    """Partition, plan and train ``spec`` with K workers (the threads split over them), on emulated hosts joined
    by ``link`` when given (``--emulate-link``); the bench entry."""
    from stages.train import TrainConfig, run_train

    label = f"{spec.label}, {k} worker{'s' if k > 1 else ''}" + (f", {link}" if link else "")
    per_worker = max(1, threads // k)
    part = out / f"part-{spec.method}-{k}"
    plan = out / f"part-{spec.method}-{k}.plan-{spec.slug}-{o.model}"
    run = out / (f"run-{spec.slug}-{spec.method}-{k}" + (f"-{link}" if link else ""))
    common = dict(strategy=spec.name, method=spec.method, options=dict(spec.options), workers=k)
    if link:
        common.update(link=link, hosts=o.hosts or k)
    try:
        train = _partition_and_plan(store, o, spec, k, part, plan)
        tc = TrainConfig(
            **train,  # a spec's own knobs win over the bench's
            eval_every=o.epochs,  # the final accuracy only: evaluation is not timed anyway
            threads=per_worker,
            live=False,
            timeout=max(60.0, min(o.timeout, 900.0)),  # big graphs: peers wait long for a bin
            emulate_link=link,
            hosts=o.hosts if link else None,
            trace=o.trace,
        )
        ran = run_train(plan, tc, out=run, force=True)["config"]  # the settings as resolved for the run
    except (G3InputError, G3RuntimeError) as exc:  # the epochs it finished are kept, for the record
        return entry(
            spec.name,
            label,
            "failed",
            threads=per_worker * k,
            note=str(exc),
            completed_epoch_seconds=[r["epoch_seconds"] for r in _records(run)],
            **common,
        )
    records = _records(run)
    note = f"{per_worker} thread{'s' if per_worker > 1 else ''} per worker"
    if ran.get("pipeline"):
        note += f", --pipeline {ran['pipeline']}"
    return entry(
        spec.name,
        label,
        threads=per_worker * k,
        threads_per_worker=per_worker,
        epoch_seconds=[r["epoch_seconds"] for r in records],
        run=str(run),
        **_measures(store, records, k, link),
        note=note + (f" (more workers than the {threads} threads)" if k > threads else ""),
        **common,
    )


def _link_bytes(records: list[dict]) -> float | None:
    """Mean bytes that crossed the hosts' links per epoch, over the epochs without an evaluation (the NIC counts
    every byte, evaluation's exchanges too, which the transport's per-phase counts let the bench leave out)."""
    plain = [r for r in records if "test_acc" not in r] or records
    if not all("link_bytes_sent" in r for r in plain):
        return None
    return statistics.fmean(r["link_bytes_sent"] for r in plain)


def _median_of(records: list[dict], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return statistics.median(values) if values else None


def _compute_balance(records: list[dict]) -> float | None:
    """Median over the epochs of the largest worker's compute over the mean (1 = even load): CPU seconds of the
    compute thread where recorded (wall seconds would count waiting for a core when workers outnumber
    them), else wall seconds."""
    ratios = []
    for r in records:
        cpu = all("compute_cpu_seconds" in w for w in r["workers"])
        c = [float(w.get("compute_cpu_seconds" if cpu else "compute_seconds", 0.0)) for w in r["workers"]]
        if c and sum(c) > 0:
            ratios.append(max(c) / (sum(c) / len(c)))
    return statistics.median(ratios) if ratios else None


def _records(run: Path) -> list[dict]:
    f = run / "metrics.jsonl"
    if not f.is_file():
        return []
    return [json.loads(line) for line in f.read_text().splitlines() if line.strip()]

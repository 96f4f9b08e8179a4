"""The Python API: each function is one stage's entry function (the one its `g3` command calls), with keyword
arguments in place of options. Stage modules are imported when a function is first called."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import torch
from torch import nn

from stages.common.errors import G3InputError, G3RuntimeError

PathLike = str | Path


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` fits the annotation ``hint`` (the simple ones the API uses; others are not checked)."""
    import types
    import typing

    if hint is Any or hint is None:
        return hint is Any or value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, h) for h in typing.get_args(hint))
    if origin is tuple:
        args = typing.get_args(hint)
        if not isinstance(value, tuple | list):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(v, args[0]) for v in value)
        return len(value) == len(args) and all(_matches(v, a) for v, a in zip(value, args, strict=True))
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint) if isinstance(hint, type) else True


def _as_sequence(value: Any, hint: Any) -> Any:
    """A sequence option (``tuple[str, ...]``, as the CLI's repeated option) from one string or any sequence:
    ``logger="csv"`` and ``logger=["csv", "tensorboard"]`` mean what they say."""
    import typing

    if typing.get_origin(hint) is not tuple or typing.get_args(hint)[1:] != (Ellipsis,):
        return value
    if isinstance(value, str):
        return (value,)
    return tuple(value) if isinstance(value, list | tuple) else value


def _hint_text(hint: Any) -> str:
    import typing

    if typing.get_origin(hint) is tuple and typing.get_args(hint)[1:] == (Ellipsis,):
        item = _hint_text(typing.get_args(hint)[0])
        return f"a {item} or a list of {item}"
    return getattr(hint, "__name__", None) or str(hint).replace("pathlib.", "").replace("typing.", "")


def _options(cls, func: str, given: dict):
    """``cls(**given)`` (a stage's options dataclass), each keyword checked against the field it sets: an unknown
    name or a wrong type is a :class:`G3InputError` naming it. A run's settings also take the strategies' knobs as
    keywords (``g3.train(plan, pipeline="none")``), kept by name in its ``knobs``."""
    import dataclasses
    import typing

    from stages.strategies.registry import knob_declarations

    fields = {f.name: f for f in dataclasses.fields(cls) if f.name != "knobs"}
    hints = typing.get_type_hints(cls, globalns=vars(sys.modules[cls.__module__]))
    knobs = knob_declarations() if "knobs" in hints else {}
    hints.update({name: uses[0][1].type | None for name, uses in knobs.items()})
    given = {name: _as_sequence(value, hints.get(name)) for name, value in given.items()}
    for name, value in given.items():
        if name not in fields and name not in knobs:
            known = sorted([*fields, *knobs])
            raise G3InputError(f"g3.{func}: no option {name!r} (options: {', '.join(known)})")
        if name in hints and not _matches(value, hints[name]):
            raise G3InputError(
                f"g3.{func}: {name} must be {_hint_text(hints[name])}, not {type(value).__name__} {value!r}"
            )
    if not knobs:
        return cls(**given)
    settings = {name: value for name, value in given.items() if name not in knobs}
    return cls(**settings, knobs={name: value for name, value in given.items() if name in knobs})


def _worded_for_the_api(exc: Exception) -> Exception:
    """``exc`` with the stages' "pass --force" worded as the API's ``force=True``."""
    if not isinstance(exc, G3InputError) or "--force" not in str(exc):
        return exc
    worded = G3InputError(
        str(exc).replace("pass --force", "pass force=True").replace("--force", "force=True")
    )
    worded.path, worded.line = exc.path, exc.line
    return worded


def _api(func):
    """Checks the call's arguments against ``func``'s annotations — a wrong type is a :class:`G3InputError`
    naming the argument, as the CLI names an option — and words the "pass --force" of the stages' messages as
    the API's ``force=True``."""
    import functools
    import inspect
    import typing

    sig = inspect.signature(func)
    # resolved at the first call (the annotations name Run, defined after the functions)
    hints_of = functools.cache(lambda: typing.get_type_hints(func, globalns={**globals(), "Run": Run}))

    @functools.wraps(func)
    def checked(*args, **kwargs):
        caller = sys._getframe(1)
        if caller.f_globals.get("__name__") == "__mp_main__" and caller.f_code.co_name == "<module>":
            # a worker process importing the user's script (Python's multiprocessing does): its top-level calls
            # would run the whole pipeline again in every worker
            raise SystemExit(
                f"g3: {caller.f_code.co_filename} calls g3.{func.__name__} at its top level, and g3's "
                "worker processes import that script: put its calls under "
                '`if __name__ == "__main__":`'
            )
        hints = hints_of()
        bound = sig.bind(*args, **kwargs)
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            kind = sig.parameters[name].kind
            if hint is None or kind in (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL):
                continue
            if not _matches(value, hint):
                raise G3InputError(
                    f"g3.{func.__name__}: {name} must be {_hint_text(hint)}, not "
                    f"{type(value).__name__} {value!r}"
                )
        try:
            return func(*args, **kwargs)
        except (G3InputError, G3RuntimeError) as exc:
            if os.environ.get("G3_DEBUG"):
                raise
            # a refusal, not a bug: raised from the user's own call, its one line last, not below a screen of
            # g3's frames (G3_DEBUG=1 keeps them, as the commands' --debug does)
            raise _worded_for_the_api(exc).with_traceback(None) from None

    return checked


@_api
def ingest(
    source: Any,
    out: PathLike,
    *,
    force: bool = False,
    name: str | None = None,
    symmetrize: bool | None = None,
    split: tuple[float, float, float] = (0.8, 0.1, 0.1),
    split_index: int | None = None,
    seed: int = 0,
    **node_data,
) -> Path:
    """Write the graph store ``out`` from ``source``: a path (anything `g3 ingest` reads: an OGB folder, a
    WebGraph basename, an edge list, ``synthetic:small``), a PyG ``Data``, a scipy sparse adjacency
    (``A[u, v] ≠ 0``: arc u → v; ``x=``, ``y=``, ``train=``/``valid=``/``test=`` give its node data), or a dict of
    arrays (``edge_index`` ``[2, E]``, optional ``num_nodes``, ``x``, ``y``, ``train``/``valid``/``test`` as
    boolean masks or node ids). ``split`` is the ratio split drawn when the source has none; ``split_index``
    picks one of several splits stored as ``[N, S]`` masks. Returns the store's path."""
    from stages.ingest import IngestOptions, SourceArgs, build_store, run_ingest

    options = IngestOptions(symmetrize=symmetrize, split=tuple(split), seed=seed)
    if isinstance(source, str | Path):
        if node_data:
            raise G3InputError(
                f"{sorted(node_data)}: node data go with an in-memory graph, not a path", path=source
            )
        run_ingest(str(source), str(out), "auto", SourceArgs(), options, force)
        return Path(out)
    from stages.common.atomic import check_target
    from stages.ingest import source_of

    check_target(Path(out), force, "store")
    build_store(
        source_of(source, name=name, split_index=split_index, **node_data), str(out), options, force=force
    )
    return Path(out)


@_api
def partition(
    store: PathLike,
    workers: int,
    *,
    method: str | None = None,
    out: PathLike | None = None,
    force: bool = False,
    **options,
) -> Path:
    """Partition ``store`` for ``workers`` workers (`g3 partition`; ``method`` as ``--method``, other options
    by their ``PartitionOptions`` names, e.g. ``balance_tol=1.02``). Returns the partition's path."""
    from stages.partition import DEFAULT_METHOD, PartitionOptions, default_output, run_partition

    o = _options(
        PartitionOptions, "partition", {"workers": workers, "method": method or DEFAULT_METHOD, **options}
    )
    out = Path(out) if out is not None else default_output(store, o.method, workers)
    run_partition(store, o, out=out, force=force)
    return out


@_api
def plan(
    partition: PathLike,
    *,
    strategy: str = "g3",
    model: str = "sage",
    layers: int = 2,
    hidden: int = 16,
    heads: int = 8,
    out: PathLike | None = None,
    force: bool = False,
    **options,
) -> Path:
    """Plan ``strategy`` on ``partition`` (`g3 plan`; the strategy's options by name, e.g. ``fanouts="10,5"``,
    ``batch_size=1000``, ``bin_size=5000``: `g3 plan --help` lists them). Returns the plan's path."""
    from stages.plan import PlanConfig, default_out, run_plan

    cfg = PlanConfig(
        model=model, layers=layers, hidden=hidden, heads=heads, strategy=strategy, options=options
    )
    out = Path(out) if out is not None else default_out(Path(partition), cfg)
    run_plan(partition, cfg, out=out, force=force)
    return out


@_api
def train(plan: PathLike, *, out: PathLike | None = None, force: bool = False, **config) -> Run:
    """Train ``plan`` (`g3 train`; options by their ``TrainConfig`` names: ``epochs``, ``lr``, ``dropout``,
    ``workers``, ``seed``, ``dtype``, ``device``, ``eval_every``, ``checkpoint_every``, ``resume``, the strategy's
    knobs such as ``pipeline``). Real worker processes, as the command; no live display. Returns the run."""
    from stages.train import TrainConfig, run_train

    meta = run_train(plan, _options(TrainConfig, "train", {"live": False, **config}), out=out, force=force)
    return Run(Path(meta["path"]))


@_api
def evaluate(run: Run | PathLike, *, force: bool = False, **options) -> dict:
    """Evaluate a trained run (`g3 eval`; options by their ``EvalOptions`` names: ``checkpoint``, ``split``,
    ``workers``, ``plan``, ``emulate_link``, ``hosts``, ``metric``): exact full-graph inference with the
    training runtime's workers. Returns eval.json's content (``accuracy`` per split, ``rocauc`` when asked), which
    it writes into the run's folder; the same weights evaluated before are read back."""
    from stages.eval import EvalOptions, run_eval

    path = run.path if isinstance(run, Run) else Path(run)
    return run_eval(path, _options(EvalOptions, "evaluate", options), force=force)


@dataclass
class Run:
    """A training run's folder: ``meta`` (run.json), ``metrics`` (metrics.jsonl's epochs), the final
    accuracies, and where its plan and store are."""

    path: Path
    _cache: dict = field(default_factory=dict, repr=False)

    def __post_init__(self):
        self.path = Path(self.path)
        if not (self.path / "run.json").is_file():
            raise G3InputError("not a g3 run (no run.json)", path=self.path)

    @property
    def meta(self) -> dict:
        """run.json, checked as every command reads it (seal, schema, version)."""
        from stages.common.run_artifact import load_run_meta

        return load_run_meta(self.path)

    @property
    def metrics(self) -> list[dict]:
        """One record per epoch (docs/ARTIFACTS.md, "Run"), each checked; none before the first epoch ends."""
        from stages.common.run_artifact import read_metrics

        return read_metrics(self.path, need=("epoch",)) if (self.path / "metrics.jsonl").is_file() else []

    def _last(self, key: str) -> float | None:
        values = [r[key] for r in self.metrics if r.get(key) is not None]
        return values[-1] if values else None

    @property
    def train_acc(self) -> float | None:
        return self._last("train_acc")

    @property
    def valid_acc(self) -> float | None:
        return self._last("valid_acc")

    @property
    def test_acc(self) -> float | None:
        return self._last("test_acc")

    @cached_property
    def plan_path(self) -> Path:
        from stages.eval import run_plan_path

        return run_plan_path(self.path, self.meta)

    @cached_property
    def store_path(self) -> Path:
        from stages.predict import run_store_path

        return run_store_path(self.plan_path)


def __getattr__(name: str):
    if name == "WholeGraphModel":  # the class load_model returns (it imports the runtime: not at `import g3`)
        from stages.predict import WholeGraphModel

        return WholeGraphModel
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@_api
def load_model(run: Run | PathLike, checkpoint: str | None = None) -> nn.Module:
    """The run's trained model (model.pt, or the checkpoint of epoch ``checkpoint``, e.g. ``"3"``), in the
    run's dtype, on the CPU: a :class:`WholeGraphModel`, ``model(x, indptr, indices, in_degree, out_degree)``
    the logits of every node."""
    from stages.predict import load_whole_graph_model

    return load_whole_graph_model(run.path if isinstance(run, Run) else Path(run), checkpoint)


@_api
def export(
    run: Run | PathLike,
    out: PathLike,
    format: str = "pyg",
    checkpoint: str | None = None,
    force: bool = False,
) -> Path:
    """The run's weights as another library loads them (`g3 export`). ``format="pyg"``: ``out`` is a state dict
    that ``torch_geometric.nn.models.GraphSAGE`` / ``GCN`` / ``GAT`` loads with ``load_state_dict`` and that
    computes what g3 computes (on a symmetric graph for GCN: PyG normalises by in-degrees at both ends); beside it
    ``out.json`` = ``{"class": …, "kwargs": {…}}``, the constructor call
    (``getattr(torch_geometric.nn.models, class)(**kwargs)``). Returns ``out``."""
    from stages.predict import ExportOptions, run_export

    path = run.path if isinstance(run, Run) else Path(run)
    options = ExportOptions(out=str(out), format=format, checkpoint=checkpoint)
    return run_export(path, options, force=force)


@_api
def predict(
    run: Run | PathLike,
    store: PathLike | None = None,
    split: str | None = None,
    checkpoint: str | None = None,
) -> torch.Tensor:
    """Logits ``[N, C]`` of every node of ``store`` (default: the run's own) in node-id order, or of one split's
    nodes (``"train"``, ``"valid"``, ``"test"``) in the split's order — what OGB's Evaluator takes after an
    ``argmax``. Computed in this process on the whole graph."""
    from stages.predict import predict_logits

    path = run.path if isinstance(run, Run) else Path(run)
    return predict_logits(path, store=store, split=split, checkpoint=checkpoint)


@_api
def advise(
    store: PathLike,
    *,
    workers: int | str | tuple[int, ...] | None = None,
    link: str | tuple[str, ...] | None = None,
    device_memory: str | None = None,
    out: PathLike | None = None,
    force: bool = False,
    **options,
) -> dict:
    """Which strategy and K for ``store`` on a cluster of ``workers`` workers joined by ``link`` (`g3 advise`;
    several of either as tuples or comma-separated text; defaults 2 workers, 1gbit, 16GiB, or a ``cluster`` file; other options by their ``AdviseOptions`` names:
    ``model``, ``hidden``, ``layers``, ``strategies``, ``budget``, ``plans``, ``cache``, ``target_epochs``).
    Returns advise.json: its ``ranking``, best first."""
    from stages.advise import AdviseOptions, parse_links, parse_strategies, parse_workers, run_advise

    ks = None if workers is None else parse_workers(_comma_text(workers))
    links = None if link is None else parse_links(_comma_text(link))
    if "strategies" in options and not isinstance(options["strategies"], tuple | type(None)):
        options["strategies"] = parse_strategies(_comma_text(options["strategies"]))
    return run_advise(
        store,
        _options(
            AdviseOptions,
            "advise",
            {"workers": ks, "links": links, "device_memory": device_memory, **options},
        ),
        out=out,
        force=force,
    )


def _comma_text(x) -> str:
    """``2``, ``"2,4"`` or ``(2, 4)`` as the command line gives it: ``"2"``, ``"2,4"``."""
    return x if isinstance(x, str) else ",".join(map(str, (x,) if isinstance(x, int) else x))


__all__ = [
    "G3InputError",
    "G3RuntimeError",
    "Run",
    "advise",
    "evaluate",
    "export",
    "ingest",
    "load_model",
    "partition",
    "plan",
    "predict",
    "train",
]

"""`g3 predict` and `g3 export`: a trained run's model over a whole graph in one process (also ``g3.load_model``,
``g3.predict``): g3's layer stack with the run's weights, on one block holding the whole in-edge CSR."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch
from torch import nn

from stages.common.artifact_json import resolve_reference
from stages.common.atomic import (
    FILE,
    atomic_dir,
    atomic_file,
    check_free_space,
    check_target,
    write_json_atomic,
)
from stages.common.errors import G3InputError
from stages.common.model_spec import ModelSpec
from stages.common.run_artifact import load_run_meta
from stages.common.settings import REQUIRED, check_choices, setting
from stages.eval import SPLITS, pick_weights, read_weights, run_plan_path
from stages.kits.runtime.block import Block
from stages.kits.runtime.models import model_from_spec
from stages.strategies.registry import load_plan


@dataclasses.dataclass
class PredictOptions:
    """Everything `g3 predict` can be told (see ``g3 predict --help``)."""

    out: str = setting(
        REQUIRED,
        "Output file: .npy (numpy) or .zarr (a zarr array, chunked by rows).",
        short="-o",
        path="output",
    )
    split: str | None = setting(
        None,
        "Only this split's nodes, in the split's order [default: every node, in node-id order].",
        choices=SPLITS,
    )
    checkpoint: str | None = setting(
        None, "Weights to use: a checkpoint file of the run [default: RUN/model.pt, else its latest]."
    )
    store: str | None = setting(
        None,
        "Predict on another store with the same feature width and classes [default: the run's].",
        path="input",
    )


@dataclasses.dataclass
class ExportOptions:
    """Everything `g3 export` can be told (see ``g3 export --help``)."""

    out: str = setting(REQUIRED, "The state dict file (FILE.json beside it).", short="-o", path="output")
    format: str = setting(
        "pyg", "pyg: a state dict torch_geometric.nn.models.GraphSAGE / GCN / GAT loads.", choices=("pyg",)
    )
    checkpoint: str | None = setting(
        None, "Weights to export: a checkpoint file of the run [default: RUN/model.pt, else its latest]."
    )


class WholeGraphModel(nn.Module):
    """A trained g3 model over a whole graph: ``forward(x, indptr, indices, in_degree, out_degree)`` gives the
    logits ``[N, C]`` of every node (in-edge CSR: row v lists the sources of the arcs into v; degrees are the
    graph's, used by GCN's normalisation). Evaluation mode: no dropout. ``gnn`` is g3's layer stack
    (parameters ``layers.{l}.…``, as in model.pt)."""

    def __init__(self, gnn: nn.Module):
        super().__init__()
        self.gnn = gnn

    def forward(
        self,
        x: torch.Tensor,
        indptr: torch.Tensor,
        indices: torch.Tensor,
        in_degree: torch.Tensor | None = None,
        out_degree: torch.Tensor | None = None,
    ) -> torch.Tensor:
        n = x.shape[0]
        indptr = torch.as_tensor(indptr, dtype=torch.int64)
        indices = torch.as_tensor(indices, dtype=torch.int64)
        if in_degree is None:
            in_degree = torch.diff(indptr)
        if out_degree is None:
            out_degree = torch.bincount(indices, minlength=n)
        block = Block(
            n_dst=n,
            n_src=n,
            indptr=indptr,
            indices=indices,
            src_out_degree=torch.as_tensor(out_degree).to(torch.float64),
            dst_in_degree=torch.as_tensor(in_degree).to(torch.float64),
            dst_global=torch.arange(n, dtype=torch.int64),
        )
        with torch.no_grad():
            return self.gnn(block.to(x.device), x, training=False)


def run_store_path(plan: Path) -> Path:
    """The store a plan was made from (through its partition)."""
    plan_meta = load_plan(plan)[0]
    return resolve_reference(plan_meta["store"], Path(plan_meta["partition"]["path"]), "zarr.json")


def load_whole_graph_model(run: Path, checkpoint: str | None = None) -> WholeGraphModel:
    """RUN's trained model (model.pt, or the checkpoint ``checkpoint``), in the run's dtype, on the CPU; the
    weights checked against their digest and the plan's model."""
    meta = load_run_meta(run)
    gnn = model_from_spec(ModelSpec.from_plan(load_plan(run_plan_path(run, meta))[0]))
    dtype = {"float32": torch.float32, "float64": torch.float64}[meta["config"].get("dtype", "float32")]
    weights_path = pick_weights(run, checkpoint)
    state = read_weights(weights_path)
    gnn = gnn.to(dtype)
    try:
        gnn.load_state_dict(state)
    except RuntimeError as exc:
        raise G3InputError(f"the weights do not fit the plan's model: {exc}", path=weights_path) from None
    return WholeGraphModel(gnn).eval()


def predict_logits(
    run: Path, store: str | Path | None = None, split: str | None = None, checkpoint: str | None = None
) -> torch.Tensor:
    """Logits ``[N, C]`` of every node of ``store`` (default: the run's own) in node-id order, or of one split's
    nodes in the split's order, computed in this process on the whole graph."""
    from stages.common.store import GraphStore

    model = load_whole_graph_model(run, checkpoint)
    if store is None:
        store = run_store_path(run_plan_path(run, load_run_meta(run)))
    g = GraphStore.open(store)
    indptr, indices = g.load_csr()
    in_degree, out_degree = g.load_degrees()
    dtype = next(model.parameters()).dtype
    x = torch.from_numpy(np.asarray(g.features[:])).to(dtype)
    logits = model(
        x,
        torch.from_numpy(np.asarray(indptr, dtype=np.int64)),
        torch.from_numpy(np.asarray(indices, dtype=np.int64)),
        torch.from_numpy(in_degree),
        torch.from_numpy(out_degree),
    )
    if split is None:
        return logits
    return logits[torch.from_numpy(g.split_index(split))]


NPY_HEADER_BYTES = 128  # a .npy file's magic, version and header (padded to 64 bytes: 128 for a 2-D array)


def prediction_shape(run: Path, store: str | Path | None, split: str | None) -> tuple[int, int, int]:
    """(rows, classes, bytes per value) of the logits :func:`predict_logits` gives, from the store's metadata
    and the run's dtype (nothing computed)."""
    from stages.common.store import GraphStore

    meta = load_run_meta(run)
    g = GraphStore.open(store if store is not None else run_store_path(run_plan_path(run, meta)))
    rows = g.num_nodes if split is None else len(g.split_index(split))
    return int(rows), int(g.num_classes), 8 if meta["config"].get("dtype") == "float64" else 4


def run_predict(run: str | Path, options: PredictOptions, *, force: bool = False) -> np.ndarray:
    """`g3 predict`: the logits of :func:`predict_logits` written to ``options.out`` (.npy, or .zarr chunked by
    rows), atomically; never over an input (the run, the store predicted on, the weights). Returns them."""
    check_choices(options)
    out, split, checkpoint, store = options.out, options.split, options.checkpoint, options.store
    out = Path(out)
    if out.suffix not in (".npy", ".zarr"):
        raise G3InputError("the output must end in .npy or .zarr", path=out)
    inputs = (run, store, checkpoint)
    kind = "logits" if out.suffix == ".zarr" else None  # a .zarr replaces only logits
    check_target(out, force, kind, inputs)
    if out.suffix == ".npy":  # a .zarr's chunks are compressed: their size is not known before
        rows, classes, item = prediction_shape(Path(run), store, split)
        check_free_space(out, {"logits": rows * classes * item + NPY_HEADER_BYTES}, "this prediction")
    logits = predict_logits(Path(run), store=store, split=split, checkpoint=checkpoint).numpy()
    if out.suffix == ".npy":
        with atomic_file(out) as tmp, open(tmp, "wb") as f:
            np.save(f, logits)
    else:
        import zarr

        with atomic_dir(out, force=force, kind=kind, inputs=inputs) as tmp:
            zarr.create_array(str(tmp), data=logits, chunks=(min(len(logits), 65536), logits.shape[1]))
    return logits


def run_export(run: str | Path, options: ExportOptions, *, force: bool = False) -> Path:
    """`g3 export`: RUN's weights as PyG's GraphSAGE / GCN / GAT load them (``format="pyg"``), a state dict at
    ``options.out`` and its constructor call at ``out.json``; neither may be an input or part of one."""
    check_choices(options)
    out, format, checkpoint = options.out, options.format, options.checkpoint
    if format != "pyg":
        raise G3InputError(f"unknown export format {format!r} (available: pyg)")
    run, out = Path(run), Path(out)
    spec_file = out.with_name(out.name + ".json")
    for target in (out, spec_file):  # neither may be an input, or part of one (the run's own weights)
        check_target(target, force, FILE, (run, checkpoint))
    model = load_whole_graph_model(run, checkpoint).gnn
    layers = list(model.layers)
    kinds = {type(layer) for layer in layers}
    if len(kinds) != 1 or not hasattr(layers[0], "PYG_MODEL"):
        raise G3InputError(
            f"a {'/'.join(sorted(k.__name__ for k in kinds))} model has no PyG counterpart to export "
            "to (sage, gcn and gat do)",
            path=run,
        )
    state = {}
    for li, layer in enumerate(layers):
        for ours, theirs in layer.PYG_NAMES.items():
            state[f"convs.{li}.{theirs}"] = layer.state_dict()[ours].detach().clone()
    widths = list(model.widths)
    kwargs = {
        "in_channels": widths[0],
        "hidden_channels": widths[1],
        "num_layers": len(layers),
        "out_channels": widths[-1],
        "dropout": float(load_run_meta(run)["config"].get("dropout", 0.0)),
    }
    heads = getattr(layers[0], "heads", None)
    if heads:  # GAT: hidden_channels counts every head (the widths do already)
        kwargs["heads"] = int(heads)
    with atomic_file(out) as tmp:
        torch.save(state, tmp)
    write_json_atomic(
        spec_file,
        {"class": layers[0].PYG_MODEL, "kwargs": kwargs, "dtype": str(next(model.parameters()).dtype)},
    )
    return out

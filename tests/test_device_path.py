"""The device path checked on the CPU: `g3 train --residency device` runs what a GPU runs (every table on the
compute device, torch's kernels and loss, no copy in or out) and must compute what the host path computes;
`--count-ops` counts one steady-state step's operations and host synchronisations, held against PyG's
full-graph SAGE step counted the same way.

Every run is real (`g3 partition`, `g3 plan`, `g3 train` with torch.distributed processes). The PyG step is
written here from PyG's documented API, as a user would (GraphSAGE, Adam, cross-entropy over integer training
rows), and counted with the same counter.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import flags, g3_partition, g3_plan, g3_train, ok, records, weights
from test_train import max_weight_diff

from stages.common.model_spec import ModelSpec
from stages.kits.runtime.device.op_counter import OpCounter
from stages.strategies.registry import STRATEGIES

HIDDEN, EPOCHS = 16, 3
FULL_GRAPH = ("g3", "bns-gcn", "neutrontp")  # whose step is one full-graph pass, like PyG's


@pytest.fixture(scope="module")
def plans(partitions, tmp_path_factory):
    """A plan per (strategy, K) on its default partition method, made once."""
    root = tmp_path_factory.mktemp("device-path")
    made = {}

    def get(strategy: str, k: int) -> Path:
        if (strategy, k) not in made:
            part = partitions(STRATEGIES[strategy].methods[0], k)
            made[(strategy, k)] = g3_plan(
                part, root / f"plan-{strategy}-{k}", strategy=strategy, hidden=HIDDEN
            )
        return made[(strategy, k)]

    return get


def train(plan: Path, out: Path, *extra: str) -> Path:
    """`g3 train` with the strategy tests' settings (the dtype its default unless given) on the plan's workers."""
    return g3_train(plan, out, EPOCHS, *extra, dtype=None)


# a step's operations counted on the device path, sampling included (no prefetch)
IN_STEP = ("--prefetch", "off", "--count-ops")


def host_and_device(plan: Path, tmp: Path, *device_options: str) -> tuple[Path, Path]:
    """The plan trained in float64 on the host path and on the device path (`--residency device` and these)."""
    host = train(plan, tmp / "host", "--dtype", "float64")
    return host, train(plan, tmp / "device", "--dtype", "float64", "--residency", "device", *device_options)


def final_weights(*runs: Path) -> list[dict]:
    return [weights(r)[1] for r in runs]


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_the_device_path_computes_what_the_host_path_computes(plans, tmp_path, strategy):
    """Every strategy at K = 2 (the exchanges then leave and enter device-resident tables through the host),
    float64: the same final weights, whichever path ran."""
    host, device = host_and_device(plans(strategy, 2), tmp_path)
    assert max_weight_diff(*final_weights(host, device)) <= 1e-9
    assert [r["loss"] for r in records(host)] == pytest.approx([r["loss"] for r in records(device)], abs=1e-9)


def test_count_ops_counts_one_steady_step_and_its_synchronisations(plans, tmp_path):
    """`--count-ops`: the figures appear in the counted epoch's record only (the second), per worker, and add up."""
    run = train(plans("g3", 2), tmp_path / "run", "--residency", "device", "--count-ops")
    recs = records(run)
    assert [("ops_per_step" in w) for r in recs for w in r["workers"]] == [
        False,
        False,
        True,
        True,
        False,
        False,
    ]
    for w in recs[1]["workers"]:
        assert w["ops_per_step"] == sum(w["ops_by_name"].values()) > 0
        assert w["sync_ops_per_step"] == sum(w["sync_ops_by_name"].values())
        assert w["h2d_copies_per_step"] == sum(w["h2d_copies_by_name"].values())
        assert set(w["sync_ops_by_name"]) <= set(w["ops_by_name"])
        assert w["sampler_ops_per_step"] == 0  # a full-graph step samples nothing


def pyg_step_counts(store: Path, hidden: int, dropout: float) -> dict:
    """One steady-state step of PyG's full-graph GraphSAGE (mean) with Adam on the store's graph, counted."""
    pyg_nn = pytest.importorskip("torch_geometric.nn", reason="PyG (torch_geometric) is not installed")
    from stages.common.store import GraphStore

    g = GraphStore.open(store)
    indptr, indices = np.asarray(g.indptr, dtype=np.int64), np.asarray(g.indices, dtype=np.int64)
    dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
    edge_index = torch.from_numpy(np.stack([indices, dst]))
    x = torch.from_numpy(np.asarray(g.features, dtype=np.float32))
    y = torch.from_numpy(np.asarray(g.labels, dtype=np.int64))
    train_rows = torch.from_numpy(np.asarray(g.split_index("train"), dtype=np.int64))
    torch.manual_seed(0)
    model = pyg_nn.GraphSAGE(x.shape[1], hidden, 2, int(y.max()) + 1, dropout=dropout)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)

    def step():
        optimizer.zero_grad()
        out = model(x, edge_index)
        torch.nn.functional.cross_entropy(out[train_rows], y[train_rows]).backward()
        optimizer.step()

    step()
    with OpCounter("cpu") as counter:
        step()
    return counter.count.to_json()


@pytest.mark.parametrize("strategy", FULL_GRAPH)
def test_a_full_graph_step_costs_no_more_than_pygs(store, plans, tmp_path, strategy):
    """The device path's full-graph step at K = 1 synchronises no more often than PyG's SAGE step with Adam
    (on the CPU both counts are Adam's host-side step counters: the runtime adds none), makes no tensor from
    host data (a per-step constant or host-built index would be a host → device copy on a GPU) and dispatches
    at most twice PyG's operations."""
    pyg = pyg_step_counts(store, HIDDEN, 0.3)
    run = train(plans(strategy, 1), tmp_path / "run", "--residency", "device", "--count-ops")
    ours = records(run)[1]["workers"][0]
    assert ours["sync_ops_per_step"] <= pyg["sync_ops_per_step"], (
        ours["sync_ops_by_name"],
        pyg["sync_ops_by_name"],
    )
    assert ours["h2d_copies_per_step"] == 0, ours["h2d_copies_by_name"]
    assert ours["ops_per_step"] <= 2 * pyg["ops_per_step"], (ours["ops_by_name"], pyg["ops_by_name"])


def test_the_counter_sees_what_synchronises():
    """The counter's own rule: reading a value back, data-dependent shapes and boolean masks synchronise;
    shape arithmetic, index gathers with integer ids and a repeat with its output size do not."""
    x, ids, mask = torch.arange(6.0), torch.tensor([0, 2]), torch.tensor([True, False] * 3)
    cases = {
        "item": (lambda: x.sum().item(), 1),
        "int": (lambda: int(x[0]), 1),
        "nonzero": (lambda: mask.nonzero(), 1),
        "unique": (lambda: torch.unique(ids), 1),
        "mask": (lambda: x[mask], 1),
        "repeat without size": (lambda: torch.repeat_interleave(ids, ids), 1),
        "repeat with size": (lambda: torch.repeat_interleave(ids, ids, output_size=2), 0),
        "gather": (lambda: x.index_select(0, ids) * 2, 0),
        "shape": (lambda: x.reshape(2, 3).shape[0] + len(x), 0),
    }
    for name, (run, syncs) in cases.items():
        with OpCounter("cpu") as c:
            run()
        assert c.count.sync_ops == syncs, name
        assert c.count.ops >= syncs, name


def test_the_counter_sees_tensors_made_from_host_data():
    """On the CPU standing in for a device, every tensor made from host data inside the counted step is a
    host → device copy on a GPU (a constant made per step, an index built in numpy) and counts once; tensors
    made on the device (factories, arithmetic, fills) do not. ``torch.from_numpy`` is torch's own again after."""
    host, x, from_numpy = np.arange(4), torch.arange(4.0), torch.from_numpy
    cases = {
        "tensor": (lambda: torch.tensor(0.5), 1),
        "as_tensor": (lambda: torch.as_tensor(host), 1),
        "from_numpy": (lambda: torch.from_numpy(host), 1),
        "indexed by a numpy index": (lambda: x[torch.from_numpy(host[:2])], 1),
        "a scalar written by indexing": (lambda: x.__setitem__(torch.arange(2), -1.0), 1),
        "factories": (lambda: torch.zeros(3) + torch.arange(3) + torch.full((3,), 2.0), 0),
        "fills": (lambda: x.index_fill_(0, torch.arange(2), -1.0).fill_(1.0), 0),
    }
    for name, (run, copies) in cases.items():
        with OpCounter("cpu") as c:
            run()
        assert c.count.h2d_copies == copies == sum(c.count.h2d_by_name.values()), (name, c.count.h2d_by_name)
    assert torch.from_numpy is from_numpy


def test_a_sampler_thread_is_counted_with_its_step(plans, tmp_path):
    """distdgl's sampler prepares steps ahead on its own thread; `--count-ops` counts the counted step's
    preparation there and adds it to the step: the same figures as when the step samples on the compute
    thread (--prefetch off), with the share done on the thread said."""
    plan = plans("distdgl", 1)
    ahead = records(train(plan, tmp_path / "ahead", "--residency", "device", "--count-ops"))[1]["workers"][0]
    inline = records(train(plan, tmp_path / "inline", "--residency", "device", *IN_STEP))[1]["workers"][0]
    assert inline["sampler_ops_per_step"] == 0 < ahead["sampler_ops_per_step"] < ahead["ops_per_step"]
    for key in ("ops_by_name", "sync_ops_by_name", "h2d_copies_by_name"):
        assert ahead[key] == inline[key], key
    assert inline["h2d_copies_by_name"] == {"lift_fresh": 1}  # the step's targets, drawn on the host


def test_the_plan_records_whether_each_partition_fits_the_device(store, tmp_path):
    """plan.json says per worker where its partition will live: on the device when its footprint fits the
    device memory, in host memory when it does not, with the bytes and the reason; every strategy takes
    --device-memory."""
    from stages.kits.plan.residency import resident_bytes

    part = g3_partition(store, tmp_path / "part", 2, method="metis")
    for strategy in ("g3", "bns-gcn", "distdgl"):
        for memory, mode in (("1GiB", "device"), ("64KiB", "host")):
            plan = tmp_path / f"{strategy}-{memory}"
            r = ok(["plan", part, "--strategy", strategy, "--device-memory", memory, "-o", plan])
            assert "on the device: " in r.output
            meta = json.loads((plan / "plan.json").read_text())
            for w in meta["workers"]:
                res = w["residency"]
                arcs = len(np.load(part / f"part-{w['rank']:05d}" / "indices.npy"))
                n_own, n_rem = (
                    len(np.load(part / f"part-{w['rank']:05d}" / f"{a}.npy")) for a in ("owned", "remote")
                )
                need = resident_bytes(ModelSpec.from_plan(meta), n_own, n_rem, arcs)
                assert res["bytes"] == need and res["mode"] == mode
                assert res["device_memory"] == {"1GiB": 2**30, "64KiB": 2**16}[memory]
                assert ("within" if mode == "device" else "more than") in res["why"]


def test_residency_follows_the_plan_on_a_gpu_and_the_option_anywhere():
    from stages.kits.runtime.config import RuntimeConfig

    gpu, cpu = RuntimeConfig(device="cuda"), RuntimeConfig(device="cpu")
    assert gpu.resident("device") and gpu.resident(None) and not gpu.resident("host")
    assert not cpu.resident("device")  # the CPU's own kernels unless asked
    assert RuntimeConfig(residency="device").resident("host") and not RuntimeConfig(
        device="cuda", residency="host"
    ).resident("device")


def test_distdgl_alone_samples_on_the_device(plans, tmp_path):
    """One resident distdgl worker samples, relabels and gathers on the device (the torch sampler): the same
    model as the host sampler's, and a step — sampling included (--prefetch off) — reads back once per hop (the
    picks' and the new sources' counts in one word) besides Adam's step counters."""
    host, device = host_and_device(plans("distdgl", 1), tmp_path, *IN_STEP)
    assert max_weight_diff(*final_weights(host, device)) <= 1e-9
    step = records(device)[1]["workers"][0]
    layers, params = 2, 6  # SAGE: two weights and a bias per layer, each with Adam's step counter
    assert step["ops_by_name"].get("scatter_reduce_") == layers and "_unique2" not in step["ops_by_name"]
    assert step["sync_ops_per_step"] == params + layers, step["sync_ops_by_name"]


@pytest.mark.parametrize(
    "model, options",
    [
        ("sage", ("--batch-order", "split")),
        ("gcn", ()),
        ("sage", ("--batch-order", "global", "--topology", "replicated")),
    ],
)
def test_distdgl_with_peers_samples_on_the_device(partitions, tmp_path, model, options):
    """Resident distdgl workers with a peer draw their own nodes and gather their own rows on the device while
    the peer's are asked of it (split batches: targets the other worker owns; GCN: degrees in the replies;
    replicated: every draw here, only rows asked): the host sampler's model, relabelled on the device."""
    part = partitions("distdgl", 2)
    plan = g3_plan(part, tmp_path / "plan", *flags(strategy="distdgl", model=model, hidden=HIDDEN), *options)
    host, device = host_and_device(plan, tmp_path, *IN_STEP)
    assert max_weight_diff(*final_weights(host, device)) <= 1e-9
    # read back per step: Adam's step counters; per hop the relabel's new sources with the picks' count (one
    # word) and, rows split between workers, how many of the hop's nodes are here; how many input rows are
    # here; and in the local batch order the step's global target count (all-reduced)
    layers, params = 2, 6 if model == "sage" else 4
    replicated, local_order = "replicated" in options, "--batch-order" not in options
    expected = params + layers * (1 if replicated else 2) + 1 + local_order
    for worker in records(device)[1]["workers"]:
        assert worker["ops_by_name"].get("scatter_reduce_") == layers, worker[
            "ops_by_name"
        ]  # a relabel a hop
        assert worker["sync_ops_per_step"] == expected, worker["sync_ops_by_name"]


@pytest.mark.parametrize(
    "strategy, options",
    [
        ("p3", ("--model", "gcn")),
        ("hopgnn", ("--pregather", "off")),
        ("hopgnn", ("--pregather", "on", "--batch-size", "64")),
        ("bytegnn", ("--model", "gcn")),
    ],
)
def test_p3_hopgnn_and_bytegnn_sample_on_the_device(partitions, tmp_path, strategy, options):
    """p3 and hopgnn prepare their steps with distdgl's device sampler when resident: p3's layer-1 structure
    leaves the device only to be pushed to its peers, hopgnn's pre-gathered union is made there; bytegnn's DAG
    tasks draw, merge and gather on the device (the scheduler and the owners' requests unchanged). The host
    sampler's model, and a relabel on the device per hop (per time step, for hopgnn's micrographs)."""
    part = partitions(STRATEGIES[strategy].methods[0], 2)
    plan = g3_plan(part, tmp_path / "plan", *flags(strategy=strategy, hidden=HIDDEN), *options)
    # bytegnn samples on its pool's threads (counted there with the step) and has no --prefetch
    in_step = ("--count-ops",) if strategy == "bytegnn" else IN_STEP
    host, device = host_and_device(plan, tmp_path, *in_step)
    assert max_weight_diff(*final_weights(host, device)) <= 1e-9
    assert {w["sampling_on"] for w in records(host)[-1]["workers"]} == {"host"}
    assert {w["sampling_on"] for w in records(device)[-1]["workers"]} == {"device"}
    for worker in records(device)[1]["workers"]:
        assert worker["ops_by_name"].get("scatter_reduce_", 0) >= 2, worker["ops_by_name"]  # relabels there
    assert [w.get("feature_misses") for w in records(host)[-1]["workers"]] == [
        w.get("feature_misses") for w in records(device)[-1]["workers"]
    ]


@pytest.mark.parametrize("model", ["sage", "gcn"])
def test_clustergcn_induces_its_subgraphs_on_the_device(partitions, tmp_path, model):
    """A resident clustergcn worker induces each step's subgraph on the device (torch operations): the same
    model as the host's subgraphs, GCN's subgraph degrees included, and a step reads back four sizes (its
    nodes', its arcs' before and after the cut, its targets') besides Adam's step counters."""
    part = partitions(STRATEGIES["clustergcn"].methods[0], 1)
    options = flags(strategy="clustergcn", model=model, hidden=HIDDEN, clusters=6, clusters_per_batch=2)
    host, device = host_and_device(g3_plan(part, tmp_path / "plan", *options), tmp_path, *IN_STEP)
    assert max_weight_diff(*final_weights(host, device)) <= 1e-9
    step = records(device)[1]["workers"][0]
    params = 6 if model == "sage" else 4  # SAGE: two weights and a bias per layer; GCN: a weight and a bias
    assert step["sync_ops_per_step"] == params + 4, step["sync_ops_by_name"]


@pytest.mark.parametrize(
    "strategy, knobs",
    [
        ("distdgl", ("--micro-batches", "2")),
        ("bytegnn", ("--scheduler", "off")),
        ("p3", ()),
        ("hopgnn", ()),
        ("clustergcn", ()),
        ("sancus", ()),
    ],
)
def test_eval_at_another_worker_count_whatever_knobs_the_run_had(plans, tmp_path, strategy, knobs):
    """`g3 eval RUN --workers K'` evaluates with the full-graph evaluator's plan, so none of the run's strategy
    knobs carry over to it (issue 51 §2: a distdgl run's --micro-batches was refused there)."""
    run = tmp_path / "run"
    ok(["train", plans(strategy, 2), *flags(workers=2, epochs=1, threads=1, eval_every=0), *knobs, "-o", run])
    ok(["eval", run, "--workers", "1"])
    assert json.loads((run / "eval.json").read_text())["workers"] == 1


def test_the_device_path_aggregates_by_csr_products_without_synchronising():
    """The device path's aggregation is a CSR product forward and backward (what CUDA runs: 7-12x faster than
    gather + index_add_ on the GPU, docs/BENCHMARKS.md), on rows with unsorted and repeated sources, equal to a
    dense reference; the transposed CSR is made without reading a count back."""
    from stages.kits.runtime.device.path import device_kernels
    from stages.kits.runtime.kernels import backend, csr_mean, csr_transpose

    indptr = torch.tensor([0, 3, 3, 5])
    indices = torch.tensor([2, 0, 2, 1, 1])  # row 0 repeats source 2 and is unsorted; row 1 is empty
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    dense = torch.zeros(3, 3, dtype=torch.float64)
    for v in range(3):
        for e in range(int(indptr[v]), int(indptr[v + 1])):
            dense[v, indices[e]] += 1.0 / (indptr[v + 1] - indptr[v])
    g = torch.randn(3, 4, dtype=torch.float64)
    with device_kernels(True, "cpu"):
        assert backend(x) == "sparse"
        with OpCounter("cpu") as c:
            t = csr_transpose(indptr, indices, 3)
            out = csr_mean(indptr, indices, x, 3, transpose=t)
            out.backward(g)
    assert torch.allclose(out, dense @ x.detach(), atol=1e-12)
    assert torch.allclose(x.grad, dense.t() @ g, atol=1e-12)
    assert c.count.sync_ops == 0, c.count.sync_by_name
    assert "index_add" not in c.count.by_name and "index_add_" not in c.count.by_name, c.count.by_name
    with device_kernels(False, "cpu"):
        assert backend(x) != "sparse"  # a host worker keeps the CPU's own kernels

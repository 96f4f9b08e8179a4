"""`g3 simulate`: the discrete-event simulator on a hand-made 2-worker, 2-bin plan (times computed by hand for
every schedule and baseline), the profile fit, option parsing, and the command on a real tiny plan."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import flags

from stages.common.model_spec import LayerShape
from stages.common.plan_artifact import Table
from stages.kits.runtime.profile import fit_phase
from stages.kits.simulate.engine import Network
from stages.kits.simulate.profile import LayerRates, PhaseRates, Rates
from stages.kits.simulate.workload import LayerBins, WorkerLoad, Workload
from stages.simulate import allreduce_seconds, parse_bandwidth, parse_latency, parse_workers_list
from stages.strategies.g3.schedules import halo_loads
from stages.strategies.g3.simulate import simulate_system

# ------------------------------------------------------------------------------------------------------------
# The hand-made plan. Each worker w owns X (local 0) and Y (local 1); Y is what the peer needs, so the priority
# list puts it first: rows = [Y, X]. In-arcs: Y <- X, X <- the peer's Y (remote, local 2). Two layers of width
# 1 (a row is 4 bytes), one node per bin. Forward: Y (bin 0) goes to the peer after layer 0. Backward: the
# remote node is read by row 1 = bin 1 = backward step 0, so its gradient returns after step 0.
#
# Rates: forward 1 s per arc (a bin: 1 s) + gather 0.25 s per source row (2 rows per bin: 0.5 s); backward 2 s
# per bin. Network: 4 bytes/s (a message takes 1 s on the link) and 2 s latency. No weights: the all-reduce
# of K = 2 is its 2(K-1) latencies = 4 s.
# ------------------------------------------------------------------------------------------------------------


def make_workload(workers: list[dict], shapes: list[LayerShape], num_params: int = 0) -> Workload:
    """A workload from plain Python lists (the hand-made plans of these tests).

    Each worker dict: ``num_owned``, ``num_remote``, ``row_ptr`` (arcs per row, priority order, as pointers),
    ``edge_src`` (local source ids), ``priority`` (default: identity), ``bins`` (per layer, a ``bin_ptr`` list),
    ``srcs`` (per layer, source rows per bin; default: nodes + distinct other sources of the bin) and
    ``tables`` (name → list of ``(step, peer, [node ids])``). Bin limits default to the largest plan bin.
    """
    out = []
    for r, w in enumerate(workers):
        row_ptr = np.asarray(w["row_ptr"], dtype=np.int64)
        edge_src = np.asarray(w["edge_src"], dtype=np.int64)
        prio = np.asarray(w.get("priority", np.arange(w["num_owned"])), dtype=np.int64)
        layers = []
        for li, bp in enumerate(w["bins"]):
            bp = np.asarray(bp, dtype=np.int64)
            arcs = row_ptr[bp[1:]] - row_ptr[bp[:-1]]
            if "srcs" in w:
                srcs = np.asarray(w["srcs"][li], dtype=np.int64)
            else:
                srcs = np.array(
                    [
                        len(
                            np.union1d(prio[bp[b] : bp[b + 1]], edge_src[row_ptr[bp[b]] : row_ptr[bp[b + 1]]])
                        )
                        for b in range(len(bp) - 1)
                    ],
                    dtype=np.int64,
                )
            layers.append(LayerBins(bp, arcs.astype(np.int64), srcs))
        tables = {}
        for name, msgs in w.get("tables", {}).items():
            nodes = np.asarray([n for _, _, ns in msgs for n in ns], dtype=np.int64)
            arr = np.asarray([(s, p, len(ns)) for s, p, ns in msgs], dtype=np.int64).reshape(-1, 3)
            tables[name] = Table(nodes, arr)
        limits = [int(np.diff(lb.bin_ptr).max()) if lb.num_bins else 1 for lb in layers]
        out.append(
            WorkerLoad(
                rank=r,
                num_owned=int(w["num_owned"]),
                num_remote=int(w["num_remote"]),
                row_ptr=row_ptr,
                edge_src=edge_src,
                priority=prio,
                layers=layers,
                tables=tables,
                bin_limit_nodes=w.get("bin_limit_nodes", limits),
                bin_limit_bytes=w.get("bin_limit_bytes", [None] * len(layers)),
            )
        )
    return Workload(
        workers=out, shapes=shapes, num_params=num_params, num_nodes=sum(w.num_owned for w in out)
    )


def _worker(peer: int) -> dict:
    return {
        "num_owned": 2,
        "num_remote": 1,
        "row_ptr": [0, 1, 2],
        "edge_src": [0, 2],
        "priority": [1, 0],
        "bins": [[0, 1, 2], [0, 1, 2]],
        "tables": {
            "fwd_send_0": [(0, peer, [1])],
            "fwd_recv_0": [(0, peer, [0])],
            "bwd_send_1": [(0, peer, [0])],
            "bwd_recv_1": [(0, peer, [1])],
        },
    }


def hand_made(step_seconds: float = 0.0) -> tuple:
    """The hand-made plan's workload and rates (above), with STEP_SECONDS for the optimizer step."""
    wl = make_workload([_worker(1), _worker(0)], [LayerShape(1, 1), LayerShape(1, 1)], num_params=0)
    layer = LayerRates(
        forward=PhaseRates(1.0, 0.0, 0.0), backward=PhaseRates(2.0, 0.0, 0.0), gather_per_row=0.25
    )
    return wl, Rates([layer, layer], overhead_per_bin=0.0, step_seconds=step_seconds, source="hand")


@pytest.fixture
def hand():
    wl, rates = hand_made()
    return wl, rates, Network(bandwidth=4.0, latency=2.0)


# Hand-computed timelines (both workers are symmetric), [start, end] in seconds:
#
# none  F0: bin0 [0,1.5], blocking send [1.5,2.5] (arrives 4.5), bin1 [2.5,4], wait [4,4.5];
#       F1: [4.5,6] [6,7.5]; B1: step0 [7.5,9.5], blocking send [9.5,10.5] (arrives 12.5), step1 [10.5,12.5];
#       B0: [12.5,14.5] [14.5,16.5]; + all-reduce 4 = 20.5.  busy 14, comm wait 1 + 0.5 + 1 = 2.5.
# intra F0: gather0 [0,.5] (idle .5), gather1 on the second lane [.5,1]; bin0 [.5,1.5] send (arrives 4.5),
#       bin1 [1.5,2.5], wait [2.5,4.5]; F1: gather [4.5,5] idle, bins [5,6] [6,7]; B1: [7,9] send (arrives 12),
#       [9,11], wait [11,12]; B0: [12,14] [14,16]; + 4 = 20.
# multi the plan's bins, each once all its rows are ready, the next runnable one gathered meanwhile.
#       F0: Y (gathered in line) [0,1.5] send (arrives 4.5), X's gather prefetched [0.5,1]; X [1.5,2.5] ->
#       layer-1 Y ready; F1: Y [2.5,4] (nothing to prefetch: X waits for the message), wait [4,4.5], message
#       in -> X [4.5,6]; B1: [6,8] send (arrives 11), [8,10], wait [10,11]; B0: [11,13] [13,15]; + 4 = 19.
# inter node-id order: X first. F0: X [0,1.5], Y [1.5,3] send (arrives 6); F1: Y [3,4.5], wait [4.5,6],
#       X [6,7.5]; B1: [7.5,9.5] send (arrives 12.5), [9.5,11.5], wait 1; B0: [12.5,14.5] [14.5,16.5]; + 4 = 20.5.
# bns-gcn: the whole partition as one bin (2 arcs, no gather): F0 [0,2], all-to-all [2,3] arrives 5, barrier 5;
#       F1 [5,7]; B1 [7,11], exchange [11,12] arrives 14; B0 [14,18]; + 4 = 22.
HAND = {"g3-none": 20.5, "g3-intra": 20.0, "g3-multi": 19.0, "g3-inter": 20.5, "bns-gcn": 22.0}


@pytest.mark.parametrize("system", sorted(HAND))
def test_hand_made_plan_times(hand, system):
    wl, rates, net = hand
    r = simulate_system(wl, system, rates, net)
    assert r["epoch_seconds"] == pytest.approx(HAND[system])
    for w in r["workers"]:  # every second of the epoch is accounted for
        assert w["busy"] + w["comm_wait"] + w["idle"] + w["sync"] == pytest.approx(r["epoch_seconds"])
    assert r["bytes_per_epoch"] == 2 * 2 * 4  # per worker one forward and one backward row of 4 bytes


def test_hand_made_sancus_layouts(hand):
    """sancus, epoch:1 — the mean of a sending and a skipping epoch.
    p2p, sending: F0 [0,2], headers (8 B: 2 s on the link) [2,4] arrive 6, rows [6,7] arrive 9; F1 [9,11]; B1
    [11,15], gradients [15,16] arrive 18; B0 [18,22]; + 4 = 26 (32 B). Skipping: headers only, arrive 6; F1 [6,8];
    B1 [8,12], gradients arrive 15; B0 [15,19]; + 4 = 23 (24 B). Mean 24.5 s, 28 B.
    broadcast, sending: the whole block (2 rows, 8 B) [2,4] arrives 6; F1 [6,8]; B1 [8,12], gradients arrive 15;
    B0 [15,19]; + 4 = 23 (24 B). Skipping: nothing moves forward; F1 [2,4]; B1 [4,8], gradients [8,9] arrive 11;
    B0 [11,15]; + 4 = 19 (8 B). Mean 21 s, 16 B."""
    wl, rates, net = hand
    for system, fresh, stale, mean_bytes in (
        ("sancus-p2p", 26.0, 23.0, 28),
        ("sancus-broadcast", 23.0, 19.0, 16),
    ):
        r = simulate_system(wl, system, rates, net, staleness_epochs=1)
        assert (r["fresh_epoch_seconds"], r["stale_epoch_seconds"]) == (
            pytest.approx(fresh),
            pytest.approx(stale),
        )
        assert r["epoch_seconds"] == pytest.approx((fresh + stale) / 2)
        assert r["bytes_per_epoch"] == pytest.approx(mean_bytes)
        assert simulate_system(wl, system, rates, net, staleness_epochs=0)["epoch_seconds"] == pytest.approx(
            fresh
        )
    # bns-gcn's sampling scales the rows it moves (rounded per message): P = 0.4 rounds one row to none
    r = simulate_system(wl, "bns-gcn", rates, net, boundary_sample=0.4)
    assert r["bytes_per_epoch"] == 0


def test_multi_runs_the_plans_bins_with_prefetch(hand):
    """As the runtime: the plan's bins of each layer (not ready rows packed anew), the next runnable bin's
    gather on a second lane — X's layer-0 bin computes for 1 s, not 1.5, and layer 1 waits for the message."""
    wl, rates, net = hand
    r = simulate_system(wl, "g3-multi", rates, net, record=True)
    spans = [(t0, t1, label) for t0, t1, kind, label in r["workers"][0]["spans"] if kind == "compute"]
    forward = [s for s in spans if " bin " in s[2]]
    assert forward == [
        pytest.approx((0.0, 1.5, "L0 bin 0")),
        pytest.approx((1.5, 2.5, "L0 bin 1")),
        pytest.approx((2.5, 4.0, "L1 bin 0")),
        pytest.approx((4.5, 6.0, "L1 bin 1")),
    ]


def test_hand_made_breakdown_none(hand):
    wl, rates, net = hand
    r = simulate_system(wl, "g3-none", rates, net)
    w = r["workers"][0]
    assert w["busy"] == pytest.approx(14.0)
    assert w["comm_wait"] == pytest.approx(2.5)
    assert w["idle"] == pytest.approx(0.0)
    assert w["sync"] == pytest.approx(4.0)
    assert w["link_seconds"] == pytest.approx(2.0)


def test_hand_made_halo():
    # the same graph with global ids X0=0, Y0=1, X1=2, Y1=3: Y0 <- X0, X0 <- Y1, Y1 <- X1, X1 <- Y0
    indptr, indices = np.array([0, 1, 2, 3, 4]), np.array([3, 0, 1, 2])
    wl = make_workload([_worker(1), _worker(0)], [LayerShape(1, 1), LayerShape(1, 1)], num_params=0)
    layer = LayerRates(PhaseRates(1.0, 0.0, 0.0), PhaseRates(2.0, 0.0, 0.0), 0.25)
    rates = Rates([layer, layer])
    halo = halo_loads(indptr, indices, np.array([0, 0, 1, 1]), 2, wl)
    # worker 0: layer 0 computes H1 = {0,1,3} (3 arcs) reading H2 = all 4 nodes; layer 1 computes H0 (2 arcs)
    # reading H1. Bins gather their sources separately: in the plan's bins 2 rows per (node + arc) = 1, so
    # layer 0 gathers 3 + 3 = 6 rows and layer 1 2 + 2 = 4 (more than the distinct 4 and 3)
    assert [(h.nodes, h.arcs, h.srcs) for h in halo[0]] == [(3, 3, 6), (2, 2, 4)]
    r = simulate_system(wl, "halo", rates, Network(4.0, 2.0), halo=halo)
    # forward (3 + 6 x 0.25) + (2 + 4 x 0.25), backward 2 x 2 + 2 x 3, all-reduce 4; no bytes move
    assert r["epoch_seconds"] == pytest.approx(21.5)
    assert r["bytes_per_epoch"] == 0


def test_parsers_and_allreduce():
    assert parse_bandwidth("10Gbit") == pytest.approx(1.25e9)
    assert parse_bandwidth("1.25GB") == pytest.approx(1.25e9)
    assert parse_latency("50us") == pytest.approx(50e-6)
    assert parse_latency("0.2ms") == pytest.approx(2e-4)
    assert parse_workers_list("2-16") == (2, 4, 8, 16)
    assert parse_workers_list("none") == ()
    with pytest.raises(ValueError):
        parse_bandwidth("fast")
    net = Network(1e9, 1e-5)
    assert allreduce_seconds(1000, 1, net) == 0.0
    assert allreduce_seconds(1_000_000, 4, net) == pytest.approx(1.5 * 4e6 / 1e9 + 6e-5)


def test_fit_phase_recovers_rates():
    rng = np.random.default_rng(0)
    arcs = rng.integers(1000, 50000, 12)
    nodes = rng.integers(100, 3000, 12)
    secs = 2e-8 * arcs + 3e-7 * nodes + 1e-4
    fit = fit_phase(arcs, nodes, secs)
    assert fit["fit"] == "nnls"
    assert fit["seconds_per_arc"] == pytest.approx(2e-8, rel=1e-3)
    assert fit["seconds_per_node"] == pytest.approx(3e-7, rel=1e-2)
    assert fit["seconds_per_bin"] == pytest.approx(1e-4, rel=5e-2)
    one = fit_phase([1000], [10], [0.5])  # a single bin: one rate per unit of work, exact in total
    assert one["fit"] == "ratio" and one["seconds_per_arc"] * 1010 == pytest.approx(0.5)
    # four bins of nearly one size (one per worker of a balanced partition): no per-bin constant can be told
    # apart, so none is fitted — predictions for other sizes scale with the work
    same = fit_phase(
        [6.03e6, 6.22e6, 6.06e6, 6.20e6], [123e3, 127e3, 124e3, 126e3], [0.046, 0.047, 0.046, 0.047]
    )
    assert same["fit"] == "ratio" and same["seconds_per_bin"] == 0.0
    assert same["seconds_per_arc"] * (6.03e6 + 123e3) == pytest.approx(0.0462, rel=0.02)


@pytest.fixture(scope="module")
def tiny_plan(tiny_store, tmp_path_factory):
    from stages.partition.run import PartitionOptions, run_partition
    from stages.plan.run import PlanConfig, run_plan

    root = tmp_path_factory.mktemp("sim")
    part = root / "part"
    run_partition(tiny_store, PartitionOptions(workers=2), out=part)
    plan = root / "plan"
    run_plan(part, PlanConfig(model="sage", layers=2, hidden=8, options={"bin_size": 300}), out=plan)
    return plan


def test_simulate_real_plan_and_cli(tiny_plan, tmp_path, cli_runner):
    from g3cli.main import cli

    out = tmp_path / "sim"
    options = flags(scaling="2,4", cache=tmp_path / "cache")
    network = flags(bandwidth="1Gbit", latency="100us")
    res = cli_runner.invoke(cli, ["simulate", str(tiny_plan), *options, "-o", str(out), *network])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "simulate.json").read_text())
    systems = {r["system"]: r for r in data["systems"]}
    assert set(systems) == {
        "g3-none",
        "g3-intra",
        "g3-inter",
        "g3-multi",
        "bns-gcn",
        "sancus-broadcast",
        "sancus-p2p",
        "halo",
    }
    # the simulated bytes are exactly the plan's message tables: rows x width x 4
    from stages.common.plan_artifact import WorkerPlan

    expected = 0
    for r in range(2):
        wp = WorkerPlan(tiny_plan, r)
        expected += wp.table("fwd_send_0").total * 8 * 4 + wp.table("bwd_send_1").total * 8 * 4
    assert systems["g3-multi"]["bytes_per_epoch"] == expected
    assert [row["workers"] for row in data["scaling"]] == [2, 4]
    assert (out / "workers.png").is_file() and (out / "scaling.png").is_file()
    assert "scaling" in res.output
    # an earlier simulation is not replaced silently
    before = (out / "simulate.json").read_text()
    args = ["simulate", str(tiny_plan), "--scaling", "none", "-o", str(out)]
    res = cli_runner.invoke(cli, args)
    assert res.exit_code == 2 and "simulate.json" in res.output and "--force" in res.output, res.output
    assert (out / "simulate.json").read_text() == before
    res = cli_runner.invoke(cli, [*args, "--force"])
    assert res.exit_code == 0, res.output
    assert json.loads((out / "simulate.json").read_text())["scaling"] == []


def test_train_profile_feeds_simulate(tiny_store, tmp_path, cli_runner):
    """`g3 train --profile` (the one rank of a 1-worker plan, run in this process) writes rates per layer that
    `g3 simulate --profile` reads."""
    import socket

    from g3cli.main import cli
    from stages.kits.runtime.launch.processes import run_guarded
    from stages.partition.run import PartitionOptions, run_partition
    from stages.plan.run import PlanConfig, run_plan
    from stages.train.config import TrainConfig
    from stages.train.loop import train_rank

    part, plan, run = tmp_path / "part1", tmp_path / "plan1", tmp_path / "run1"
    run_partition(tiny_store, PartitionOptions(workers=1), out=part)
    run_plan(part, PlanConfig(model="sage", layers=2, hidden=8, options={"bin_size": 300}), out=plan)
    prof_path = tmp_path / "profile.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = TrainConfig(
        epochs=3, eval_every=0, profile=str(prof_path), live=False, threads=1, knobs={"pipeline": "multi"}
    )
    run.mkdir()
    run_guarded(train_rank, 0, 1, run, "", f"tcp://127.0.0.1:{port}", str(plan), str(run), cfg)
    prof = json.loads(prof_path.read_text())
    assert prof["schema"] == "g3.profile" and prof["workers"] == 1 and len(prof["layers"]) == 2
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert prof["epoch"] == 2 and prof["epoch_seconds"] == pytest.approx(
        records[2]["epoch_seconds"]
    )  # the last
    for layer in prof["layers"]:
        assert layer["forward"]["bins"] >= 7 and layer["backward"]["bins"] == 7  # 2,000 nodes in bins of 300
        assert layer["forward"]["arcs"] == layer["backward"]["arcs"] > 0
        assert min(layer["forward"]["seconds_per_arc"], layer["forward"]["seconds_per_node"]) >= 0
    assert prof["overhead_per_bin"] >= 0 and prof["step_seconds"] > 0
    assert not (run / "trace").exists()  # --profile alone writes no trace
    out = tmp_path / "sim"
    res = cli_runner.invoke(
        cli,
        [
            "simulate",
            str(plan),
            "--profile",
            str(prof_path),
            "--scaling",
            "none",
            "--no-baselines",
            "--pipeline",
            "multi",
            "-o",
            str(out),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    sim = json.loads(res.output)
    assert sim["rates"]["source"] == str(prof_path)
    assert sim["systems"][0]["epoch_seconds"] > 0


def test_engine_wait_any_resumes_once():
    """A wait for any of several messages ends at the first arrival; later arrivals do not resume it again."""
    from stages.kits.simulate.engine import Engine

    def sender():
        yield ("send", "a", 1, 4, False)  # 1 s on the link, arrives at 1.5
        yield ("compute", 1.0)
        yield ("send", "b", 1, 4, False)  # posted at 1 while the receiver still waits; arrives at 2.5

    def receiver():
        now = yield ("wait_any", ["a", "b"])
        assert now == pytest.approx(1.5)
        yield ("compute", 3.0)

    stats = Engine(2, Network(4.0, 0.5)).run([sender(), receiver()])
    assert stats[1].end == pytest.approx(4.5)
    assert stats[1].comm_wait == pytest.approx(1.5) and stats[1].busy == pytest.approx(3.0)


@pytest.mark.parametrize("k", [2, 3, 4, 5, 8])
def test_connections_share_links_fairly_so_an_all_to_all_takes_k_minus_1_link_times(k):
    """Every worker sends 1 MB to every peer at once over 1 MB/s links: with the links shared fairly between the
    connections (what TCP flows converge to, and what g3's emulated hosts measure) each link carries K − 1 MB
    in K − 1 s; first come, first served per link took 2K − 3 s."""
    from stages.kits.simulate.engine import Engine

    def worker(w):
        for p in range(k):
            if p != w:
                yield ("send", (w, p), p, 10**6, False)
        yield ("wait_all", [(p, w) for p in range(k) if p != w])
        yield ("wait_sends",)

    stats = Engine(k, Network(1e6, 0.001)).run([worker(w) for w in range(k)])
    assert max(s.end for s in stats) == pytest.approx(k - 1 + 0.001)


def test_one_connection_is_first_in_first_out_and_shares_the_sender_link_with_another():
    """Two messages to one peer go one after the other (one connection); a third to another peer, posted with
    them, shares the sender's egress half and half while both connections send."""
    from stages.kits.simulate.engine import Engine

    def sender():
        yield ("send", "a", 1, 2, False)
        yield ("send", "b", 1, 2, False)
        yield ("send", "c", 2, 2, False)
        yield ("wait_sends",)

    def receiver(keys):
        def gen():
            yield ("wait_all", keys)

        return gen()

    engine = Engine(3, Network(2.0, 0.0))
    engine.run([sender(), receiver(["a", "b"]), receiver(["c"])])
    # a and c share the egress (1 B/s each): both leave at 2; b then has it alone: 2 bytes at 2 B/s, leaves at 3
    assert engine.left == pytest.approx({"a": 2.0, "c": 2.0, "b": 3.0})


def test_bad_strategy_figures_are_refused(tiny_plan, tmp_path, cli_runner):
    from g3cli.main import cli

    for args, message in (
        (["--boundary-sample", "0"], "--boundary-sample must be in (0, 1]"),
        (["--boundary-sample", "1.5"], "--boundary-sample must be in (0, 1]"),
        (["--staleness-epochs", "-1"], "--staleness-epochs must be >= 0"),
    ):
        res = cli_runner.invoke(
            cli, ["simulate", str(tiny_plan), "--scaling", "none", *args, "-o", str(tmp_path / "s")]
        )
        assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert not (tmp_path / "s").exists()


def test_workers_of_one_host_skip_its_link_and_headers_slow_the_link(hand):
    """``workers_per_host``: messages between workers of one host take no link time and no latency (K = 2 on
    one host is the network-free epoch, and no all-reduce crosses a link); ``share``: the payload share of a
    link's rate (calibration.py) — at half, each of the "none" schedule's two blocking 1-second sends on the
    critical path takes 2 s."""
    import math

    wl, rates, net = hand
    one_host = simulate_system(wl, "g3-none", rates, Network(4.0, 2.0, workers_per_host=2))
    free = simulate_system(wl, "g3-none", rates, Network(math.inf, 0.0))
    assert one_host["epoch_seconds"] == free["epoch_seconds"] == 14.0
    assert allreduce_seconds(10**6, 2, Network(4.0, 2.0, workers_per_host=2)) == 0.0
    base = simulate_system(wl, "g3-none", rates, net)
    half = simulate_system(wl, "g3-none", rates, Network(4.0, 2.0, share=0.5))
    assert base["epoch_seconds"] == 20.5 and half["epoch_seconds"] == pytest.approx(22.5)


def test_hosts_and_link_share_on_a_real_plan(tiny_plan, tmp_path, cli_runner):
    """`--hosts 1`: both workers on one host, nothing crosses a link; `--hosts`/`--link-share` bad values are one
    line, exit 2."""
    from g3cli.main import cli

    def run(*extra):
        out = tmp_path / f"sim{len(list(tmp_path.iterdir()))}"
        res = cli_runner.invoke(
            cli,
            [
                "simulate",
                str(tiny_plan),
                "--scaling",
                "none",
                "--bandwidth",
                "100mbit",
                "-o",
                str(out),
                *extra,
            ],
        )
        return res, (json.loads((out / "simulate.json").read_text()) if res.exit_code == 0 else None)

    _, two = run()
    _, one = run("--hosts", "1")
    _, free = run("--bandwidth", "inf", "--latency", "0")
    by = {
        name: {r["system"]: r for r in d["systems"]}
        for name, d in (("two", two), ("one", one), ("free", free))
    }
    assert one["network"]["workers_per_host"] == 2 and one["network_link"]["hosts"] == 1
    assert by["one"]["g3-none"]["epoch_seconds"] == pytest.approx(by["free"]["g3-none"]["epoch_seconds"])
    assert by["two"]["g3-none"]["epoch_seconds"] > by["one"]["g3-none"]["epoch_seconds"]
    for args, words in [
        (["--hosts", "3"], "--hosts 3 does not divide the 2 workers"),
        (["--link-share", "0"], "--link-share must be in (0, 1]"),
    ]:
        res, _ = run(*args)
        assert res.exit_code == 2 and words in res.output and "Traceback" not in res.output, res.output

"""What `g3 simulate` is told (:class:`SimulateOptions`: each field with a ``setting`` is its option), read by
every strategy's simulator."""

from __future__ import annotations

from dataclasses import dataclass

from stages.common.settings import setting
from stages.kits.simulate.calibration import LINK_SHARE, MESSAGE_SECONDS
from stages.kits.simulate.network import parse_bandwidth, parse_latency, parse_workers_list

DEFAULT_SCALING = (2, 4, 8, 16)


def parse_pipelines(values: tuple[str, ...]) -> tuple[str, ...]:
    """``--pipeline`` values, repeated or comma-separated, in order, each once (none given: every schedule of the
    plan's strategy; its simulator checks the names)."""
    return tuple(dict.fromkeys(p.strip() for v in values for p in v.split(",") if p.strip()))


@dataclass
class SimulateOptions:
    """What `g3 simulate` is told: each field with a ``setting`` is its option."""

    workers: int | None = setting(
        None,
        "Worker count K to simulate [default: the plan's]. Another K partitions and plans the plan's store "
        "again (same method, model and bins) into the --cache folder.",
        short="-w",
    )
    bandwidth: float = setting(
        10e9 / 8,
        "Link bandwidth per worker and direction, e.g. 10Gbit, 100Gbit, 1.25GB (bytes/s), inf.",
        parse=parse_bandwidth,
        cli_default="10Gbit",
    )  # bytes per second per link direction
    latency: float = setting(
        MESSAGE_SECONDS,
        "One-way latency per message, e.g. 50us, 0.2ms, 0.",
        parse=parse_latency,
        cli_default="100us",
        show_default="100us: a gloo message on this machine, calibration.py",
    )
    link_share: float = setting(
        LINK_SHARE,
        "Share of each link's bytes that carry payload (headers take the rest; "
        "stages/kits/simulate/calibration.py).",
        show_default="0.956: TCP over Ethernet, MTU 1500",
    )
    hosts: int | None = setting(
        None,
        "Hosts the K workers run on, K/H consecutive ranks each, talking over the host's loopback and "
        "sharing its link, as `g3 train --emulate-link --hosts` [default: one per worker; full-graph plans "
        "only].",
    )
    profile: str | None = setting(
        None,
        "PROFILE.json from `g3 train PLAN --profile PROFILE.json` (seconds per arc / node / bin per layer "
        "on the real runtime). Without it, placeholder rates (not calibrated).",
        path="input",
    )
    pipelines: tuple[str, ...] = setting(
        (),
        "g3 schedules to simulate (repeat or comma-separate): none, intra, inter, multi "
        "[default: all four]. A neutrontp plan: 'none' simulates the bulk collectives, any other value the "
        "inter-chunk pipeline (neutrontp-TP and neutrontp-TP+pipe; both by default).",
        flag="--pipeline",
        parse=parse_pipelines,
        repeat=True,
    )
    baselines: bool = setting(
        True,
        "Also simulate the other strategies on the same partitions and rates — bns-gcn "
        "(layer-synchronous, whole partition: BNS-GCN, NeutronStar as G3 ran it), sancus-broadcast and "
        "sancus-p2p (SANCUS, --staleness epoch:N) — and the L-hop halo-replication baseline (DistGNN/ROC). Not "
        "beside a neutrontp plan (a feature split has no vertex partition: simulate a g3 plan of the store).",
    )
    boundary_sample: float = setting(
        1.0, "bns-gcn's sampling ratio P: the hidden layers' boundary rows (and their gradients) scale by P."
    )
    staleness_epochs: int = setting(
        1,
        "sancus's epoch:N: hidden layers' rows move every N+1 epochs; the epoch reported is the mean of a "
        "sending epoch and N skipping ones.",
    )
    scaling: tuple[int, ...] = setting(
        DEFAULT_SCALING,
        "Worker counts of the scaling table (like the paper's Figs. 7-11, 16, 17): a list, a "
        "range of powers of two (2-16), or 'none'. Each K is partitioned and planned once into --cache.",
        parse=parse_workers_list,
        cli_default="2,4,8,16",
    )
    run: str | None = setting(
        None,
        "A mini-batch strategy's plan (distdgl, bytegnn, clustergcn, p3, hopgnn): a run of PLAN whose "
        "metrics calibrate the model of a step (seconds per sampled arc and per source row, remote share; "
        "docs/DESIGN.md 'Simulator').",
        path="input",
    )
    cache: str | None = setting(
        None,
        "Folder for the partitions and plans of other worker counts [default: PLAN.simcache].",
        path="output",
    )
    # a cluster of unlike hosts (`g3 advise --cluster`): per rank of the K workers its compute speed relative to
    # the profiled machine, its host's link rate (bytes/s per direction, as ``bandwidth``) and its host (full-graph
    # plans: ranks of one host share its link and talk over its loopback); None: uniform, as without them
    worker_speed: tuple[float, ...] | None = None
    worker_bandwidth: tuple[float, ...] | None = None
    worker_hosts: tuple[int, ...] | None = None

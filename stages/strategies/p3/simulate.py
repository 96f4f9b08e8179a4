"""`g3 simulate` model of the ``p3`` strategy (P3, paper 003 §3): push-pull layer 1, data-parallel layers 2…L,
unpipelined and pipelined (``--pipeline p3``).

Calibrated on a run of a p3 plan (``--run RUN``, at least two workers: a one-worker run moves no structure and
no partials to measure), from its ``metrics.jsonl`` (the epochs after the first), per worker-step of the run at
K₀: the sampled arcs A (every layer), the layer-1 block's sources V⁰ (``source_rows``), its destinations V¹ (from
the ``gradients`` bytes, (K₀−1)·V¹·H·item) and its arcs A₁ (from the ``structure`` bytes,
(K₀−1)·(3 + V⁰ + V¹ + A₁)·4), the sampling requests' bytes (``sample``, ``sample-ids``), the replicated
parameters R (``allreduce_bytes`` per update / item) and the seconds of sampling (per sampled arc), of building
and parsing the structure messages (per node id handled, ``fetch_seconds``) and of computing (per arc-column,
``compute_seconds``: an arc aggregated over its input width). One step of a worker at K workers, every owner's
counts scaled as the distdgl model scales them (``--batch-order global``: B/K targets per owner, counts × K₀/K;
``local``: unchanged), item = 4 bytes (float32) and node ids of 4 bytes:

    sampling   = A × t_sample + sample bytes / bandwidth + (L − 1) × 3 × latency   (no latency when the run
                  sent no sampling requests: ``--topology replicated``)
                  sample bytes: the run's per step × K₀/K × ((K−1)/K) / ((K₀−1)/K₀) (hash partition: a
                  frontier node is remote with probability (K−1)/K)
    structure  = K × (3 + V⁰ + V¹ + A₁) × t_struct + bytes / bandwidth + 2 × latency
                  bytes = (K−1) × ((3 + V⁰ + V¹ + A₁) × 4 + 8) per owner (the block and its size, to every peer)
    prepare    = sampling + structure                          (the sampler thread)
    MP         = A₁ × K × F/K × t_unit                         layer 1 on this worker's F/K columns of every
                                                               owner's block, forward and backward
    partials   = (K−1) × V¹ × H × 4 / bandwidth + latency      pulled by each owner
    DP         = (A − A₁) × H × t_unit                         layers 2…L, forward and backward
    gradients  = (K−1) × V¹ × H × 4 / bandwidth + latency      ∂L/∂z¹ pushed by each owner
    all-reduce = ring all-reduce of R values                   layer 1's bias and layers 2…L; W₁ is sharded

    unpipelined: train = MP + partials + DP + gradients, every step
    pipelined:   the partials of batch s + 1 travel while batch s computes its data-parallel layers (forward and
                 backward), so train = MP + max(partials, DP) + gradients; the first batch of an epoch waits
                 for its own partials (MP + partials + max(partials, DP) + gradients) and the last one has no
                 next batch to overlap (MP + DP + gradients) — the runtime starts no batch across an epoch's end
    epoch = max(S × prepare, Σ train) + S × all-reduce with --prefetch (the sampler thread runs ahead),
            S × prepare + Σ train + S × all-reduce without; S = ⌈N_train / B⌉ (global), ⌈N_train / (K·B)⌉ (local)

Only the partial exchange overlaps in the pipelined model (the runtime also hides it behind the gradient push,
the all-reduce and the next model-parallel forward, so the model is conservative); the model-parallel compute
itself runs on the compute thread in both schedules. With nothing to overlap (K = 1: no partials; or no
data-parallel work) the two schedules' epochs are equal, and the pipelined one is never longer. Assumptions, in
the result's notes: one compute rate per arc-column for both phases, rates independent of K (no contention), no
imbalance between workers or owners, per-owner counts scaling as K₀/K under global order (the deduplication
within a batch unchanged).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

from stages.common.errors import G3InputError
from stages.common.knobs import prefetch_depth
from stages.common.run_artifact import calibration_records
from stages.kits.simulate.engine import Network
from stages.kits.simulate.minibatch import epoch_result, run_itemsize, run_minibatch_simulation, worker_record
from stages.kits.simulate.network import allreduce_seconds
from stages.kits.simulate.scaling import at_k_and_scaling

ITEM = 4  # bytes of a modelled value (float32), as the other models
ID = 4  # bytes of a node id on the wire (int32 below 2³¹ nodes)


@dataclass
class P3Profile:
    workers: int  # K₀ of the profiled run
    order: str  # --batch-order
    batch_size: int
    num_train: int
    layers: int
    feat_dim: int  # F
    hidden: int  # H, layer 1's output width
    arcs: float  # A: sampled arcs of every layer per worker-step
    arcs1: float  # A₁: the layer-1 block's arcs per worker-step
    src0: float  # V⁰: the layer-1 block's sources per worker-step
    dst1: float  # V¹: the layer-1 block's destinations per worker-step
    sample_bytes: float  # sampling requests and answers sent per worker-step
    replicated: int  # R: values all-reduced per step (layer 1's bias, layers 2…L)
    t_sample: float  # seconds per sampled arc
    t_struct: float  # seconds per node id of the structure messages handled (built or parsed)
    t_unit: float  # seconds per arc-column (an arc aggregated over one input column), forward and backward
    prefetch: bool
    measured_epoch_seconds: float

    @classmethod
    def from_run(cls, run: Path, plan_meta: dict) -> P3Profile:
        info, _, steady, workers = calibration_records(run)
        k0 = len(steady[0]["workers"])
        if k0 < 2:
            raise G3InputError(
                "--run: calibrate the p3 model on a run of two or more workers (a one-worker run "
                "pushes no structure and pulls no partials to measure V¹ and the layer-1 arcs from)",
                path=run,
            )
        if "bytes_sent_per_phase" not in workers[0] or "gradients" not in workers[0]["bytes_sent_per_phase"]:
            raise G3InputError(
                "--run: the run has no p3 byte counts (structure, partials, gradients): train the "
                "p3 plan again",
                path=run,
            )
        cfg = info.get("config") or {}
        item = run_itemsize(cfg)
        opts = plan_meta["strategy"]["options"]
        hidden = int(plan_meta["layers"][0]["d_out"])
        steps = sum(int(r.get("steps", 1)) for r in steady)  # per worker
        ws = steps * k0  # worker-steps

        def total(key: str) -> float:
            return float(sum(w[key] for w in workers))

        def sent(phase: str) -> float:
            return float(sum(w["bytes_sent_per_phase"].get(phase, 0) for w in workers))

        arcs, src0 = total("sampled_arcs") / ws, total("source_rows") / ws
        dst1 = sent("gradients") / (ws * (k0 - 1) * hidden * item)
        arcs1 = sent("structure") / (ws * (k0 - 1) * ID) - 3 - src0 - dst1
        feat_dim = int(plan_meta["store"]["feat_dim"])
        units = arcs1 * feat_dim + (arcs - arcs1) * hidden  # arc-columns per worker-step (see the docstring)
        return cls(
            workers=k0,
            order=opts.get("batch_order", "global"),
            batch_size=int(opts["batch_size"]),
            num_train=sum(int(x["num_train"]) for x in plan_meta["workers"] if "num_train" in x),
            layers=len(plan_meta["layers"]),
            feat_dim=feat_dim,
            hidden=hidden,
            arcs=arcs,
            arcs1=arcs1,
            src0=src0,
            dst1=dst1,
            sample_bytes=(sent("sample") + sent("sample-ids")) / ws,
            replicated=round(total("allreduce_bytes") / (steps * k0 * item)),
            t_sample=total("sample_seconds") / max(total("sampled_arcs"), 1),
            t_struct=total("fetch_seconds") / (ws * k0 * (3 + src0 + dst1 + arcs1)),
            t_unit=total("compute_seconds") / (ws * units) if units > 0 else 0.0,
            prefetch=prefetch_depth(cfg.get("prefetch")) > 0,
            measured_epoch_seconds=sorted(r["epoch_seconds"] for r in steady)[len(steady) // 2],
        )


def remote_ratio(p: P3Profile, k: int) -> float:
    """How the share of remote frontier nodes at ``k`` compares with the run's: a hash partition's (K−1)/K."""
    return ((k - 1) / k) / ((p.workers - 1) / p.workers) if k > 1 else 0.0


def simulate_p3(p: P3Profile, k: int, bandwidth: float, latency: float, pipelined: bool, net=None) -> dict:
    """The modelled epoch of p3 at ``k`` workers, unpipelined or pipelined (a system entry of simulate.json).
    ``net``: per-worker links and speeds (a cluster of unlike hosts): each worker's phases at its speed, its
    bytes to and from its peers evenly at the slower link of each pair; the phases synchronise every worker
    (a worker's partials and gradients are every owner's), so each phase is the slowest worker's."""
    net = net or Network(bandwidth, latency)
    lat = net.latency if k > 1 else 0.0
    local = p.order == "local"
    steps = math.ceil(p.num_train / (k * p.batch_size if local else p.batch_size))
    scale = 1.0 if local else p.workers / k
    arcs, arcs1, src0, dst1 = p.arcs * scale, p.arcs1 * scale, p.src0 * scale, p.dst1 * scale
    block_ids = 3 + src0 + dst1 + arcs1  # one owner's layer-1 block on the wire
    bytes_ = {
        "sample": p.sample_bytes * scale * remote_ratio(p, k),
        "structure": (k - 1) * (block_ids * ID + 8),
        "partials": (k - 1) * dst1 * p.hidden * ITEM,
        "gradients": (k - 1) * dst1 * p.hidden * ITEM,
    }
    rounds = p.layers - 1 if p.sample_bytes > 0 else 0  # --topology replicated: sampling asks no one
    per = []  # per worker: its phases
    for w in range(k):
        speed = net.speed(w)
        wire = {key: net.peer_transfer(b, w, k) for key, b in bytes_.items()}
        sampling = arcs * p.t_sample / speed + wire["sample"] + rounds * 3 * lat
        structure = k * block_ids * p.t_struct / speed + wire["structure"] + 2 * lat
        per.append(
            {
                "sampling": sampling,
                "structure": structure,
                "prepare": sampling + structure,
                "model_parallel": arcs1 * k * (p.feat_dim / k) * p.t_unit / speed,
                "partials": wire["partials"] + lat,
                "data_parallel": (arcs - arcs1) * p.hidden * p.t_unit / speed,
                "gradients": wire["gradients"] + lat,
                "wire_sample": wire["sample"],
                "wire_structure": wire["structure"],
            }
        )
    phase = {key: max(x[key] for x in per) for key in per[0]}  # each phase waits for its slowest worker
    prepare, mp, dp = phase["prepare"], phase["model_parallel"], phase["data_parallel"]
    partials, gradients = phase["partials"], phase["gradients"]
    train = train_seconds(steps, mp, partials, dp, gradients, pipelined)
    allreduce = allreduce_seconds(p.replicated, k, net)
    epoch = (max(steps * prepare, train) if p.prefetch else steps * prepare + train) + steps * allreduce
    sent = sum(bytes_.values())
    workers = []
    for r, x in enumerate(per):
        busy = steps * (x["model_parallel"] + x["data_parallel"])
        comm_wait = max(0.0, train - busy)  # the compute thread's wait for partials and the gradient push
        idle = max(0.0, epoch - busy - comm_wait - steps * allreduce)
        link = steps * (x["partials"] + x["gradients"] + x["wire_sample"] + x["wire_structure"])
        workers.append(
            worker_record(r, 1, epoch, busy, comm_wait, steps * allreduce, link, steps * sent, idle)
        )
    name = "p3-pipelined" if pipelined else "p3"
    figures = dict(
        bytes_per_step={**bytes_, "allreduce": 2 * (k - 1) / k * p.replicated * ITEM},
        step_parts={key: v for key, v in phase.items() if not key.startswith("wire_")}
        | {"allreduce": allreduce},
    )
    return epoch_result(
        name, k, epoch, p.num_train, steps, allreduce, round(steps * sent * k), workers, **figures
    )


def train_seconds(
    steps: int, mp: float, partials: float, dp: float, gradients: float, pipelined: bool
) -> float:
    """The compute thread's seconds of an epoch's ``steps`` batches, but the all-reduce."""
    if not pipelined or steps == 1:
        return steps * (mp + partials + dp + gradients)
    # first batch: its own partials exposed; middle ones: the next batch's partials under this one's DP; last: none
    overlapped = max(partials, dp)
    return steps * (mp + gradients) + partials + (steps - 1) * overlapped + dp


def both(p: P3Profile, k: int, bandwidth: float, latency: float, net=None) -> list[dict]:
    return [simulate_p3(p, k, bandwidth, latency, pipelined, net=net) for pipelined in (False, True)]


def simulate(plan: Path, meta: dict, options, out: Path, replan) -> tuple[dict, None]:
    """`g3 simulate PLAN` of a p3 plan (its spec\'s ``simulate``)."""
    result = run_minibatch_simulation(plan, meta, options, out)  # checks --run and that it trained this plan
    p = P3Profile.from_run(Path(options.run), meta)
    result["systems"], result["scaling"] = at_k_and_scaling(
        options, result["workers"], lambda kk, net: both(p, kk, options.bandwidth, options.latency, net=net)
    )
    result["rates"]["profile"] = asdict(p)
    result["rates"]["notes"] = [
        f"calibrated on {options.run} (K = {p.workers}, measured median epoch {p.measured_epoch_seconds:.3f} s); "
        "throughput = training seeds per second",
        "p3: layer 1 model-parallel (structure pushed, partials pulled, gradients pushed), layers 2+ "
        "data-parallel, the replicated parameters all-reduced (W1 sharded); p3-pipelined: the next batch's "
        "partial exchange overlaps this batch's data-parallel compute",
        "assumes one compute rate per arc-column for both phases, rates independent of K (no contention), no "
        "imbalance, per-owner counts scaling as K0/K under global order (deduplication within a batch unchanged)",
        "remote frontier requests grow as a hash partition's (K-1)/K",
    ]
    return result, None

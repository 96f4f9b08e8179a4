"""P3 §3.2's bytes per mini-batch in shape (paper 003, Fig. 15): what ``p3`` and ``distdgl`` move, by kind, computed
from the very blocks ``g3 train`` samples — no training run needed, so any hidden width H and feature width F.

The batches are the global order of ``g3 plan --batch-order global`` (one permutation of every labelled training
node per epoch; ``shuffled`` of stages/kits/runtime/minibatch.py), each worker taking the batch's targets its
partition (``assignment.npy``) owns; their blocks are ``build_blocks`` with the runtime's counter-based draw
(``sample_rows`` over the store's whole in-edge CSR, neighbours ascending: the draws are the same whoever makes
them, as with ``--topology replicated``). From the blocks, per worker and step (bytes *sent*, as ``g3 train``'s
``bytes_sent_per_phase`` counts them; ``b`` = bytes of a float, ``i`` = of a node id on the wire, 4 below 2³¹
nodes; ``V¹``/``V⁰`` = a worker's layer-1 destinations/sources, ``A¹`` its layer-1 arcs):

distdgl
  * ``features0`` — the rows of its nodes the others' ``V⁰`` need, pulled by request: Σ_{q≠w} (|V⁰_q ∩ own(w)| ·
    F · b + 29), a reply's frame being 29 bytes (only to a q that asked)
  * ``features0-ids`` — its requests, one per owner q of some of its ``V⁰``: 49 + i · n bytes (n ids)
  * ``sample-ids`` / ``sample`` (``--topology partitioned`` only) — per hop and per owner q of some frontier node:
    a request of 62 + i·n bytes (n ids), answered with 37 + 4·n + i·(picks) bytes (sent by the owner)
  * ``allreduce`` — every parameter (W₁ = 2·F·H for SAGE), once per step: *formula only*, ``g3 train`` does not
    record distdgl's all-reduce

p3 (the same ``sample-ids`` / ``sample``, no feature row)
  * ``structure`` — its layer-1 block to each peer: (K − 1) · i · (3 + |V⁰| + |V¹| + |A¹|); ``structure-sizes``
    (K − 1) · 8
  * ``partials`` — its column slice's partials of the others' V¹: Σ_{q≠w} |V¹_q| · H · b
  * ``gradients`` — ∂L/∂z¹ of its own V¹ to each peer: (K − 1) · |V¹_w| · H · b
  * ``allreduce`` — the replicated parameters (layer 1's bias, layers 2…L) once per step, as ``allreduce_bytes``
    records them (values · b per worker, not a ring's 2(K − 1)/K of that)

The feature rows scale linearly in F; the partials and gradients do not depend on F. These are the formulas
tests/test_p3.py proves against a real run; tests/test_p3_bytes_script.py checks this script's figures against
the bytes a real ``g3 train`` of both strategies recorded.

    python examples/p3_bytes.py --store /tmp/bm/products --part /tmp/bm/products-p3-{2,4} \\
        --fanouts 25,10 --batch-size 1000 --hidden 16 --batches 5
    python examples/p3_bytes.py --store /tmp/bm/medium --part /tmp/bm/medium-p3-2 --fanouts 25,10 \\
        --batches all --hidden 16,32,64,128,256,512 --feat-dim 64,100,128,256,512     # Fig. 15 per epoch
    python examples/p3_bytes.py --store STORE --part PART --fanouts 10,5 --batches all --run RUN_P3 RUN_DISTDGL
                                        # every epoch of real runs (--batch-order global on PART) against the script
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stages.common.store import GraphStore  # noqa: E402
from stages.kits.runtime.minibatch import shuffled  # noqa: E402
from stages.kits.runtime.neighbor_sampler import ascending_rows, build_blocks, sample_key, sample_rows  # noqa: E402

REQUEST_HEAD = (
    62  # a sampling request's framing: name, array count, the (fanout, key) params, the ids' header
)
REPLY_HEAD = 37  # a reply's: status byte, array count, the counts' and the picks' headers
FEATURE_REQUEST_HEAD = 49  # a feature pull's framing: name, array count, the empty params, the ids' header
FEATURE_REPLY_HEAD = 29  # its reply's: status byte, array count, the rows' header
DISTDGL_KINDS = ("features0", "features0-ids", "sample-ids", "sample", "allreduce")
P3_KINDS = ("structure", "structure-sizes", "partials", "gradients", "sample-ids", "sample", "allreduce")


@dataclass
class Counts:
    """What the bytes depend on, per step s and worker w (``[steps, K]``) or pair (``[steps, K, K]``)."""

    n_dst: np.ndarray  # |V¹|
    n_src: np.ndarray  # |V⁰|
    arcs: np.ndarray  # |A¹|
    rows_from: np.ndarray  # [s, w, q]: rows of V⁰_w that q owns (q ≠ w: fetched from q)
    req_ids: np.ndarray  # [s, w, q]: ids w sends q in sampling requests, all hops
    req_count: np.ndarray  # [s, w, q]: sampling requests w sends q
    req_picks: np.ndarray  # [s, w, q]: neighbours q draws for them


class Sampler:
    """The runtime's draw on the whole in-edge CSR (neighbours ascending by id in every row)."""

    def __init__(self, store: GraphStore, seed: int, epoch: int):
        indptr, indices = store.load_csr()
        self.indptr = np.asarray(indptr, dtype=np.int64)
        self.nbrs = ascending_rows(self.indptr, np.asarray(indices, dtype=np.int64))
        self.seed, self.epoch = seed, epoch
        self.scratch = np.full(store.num_nodes, -1, dtype=np.int32)

    def blocks(self, targets: np.ndarray, fanouts: list[int], step: int, on_hop=None):
        def sample(nodes, fanout, hop):
            counts, picks = sample_rows(
                self.indptr, self.nbrs, nodes, nodes, fanout, sample_key(self.seed, self.epoch, step, hop)
            )
            if on_hop is not None:
                on_hop(nodes, counts)
            return counts, picks

        return build_blocks(targets, fanouts, sample, self.scratch)


def global_batches(store: GraphStore, batch_size: int, seed: int, epoch: int) -> list[np.ndarray]:
    """The epoch's batches of ``--batch-order global``: every labelled training node, permuted."""
    train = store.split_index("train")
    train = np.sort(train[store.load_labels()[train] >= 0])
    perm = shuffled(train, seed, epoch)
    return [perm[s : s + batch_size] for s in range(0, len(perm), batch_size)]


def count(
    sampler: Sampler,
    owner: np.ndarray,
    k: int,
    batches: list[np.ndarray],
    fanouts: list[int],
    steps: list[int],
) -> Counts:
    """The counts of every worker for the batches (global step numbers ``steps``, the draws' keys)."""
    s_n = len(batches)
    c = Counts(
        *(np.zeros((s_n, k), np.int64) for _ in range(3)),
        *(np.zeros((s_n, k, k), np.int64) for _ in range(4)),
    )
    for i, (batch, step) in enumerate(zip(batches, steps, strict=True)):
        for w in range(k):

            def on_hop(nodes, counts, i=i, w=w):  # one sampling request per owner q ≠ w of some node
                per_q = np.bincount(owner[nodes], minlength=k)
                picks = np.bincount(owner[nodes], weights=counts, minlength=k).astype(np.int64)
                asked = np.arange(k) != w
                c.req_ids[i, w] += per_q * asked
                c.req_count[i, w] += (per_q > 0) & asked
                c.req_picks[i, w] += picks * asked

            targets = batch[owner[batch] == w]
            layer1 = sampler.blocks(targets, fanouts, step, on_hop)[0]
            c.n_dst[i, w], c.n_src[i, w], c.arcs[i, w] = len(layer1.dst), len(layer1.src), len(layer1.indices)
            c.rows_from[i, w] = np.bincount(owner[layer1.src], minlength=k)
            c.rows_from[i, w, w] = 0
    return c


def parameters(feat: int, hidden: int, classes: int, layers: int) -> tuple[int, int]:
    """(layer 1's weights, every other parameter) of a SAGE model: W_self and W_neigh (out × in) and a bias."""
    widths = [feat] + [hidden] * (layers - 1) + [classes]
    first = 2 * widths[1] * widths[0]
    rest = widths[1] + sum(2 * o * i + o for i, o in zip(widths[1:-1], widths[2:], strict=True))
    return first, rest


def bytes_by_kind(
    c: Counts,
    hidden: int,
    feat: int,
    classes: int,
    layers: int,
    float_bytes: int = 4,
    id_bytes: int = 4,
    topology: str = "partitioned",
) -> dict[str, dict[str, np.ndarray]]:
    """Bytes each worker sends per step, by kind: ``{strategy: {kind: [steps, K]}}`` (the module's formulas)."""
    k = c.n_dst.shape[1]
    peers = k - 1
    sampling = topology == "partitioned"
    req = (REQUEST_HEAD * c.req_count + id_bytes * c.req_ids).sum(axis=2) if sampling else 0 * c.n_dst
    # the replies w sends: to every q's requests of w's nodes
    served = REPLY_HEAD * c.req_count + 4 * c.req_ids + id_bytes * c.req_picks  # [s, asker, owner]
    rep = served.sum(axis=1) if sampling else 0 * c.n_dst
    first, rest = parameters(feat, hidden, classes, layers)
    steps = np.ones_like(c.n_dst)
    distdgl = {
        # [s, q]: the rows q serves, each asker's reply framed
        "features0": (c.rows_from * feat * float_bytes + FEATURE_REPLY_HEAD * (c.rows_from > 0)).sum(axis=1),
        "features0-ids": (FEATURE_REQUEST_HEAD * (c.rows_from > 0) + id_bytes * c.rows_from).sum(axis=2),
        "sample-ids": req,
        "sample": rep,
        "allreduce": steps * (first + rest) * float_bytes,
    }
    p3 = {
        "structure": peers * id_bytes * (3 + c.n_src + c.n_dst + c.arcs),
        "structure-sizes": steps * peers * 8,
        "partials": (c.n_dst.sum(axis=1, keepdims=True) - c.n_dst) * hidden * float_bytes,
        "gradients": peers * c.n_dst * hidden * float_bytes,
        "sample-ids": req,
        "sample": rep,
        "allreduce": steps * rest * float_bytes,
    }
    if k == 1:  # one worker: nothing crosses a network (the all-reduce included)
        distdgl, p3 = ({kind: 0 * c.n_dst for kind in d} for d in (distdgl, p3))
    return {"distdgl": distdgl, "p3": p3}


def per_batch(figures: dict[str, np.ndarray]) -> dict[str, float]:
    """Mean over the steps of the bytes all workers send, by kind, and their total."""
    out = {kind: float(v.sum(axis=1).mean()) for kind, v in figures.items()}
    out["total"] = sum(out.values())
    return out


def compare_run(
    run: Path,
    store: GraphStore,
    sampler: Sampler,
    owner: np.ndarray,
    k: int,
    batch_size: int,
    fanouts: list[int],
    topology: str,
) -> bool:
    """Every worker's bytes of every kind in every epoch of a real ``g3 train`` run (``metrics.jsonl``) against
    this script's figures for the same batches; prints each difference. distdgl's all-reduce is not recorded
    (a formula only); the run's plan must match the options given here. A ``sample`` figure can be recorded
    short: a worker's sampling server counts a peer's request as it answers, and a peer's first request of an
    epoch can arrive before this worker's loop has reset its counters (tests/test_p3_bytes_script.py)."""
    meta = json.loads((run / "run.json").read_text())
    strategy, opts, model = meta["strategy"]["name"], meta["strategy"]["options"], meta["plan"]["model"]
    given = {"fanouts": fanouts, "batch_size": batch_size, "batch_order": "global", "topology": topology}
    wrong = {o: opts.get(o) for o, v in given.items() if opts.get(o) != v}
    if (
        wrong
        or model["model"] != "sage"
        or model["layers"] != len(fanouts)
        or meta["plan"]["num_workers"] != k
    ):
        sys.exit(
            f"{run}: its plan ({opts}, {model}, K = {meta['plan']['num_workers']}) is not the options given "
            f"here ({given}, sage, {len(fanouts)} layers, K = {k})"
        )
    float_bytes = 8 if meta["config"]["dtype"] == "float64" else 4
    ids = 4 if store.num_nodes < 2**31 else 8
    same = True
    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        epoch = rec["epoch"]
        batches = global_batches(store, batch_size, meta["config"]["seed"], epoch)
        sampler.seed, sampler.epoch = meta["config"]["seed"], epoch
        c = count(sampler, owner, k, batches, fanouts, list(range(len(batches))))
        kinds = bytes_by_kind(
            c, model["hidden"], store.feat_dim, store.num_classes, len(fanouts), float_bytes, ids, topology
        )[strategy]
        for w, x in enumerate(rec["workers"]):
            sent = dict(x["bytes_sent_per_phase"], allreduce=x.get("allreduce_bytes"))
            diff = {
                kind: (int(v[:, w].sum()), sent.get(kind))
                for kind, v in kinds.items()
                if int(v[:, w].sum()) != sent.get(kind) and sent.get(kind) is not None
            }
            diff.update({kind: (None, n) for kind, n in sent.items() if kind not in kinds and n is not None})
            same = same and not diff
            print(
                f"{run} ({strategy}) epoch {epoch} worker {w}: {sum(n or 0 for n in sent.values()):,} bytes recorded, "
                + ("every kind equal to the script's" if not diff else f"differs (script, recorded): {diff}")
            )
    return same


def kib(x: float) -> str:
    return f"{x / 2**10:,.1f}"


def mib(x: float) -> str:
    return f"{x / 2**20:,.1f}"


def table(rows: list[dict], kinds: dict[str, tuple[str, ...]]) -> None:
    """One Markdown row per (K, H, F, strategy): KiB per batch (all workers) by kind, the total, and MiB per
    epoch when every batch was sampled."""
    every = [k for k in dict.fromkeys(kinds["distdgl"] + kinds["p3"])]
    print("| K | H | F | strategy | " + " | ".join(every) + " | total KiB/batch | MiB/epoch |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in every) + " | --- | --- |")
    for r in rows:
        cells = [kib(r["per_batch"][k]) if k in r["per_batch"] else "–" for k in every]
        print(
            f"| {r['K']} | {r['H']} | {r['F']} | {r['strategy']} | "
            + " | ".join(cells)
            + f" | **{kib(r['per_batch']['total'])}** | {mib(r['per_epoch_total']) if r['per_epoch_total'] else '–'} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True)
    ap.add_argument(
        "--part",
        nargs="+",
        required=True,
        help="partition folders (g3 partition -o ...); "
        "p3's hash partition for p3, the same for the distdgl it is compared with",
    )
    ap.add_argument("--fanouts", default="25,10", help="per hop, the targets' first (as g3 plan --fanouts)")
    ap.add_argument("--batch-size", type=int, default=1000)
    ap.add_argument(
        "--batches", default="5", help="global batches of the epoch sampled, or 'all' (per epoch)"
    )
    ap.add_argument("--epoch", type=int, default=0)
    ap.add_argument("--seed", type=int, default=0, help="g3 train --seed (the permutation and the draws)")
    ap.add_argument("--hidden", default="16", help="hidden widths H, comma-separated")
    ap.add_argument("--feat-dim", default="", help="feature widths F, comma-separated [default: the store's]")
    ap.add_argument("--float-bytes", type=int, default=4, help="4 = g3 train --dtype float32, 8 = float64")
    ap.add_argument(
        "--topology",
        default="partitioned",
        choices=["partitioned", "replicated"],
        help="as g3 plan --topology: replicated = no sampling request crosses the network",
    )
    ap.add_argument("--json", help="also write the rows (and every worker's per-kind totals) here")
    ap.add_argument(
        "--run",
        nargs="*",
        default=[],
        help="g3 train run folders (p3 or distdgl, --batch-order global, "
        "on the first --part) whose recorded bytes are compared with the script's, epoch by epoch",
    )
    a = ap.parse_args()
    fanouts = [int(f) for f in a.fanouts.split(",")]
    hiddens = [int(h) for h in a.hidden.split(",")]
    t0 = time.perf_counter()
    store = GraphStore.open(a.store)
    feats = [int(f) for f in a.feat_dim.split(",")] if a.feat_dim else [store.feat_dim]
    sampler = Sampler(store, a.seed, a.epoch)
    batches = global_batches(store, a.batch_size, a.seed, a.epoch)
    every = a.batches == "all"
    steps = list(range(len(batches) if every else min(int(a.batches), len(batches))))
    ids = 4 if store.num_nodes < 2**31 else 8
    print(
        f"store {a.store}: {store.num_nodes:,} nodes, {store.num_arcs:,} arcs, F = {store.feat_dim}, "
        f"{store.num_classes} classes; fanouts {a.fanouts}, batch {a.batch_size}, {len(steps)} of the epoch's "
        f"{len(batches)} batches, topology {a.topology}, {a.float_bytes}-byte floats "
        f"({time.perf_counter() - t0:.1f} s to load)",
        flush=True,
    )
    rows = []
    for part in a.part:
        k = int(json.loads((Path(part) / "partition.json").read_text())["num_partitions"])
        owner = np.asarray(np.load(Path(part) / "assignment.npy"), dtype=np.int64)
        t1 = time.perf_counter()
        c = count(sampler, owner, k, [batches[s] for s in steps], fanouts, steps)
        print(
            f"K = {k}: {len(steps)} batches sampled in {time.perf_counter() - t1:.1f} s; mean per batch "
            f"|V¹| = {c.n_dst.sum(axis=1).mean():,.0f}, |V⁰| = {c.n_src.sum(axis=1).mean():,.0f} (summed over "
            f"workers), remote V⁰ rows = {c.rows_from.sum(axis=(1, 2)).mean():,.0f}",
            flush=True,
        )
        for h in hiddens:
            for f in feats:
                figures = bytes_by_kind(
                    c, h, f, store.num_classes, len(fanouts), a.float_bytes, ids, a.topology
                )
                for strategy, kinds in figures.items():
                    rows.append(
                        {
                            "partition": str(part),
                            "K": k,
                            "H": h,
                            "F": f,
                            "strategy": strategy,
                            "per_batch": per_batch(kinds),
                            "per_epoch_total": per_batch(kinds)["total"] * len(steps) if every else None,
                            "per_worker": {kind: v.sum(axis=0).tolist() for kind, v in kinds.items()},
                        }
                    )
    table(rows, {"distdgl": DISTDGL_KINDS, "p3": P3_KINDS})
    if a.run:
        owner = np.asarray(np.load(Path(a.part[0]) / "assignment.npy"), dtype=np.int64)
        k = int(json.loads((Path(a.part[0]) / "partition.json").read_text())["num_partitions"])
        if not all(
            [compare_run(Path(r), store, sampler, owner, k, a.batch_size, fanouts, a.topology) for r in a.run]
        ):
            sys.exit("the recorded bytes differ from the script's")
    print(f"({time.perf_counter() - t0:.1f} s)")
    if a.json:
        run = {k: getattr(a, k) for k in ("store", "batch_size", "epoch", "seed", "topology", "float_bytes")}
        Path(a.json).write_text(
            json.dumps({**run, "fanouts": fanouts, "steps": steps, "rows": rows}, indent=1)
        )


if __name__ == "__main__":
    main()

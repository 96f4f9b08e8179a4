"""`g3 partition STORE --workers K`."""

from __future__ import annotations

import click

from stages.common.units import parse_size
from stages.partition import METHODS, PartitionOptions, print_partition_summary, run_partition

from .output import console
from .paths import OutputPath
from .values import parsed


@click.command(name="partition")
@click.argument("store", type=click.Path())
@click.option(
    "-w",
    "--workers",
    type=int,
    required=True,
    help="Number of partitions K (one per worker). 1 is valid; more than the node count is an error.",
)
@click.option(
    "--method",
    type=click.Choice(METHODS),
    default="g3",
    show_default=True,
    help="g3: multi-constraint METIS (balanced node count and degree sum) then Algorithm 1 swaps that "
    "balance the remote sets (paper §4.2). metis: plain edge-cut METIS (DGL, BNS-GCN). "
    "random: hash of node id and seed. chunk: contiguous id ranges of equal size (NeuGraph, ROC, "
    "NeutronStar). distdgl: METIS with DistDGL's five balance constraints (nodes, train, valid and "
    "test nodes, arcs; each within 1.05 of the mean). bytegnn: ByteGNN's partitioner (seed paper 001 "
    "§4.2.3) grows a block of every labelled (train/valid/test) node's --bytegnn-hops in-neighbourhood and "
    "assigns blocks greedily by cross edges x balance of train/valid/test counts (Algorithm 2). "
    "p3: P3's independent partitioning (§3.1): the structure by a hash of node id and --seed (each "
    "arc with its destination) and, separately, ceil(F/K) feature columns of every node per worker "
    "(the last workers get the remainder; OUT/columns/). feature: every worker keeps the whole "
    "topology and ceil(F/K) feature columns (NeutronTP).",
)
@click.option(
    "-o",
    "--out",
    type=OutputPath(),
    default=None,
    help="Output folder. Default: STORE.part-<method>-<K> beside the store.",
)
@click.option(
    "--gamma",
    type=float,
    default=0.005,
    show_default=True,
    help="g3: Algorithm 1 stops once min/max of the remote set sizes is at least 1 - gamma.",
)
@click.option(
    "--balance-tol",
    type=float,
    default=1.05,
    show_default=True,
    help="g3: allowed max/mean of the feature-size constraint (Eq. 1, METIS stage), and of the degree "
    "sums too unless --degree-tol is given. METIS uses the allowance, and a worker's compute grows "
    "a little faster than its share: 1.02 kept per-worker compute within 1.05 of the mean on four "
    "workers (docs/BENCHMARKS.md). bytegnn: no partition may hold more than "
    "ceil(this x mean) train, valid or test nodes (each split separately).",
)
@click.option(
    "--degree-tol",
    type=float,
    default=None,
    help="g3: no partition's degree sum (Eq. 2, the aggregation work) may exceed this times the mean: "
    "METIS's degree constraint, and swaps never push a partition past it [default: "
    "--balance-tol]. Graphs with dense hub/leaf blocks (web crawls) cannot balance degree sums "
    "without cutting those blocks; a looser value (e.g. 2 or 4) cuts less and communicates less, "
    "at the price of unbalanced compute (figures in docs/BENCHMARKS.md).",
)
@click.option(
    "--max-swaps",
    type=int,
    default=None,
    help="g3: stop Algorithm 1 after this many swaps [default: the node count].",
)
@click.option(
    "--refine-steps",
    type=int,
    default=None,
    help="g3: when Algorithm 1 stops short of 1 - gamma (stalled, cycle, swap limit), or reaches it by "
    "raising the total remote above --remote-budget x its start's, anneal its assignment with up "
    "to this many single-node moves in all under the same balance limits, until min/max remote "
    "reaches 1 - gamma within the budget. The moves are spent in restarts of growing length "
    "(4 x 1 %, 10 %, 86 %; several at once with --threads), and the first restart that meets "
    "the goal ends it. The result replaces Algorithm 1's if it meets that goal, or if Algorithm 1 "
    "missed the ratio and the refinement shrinks the largest remote set within the budget. 0 "
    "turns the refinement off [default: 1000 x the node count, 100 x (in one anneal) where a "
    "lower bound proves the budget infeasible under the degree limit; 12-71 s per 100 M steps "
    "on one core on cnr-2000, more with larger K and on slower cores (docs/BENCHMARKS.md)].",
)
@click.option(
    "--remote-budget",
    type=float,
    default=1.05,
    show_default=True,
    help="g3 refinement: the total remote set may not end above this multiple of plain edge-cut "
    "METIS's total (one extra METIS call, made only when the refinement runs). Where hub "
    "blocks make that impossible under the degree limit, the report says so, with a lower "
    "bound on the total and the --degree-tol below which the budget stays infeasible.",
)
@click.option(
    "--bytegnn-alpha",
    type=float,
    default=0.5,
    show_default=True,
    help="bytegnn: weight of the training-node balance in Algorithm 2's balancing score. The three "
    "weights are relative (divided by their sum); training nodes are visited every epoch, "
    "valid/test only at evaluation, hence the larger default. Must be >= 0.",
)
@click.option(
    "--bytegnn-beta",
    type=float,
    default=0.25,
    show_default=True,
    help="bytegnn: weight of the validation-node balance in the balancing score (>= 0).",
)
@click.option(
    "--bytegnn-gamma",
    type=float,
    default=0.25,
    show_default=True,
    help="bytegnn: weight of the test-node balance in the balancing score (>= 0; the three weights "
    "may not all be 0).",
)
@click.option(
    "--bytegnn-hops",
    type=int,
    default=2,
    show_default=True,
    help="bytegnn: radius of a block in in-hops, i.e. the number of GNN layers (>= 1). A node joins the "
    "block of its nearest labelled node within this many hops (ties: lowest node id); nodes "
    "farther from every labelled node go to the partitions with the fewest nodes.",
)
@click.option(
    "--seed",
    type=int,
    default=0,
    show_default=True,
    help="Seed of METIS, of the random hash and of bytegnn's order among equal blocks; the same seed "
    "gives the same partition.",
)
@click.option(
    "--threads",
    type=int,
    default=None,
    help="CPU threads for the parallel steps (candidate-swap search, counting, refinement restarts, "
    "shard CSR) [default: all cores]. METIS itself is single-threaded. The partition does not "
    "depend on it.",
)
@click.option(
    "--metis-memory",
    "metis_memory",
    default=None,
    callback=parsed(parse_size),
    metavar="SIZE",
    help="Memory METIS may hold (8GiB, 512MB). METIS needs about 70 bytes per symmetrised arc; a graph "
    "that needs more is first coarsened by size-constrained label propagation in memory bounded by "
    "its nodes, METIS partitions the clusters (every balance constraint summed per cluster, so "
    "balance and cut carry over) and the result is projected back (partition.json: "
    "metis_memory). The cut is a little worse than METIS's on the whole graph (docs/BENCHMARKS.md) "
    "[default: half the memory available when the stage starts].",
)
@click.option(
    "--hidden",
    type=int,
    default=16,
    show_default=True,
    help="Hidden width used to report bytes sent and received per layer (float32).",
)
@click.option(
    "--plot",
    type=OutputPath(),
    default=None,
    help="Also draw the per-partition remote-set sizes as bars into this PNG file.",
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
def command(
    store,
    workers,
    method,
    out,
    gamma,
    balance_tol,
    degree_tol,
    max_swaps,
    refine_steps,
    remote_budget,
    bytegnn_alpha,
    bytegnn_beta,
    bytegnn_gamma,
    bytegnn_hops,
    seed,
    threads,
    metis_memory,
    hidden,
    plot,
    force,
):
    """Partition the nodes of STORE over K workers and write one shard folder per worker.

    \b
    OUT holds partition.json (method, parameters, timing, per-partition figures, balance ratios),
    assignment.npy (int32 node -> partition) and part-00000/ ... with plain .npy files: owned and remote
    nodes, the local in-edge CSR, degrees, features, labels, splits and send lists (docs/ARTIFACTS.md).
    A worker needs only its own folder and partition.json.

    \b
    Remote set of partition i = the distinct nodes outside i with an arc into i: what worker i receives per
    layer. g3 balances these sizes across workers while keeping their total near METIS's.
    """
    options = PartitionOptions(
        workers=workers,
        method=method,
        gamma=gamma,
        balance_tol=balance_tol,
        degree_tol=degree_tol,
        seed=seed,
        threads=threads,
        hidden=hidden,
        max_swaps=max_swaps,
        refine_steps=refine_steps,
        remote_budget=remote_budget,
        bytegnn_alpha=bytegnn_alpha,
        bytegnn_beta=bytegnn_beta,
        bytegnn_gamma=bytegnn_gamma,
        bytegnn_hops=bytegnn_hops,
        metis_memory=metis_memory,
    )
    summary = run_partition(store, options, out=out, force=force, plot=plot)
    print_partition_summary(summary, console)
    if plot:
        console.print(f"plot: {plot}")

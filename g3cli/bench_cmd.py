"""`g3 bench STORE`."""

from __future__ import annotations

import json

import click

from stages.bench import PEERS, BenchOptions, print_bench, run_bench
from stages.common.strategies import knob_values
from stages.common.units import parse_size

from .output import stdout_console
from .paths import OutputPath
from .values import parsed


def _int_list(ctx, param, value):
    try:
        ks = tuple(int(x) for x in str(value).split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"expected a comma-separated list of integers, got {value!r}") from None
    if not ks:
        raise click.BadParameter("give at least one worker count, e.g. 1,2,4")
    if any(k < 1 for k in ks):
        raise click.BadParameter("worker counts must be >= 1")
    return ks


def _peers(ctx, param, value):
    t = str(value).strip().lower()
    if t in ("", "none"):
        return ()
    out = tuple(p.strip() for p in t.split(",") if p.strip())
    for p in out:
        if p not in PEERS:
            raise click.BadParameter(f"{p!r} is not one of {', '.join(PEERS)} (or 'none')")
    return out


def _links(ctx, param, value):
    if value is None:
        return ()
    from stages.runtime.launch.netemu import parse_rate, rate_label

    out = []
    for text in str(value).split(","):
        if text.strip():
            try:
                out.append(rate_label(parse_rate(text)))
            except ValueError as exc:
                raise click.BadParameter(str(exc)) from None
    return tuple(dict.fromkeys(out))


@click.command("bench")
@click.argument("store", type=click.Path())
@click.option(
    "--model",
    type=click.Choice(["sage", "gcn", "gat"]),
    default="sage",
    show_default=True,
    help="GNN model of every system (the peers use their standard SAGEConv / GCNConv / GATConv).",
)
@click.option("--layers", type=int, default=2, show_default=True, help="Number of GNN layers.")
@click.option("--hidden", type=int, default=16, show_default=True, help="Hidden width (per head for GAT).")
@click.option("--heads", type=int, default=8, show_default=True, help="GAT attention heads.")
@click.option(
    "--strategies",
    default="g3",
    show_default=True,
    help="Training strategies to run side by side with each --workers K, comma-separated specs "
    "NAME[@METHOD][{option=value,...}]: the strategy, the partition method (default: the strategy's "
    "own, see `g3 plan --help`) and `g3 plan` options without the dashes, e.g. "
    "'g3,bns-gcn,bns-gcn@chunk,bns-gcn{boundary-sample=0.1},sancus{staleness=drift:0.02,sancus-comm=p2p}'.",
)
@click.option(
    "--workers",
    default="1,2,4",
    show_default=True,
    callback=_int_list,
    help="Worker counts of every strategy (partition, plan, train), comma-separated.",
)
@click.option(
    "--epochs",
    type=int,
    default=5,
    show_default=True,
    help="Epochs per system; the median excludes the first (warm-up) when there are several.",
)
@click.option(
    "--threads",
    type=int,
    default=None,
    help="Total threads of every system (g3 splits them over its workers) [default: all cores].",
)
@click.option("--lr", type=float, default=0.01, show_default=True, help="Adam learning rate (every system).")
@click.option(
    "--dropout", type=float, default=0.5, show_default=True, help="Dropout between layers (every system)."
)
@click.option(
    "--pipeline",
    type=click.Choice(knob_values("pipeline")),
    default="multi",
    show_default=True,
    help="The bin schedule of g3 and the chunk pipeline of neutrontp (see g3 train --help).",
)
@click.option(
    "--bin-size",
    type=int,
    default=None,
    help="The g3 strategy's plan: fixed nodes per bin [default: from memory].",
)
@click.option(
    "--device-memory",
    default=None,
    callback=parsed(parse_size),
    help="Device memory per worker of the plans that size bins or chunks by it (g3, neutrontp), e.g. 8GiB [default: auto].",
)
@click.option(
    "--peers",
    "peers",
    default="pyg,dgl",
    show_default=True,
    callback=_peers,
    help="Peers to run: pyg, dgl (comma-separated) or none. PyG needs `make peers`, DGL `make peers-dgl`.",
)
@click.option("--no-single", is_flag=True, help="Skip single-process g3 full-graph training.")
@click.option(
    "--dgl-python",
    type=click.Path(),
    default=None,
    help="Python of the DGL environment [default: $G3_DGL_PYTHON, else .venv-dgl/bin/python].",
)
@click.option(
    "--timeout", type=float, default=3600.0, show_default=True, help="Seconds allowed per peer run."
)
@click.option(
    "--emulate-link",
    "links",
    default=None,
    callback=_links,
    metavar="RATE[,RATE…]",
    help="Run every strategy on emulated hosts joined by links of each RATE (e.g. 100mbit,1gbit,10gbit; "
    "`g3 train --emulate-link`, needs root): one table per rate, one of epoch time against the "
    "rate, and bench-links.png. The peers and single-process g3 run once, without a network.",
)
@click.option(
    "--hosts",
    type=int,
    default=None,
    help="With --emulate-link: emulated hosts of every run [default: one per worker].",
)
@click.option(
    "--trace",
    is_flag=True,
    help="Train every strategy with `g3 train --trace`: the share of its communication hidden under "
    "compute goes into bench.json (tracing costs a little time per span).",
)
@click.option(
    "-o",
    "--out",
    type=OutputPath(),
    default=None,
    help="Output folder: bench.json, bench.png, graph.npz, g3's partitions/plans/runs, peer logs "
    "[default: STORE.bench beside the store]. Its partitions and plans are reused while they match.",
)
@click.option("--force", is_flag=True, help="Replace the bench.json of an earlier benchmark in OUT.")
@click.option("--json", "as_json", is_flag=True, help="Print bench.json instead of the table.")
def command(
    store,
    model,
    layers,
    hidden,
    heads,
    strategies,
    workers,
    epochs,
    threads,
    lr,
    dropout,
    pipeline,
    bin_size,
    device_memory,
    peers,
    no_single,
    dgl_python,
    timeout,
    links,
    hosts,
    trace,
    out,
    force,
    as_json,
):
    """Compare training strategies side by side on STORE, next to DGL and PyG, in one invocation: each strategy
    with each worker count (its partition, plan and training run), single-process g3 full-graph, PyG and DGL
    full-graph training, all with the same model, optimizer, epochs and thread count. The table, bench.json
    and bench.png give the median epoch time, bytes sent per epoch, final test accuracy, peak memory per
    worker and the ratios. A peer that is not installed is reported as such. The peers read the graph from a
    neutral .npz exported once."""
    from stages.bench import split_specs

    opts = BenchOptions(
        model=model,
        layers=layers,
        hidden=hidden,
        heads=heads,
        workers=workers,
        strategies=tuple(split_specs(strategies)),
        epochs=epochs,
        threads=threads,
        lr=lr,
        dropout=dropout,
        pipeline=pipeline,
        bin_size=bin_size,
        device_memory=device_memory,
        peers=peers,
        single=not no_single,
        dgl_python=dgl_python,
        timeout=timeout,
        links=links,
        hosts=hosts,
        trace=trace,
    )
    result = run_bench(store, opts, out=out, force=force)
    if as_json:
        click.echo(json.dumps(result, indent=1))
    else:
        print_bench(result, stdout_console())

"""`g3 train PLAN`."""

from __future__ import annotations

import click

from stages.common.strategies import knob_declarations
from stages.runtime.config import DTYPES, RESIDENCY
from stages.runtime.heap import HEAP_POLICIES
from stages.train import TrainConfig, run_train

from .output import print_run_summary
from .paths import OutputPath


def knob_option(uses: list):
    """The `g3 train` option of one knob, from every strategy's declaration of it (stages/common/knobs.py): its
    type (the values any of them takes) and a help naming the strategies, their defaults and what each says the
    knob does there."""
    knob = uses[0][1]

    def shown(value) -> str:
        return ("on" if value else "off") if knob.type is bool else str(value)

    default = shown(knob.default)
    others = "".join(f"; {s.name}: {shown(k.default)}" for s, k in uses if shown(k.default) != default)
    head = f"[{', '.join(s.name for s, _ in uses)} plans; default {default}{others}]"
    text = " ".join([head, *dict.fromkeys(k.help for _, k in uses)])
    if knob.type is bool:
        return click.option(f"{knob.flag}/--no-{knob.flag[2:]}", knob.name, default=None, help=text)
    if all(k.choices for _, k in uses):
        kind = click.Choice(list(dict.fromkeys(v for _, k in uses for v in k.choices)))
    else:
        kind = knob.type
    metavar = next((k.metavar for _, k in uses if k.metavar), None)
    return click.option(knob.flag, knob.name, type=kind, default=None, metavar=metavar, help=text)


def knob_options(f):
    """Every strategy knob's option on the command ``f``, in the registry's order (they reach ``f`` as keywords
    by their names)."""
    for uses in reversed(knob_declarations().values()):  # the last option added is shown first
        f = knob_option(uses)(f)
    return f


@click.command("train")
@click.argument("plan", type=click.Path())
@click.option(
    "--epochs",
    type=int,
    default=10,
    show_default=True,
    help="Epochs (a full-graph strategy takes one optimizer step per epoch, a mini-batch one per batch).",
)
@click.option("--lr", type=float, default=0.01, show_default=True, help="Adam learning rate.")
@click.option("--weight-decay", type=float, default=0.0, show_default=True, help="Adam weight decay.")
@click.option(
    "--dropout",
    type=float,
    default=0.5,
    show_default=True,
    help="Dropout between layers; masks depend only on (seed, epoch, layer, node id), not on K.",
)
@click.option(
    "--seed", type=int, default=0, show_default=True, help="Seed of the initial weights and dropout masks."
)
@click.option(
    "--workers",
    type=int,
    default=None,
    help="Local worker processes to spawn; must equal the plan's worker count [default: the plan's]. "
    "Under torchrun, RANK/WORLD_SIZE/MASTER_ADDR come from the environment instead.",
)
@click.option(
    "--device",
    type=click.Choice(["cpu", "cuda"]),
    default="cpu",
    show_default=True,
    help="Compute device (cuda: one GPU per rank, nccl for all-reduce, gloo for P2P host buffers).",
)
@click.option(
    "--residency",
    type=click.Choice(RESIDENCY),
    default="auto",
    show_default=True,
    help="Where each worker's partition, activations and gradients live. 'device': on the compute device "
    "for the whole run, computed by the device's own kernels with no copy in or out (the device "
    "path; on the CPU it runs what a GPU runs, for checking it). 'host': in host memory, the CPU "
    "kernels; on a GPU each layer or bin is copied in and out (g3's bins on a copy stream). 'auto': "
    "'device' on a GPU where the plan found the partition fits the device memory (g3 plan "
    "--device-memory), else 'host'.",
)
@click.option(
    "--trace",
    is_flag=True,
    help="Time every span of every epoch but the first: the shares of communication time hidden under "
    "compute, spent blocked on messages and overlapping the runtime's data movement go to each "
    "epoch's metrics record, and the last epoch's timeline to RUN/trace/rank-N.json "
    "(Chrome trace, for Perfetto or chrome://tracing).",
)
@click.option(
    "--profile",
    type=OutputPath(),
    default=None,
    help="Write PROFILE.json: compute seconds per arc, node and bin of each layer on this device, fitted "
    "from the last epoch's bins, the warmest (input of `g3 simulate --profile`).",
)
@click.option(
    "--count-ops",
    is_flag=True,
    help="Count the aten operations one steady-state training step dispatches (the first step of the second "
    "epoch) and those that make the host wait for the device (a value read back, nonzero, unique, "
    "a boolean mask, a copy to the host): ops_per_step, sync_ops_per_step and both by operation name "
    "in that epoch's metrics record, per worker. What a GPU pays per step besides the arithmetic.",
)
@click.option(
    "--eval-every",
    type=int,
    default=None,
    help="Evaluate train/valid/test accuracy every N epochs (0: never) [default: 1; with --resume: the "
    "run's].",
)
@click.option(
    "--checkpoint-every",
    type=int,
    default=None,
    help="Write a checkpoint every N epochs (0: never) [default: 0; with --resume: the run's].",
)
@click.option("--resume", is_flag=True, help="Continue the run in RUN from its latest checkpoint.")
@click.option(
    "--logger",
    "loggers",
    type=click.Choice(["csv", "tensorboard"]),
    multiple=True,
    help="Also log every epoch's figures to RUN/metrics.csv (csv) or TensorBoard event files in "
    "RUN/tensorboard (tensorboard: pip install 'g3[tensorboard]'); repeatable. RUN/metrics.jsonl is "
    "always written.",
)
@click.option(
    "--metric",
    type=click.Choice(["accuracy", "rocauc"]),
    default="accuracy",
    show_default=True,
    help="Evaluation metric besides accuracy: rocauc adds each split's ROC-AUC (binary tasks, e.g. the "
    "imbalanced Tolokers) to the metrics records.",
)
@knob_options
@click.option(
    "--heap",
    type=click.Choice(HEAP_POLICIES),
    default="keep",
    show_default=True,
    help="Host memory of each worker process: 'keep' = the C library's malloc serves every block from the "
    "heap and keeps freed memory there, so each epoch reuses the pages of the last instead of "
    "mapping, faulting in and zeroing them again (about 20 % faster epochs measured on one worker; the "
    "resident set stays near its peak); 'system' = the C library's defaults. Linux/glibc only; "
    "elsewhere both mean the defaults.",
)
@click.option(
    "--dtype",
    type=click.Choice(sorted(DTYPES)),
    default="float32",
    show_default=True,
    help="Floating-point type of weights and embeddings.",
)
@click.option(
    "--threads", type=int, default=None, help="Torch threads per worker [default: cores / workers]."
)
@click.option(
    "--timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="Seconds a worker waits for a peer before the run fails.",
)
@click.option(
    "--master-addr",
    default="127.0.0.1",
    show_default=True,
    help="Rendezvous address for local workers (loopback unless told otherwise).",
)
@click.option(
    "--master-port", type=int, default=0, show_default=True, help="Rendezvous port (0: a free port)."
)
@click.option(
    "--emulate-link",
    default=None,
    metavar="RATE",
    help="Run the workers on emulated hosts of this machine, joined by links of RATE per host and "
    "direction (e.g. 100mbit, 1gbit, 10gbit): one network namespace per host with its own cores, "
    "one torchrun agent per host, each host reading only its own copy of the plan. Needs root (or "
    "CAP_NET_ADMIN). Results equal a local run's; epoch times include the network's (docs/DESIGN.md, "
    "'Emulated hosts').",
)
@click.option(
    "--hosts",
    type=int,
    default=None,
    help="With --emulate-link: emulated hosts; each runs K/H workers, which talk over its loopback "
    "[default: one host per worker].",
)
@click.option(
    "--emulate-subnet",
    default=None,
    metavar="CIDR",
    help="With --emulate-link: the hosts' addresses (host n is address 100+n) [default: 198.18.0.0/24, "
    "set aside for benchmarking by RFC 2544].",
)
@click.option(
    "--max-restarts",
    type=int,
    default=0,
    show_default=True,
    help="With --emulate-link: a worker group that lost a worker, or a host whose agent died, is "
    "restarted up to N times and resumes from the newest checkpoint every host has.",
)
@click.option(
    "--emulate-fault",
    "emulate_faults",
    multiple=True,
    metavar="SPEC",
    help="With --emulate-link (repeatable): link-down:HOST:EPOCH:SECONDS takes HOST's link down half an "
    "epoch after epoch EPOCH for SECONDS; kill-agent:HOST:EPOCH kills HOST's torchrun agent then "
    "(a crashed host, started again under --max-restarts).",
)
@click.option(
    "-o", "--out", type=OutputPath(), default=None, help="Run folder [default: PLAN.run beside PLAN]."
)
@click.option("--force", is_flag=True, help="Replace the run folder if it exists.")
def command(
    plan,
    epochs,
    lr,
    weight_decay,
    dropout,
    seed,
    workers,
    device,
    residency,
    trace,
    profile,
    count_ops,
    eval_every,
    checkpoint_every,
    resume,
    loggers,
    metric,
    heap,
    dtype,
    threads,
    timeout,
    master_addr,
    master_port,
    emulate_link,
    hosts,
    emulate_subnet,
    max_restarts,
    emulate_faults,
    out,
    force,
    **knobs,
):
    """Train the plan's GNN with K workers, executed by the plan's strategy (`g3 plan --strategy`: g3's bins
    and peer-to-peer sharing, bns-gcn's or sancus's layer-synchronous exchange, ...); weight gradients are
    all-reduced and every rank takes the same Adam step. Writes RUN/run.json, per-epoch metrics
    (RUN/metrics.jsonl), logs per rank, checkpoints and the final weights RUN/model.pt. Options marked with
    strategies apply only to plans of those strategies (others are refused)."""
    cfg = TrainConfig(
        epochs=epochs,
        lr=lr,
        weight_decay=weight_decay,
        dropout=dropout,
        seed=seed,
        workers=workers,
        device=device,
        residency=residency,
        trace=trace,
        profile=profile,
        count_ops=count_ops,
        eval_every=eval_every,
        checkpoint_every=checkpoint_every,
        resume=resume,
        logger=tuple(loggers),
        metric=metric,
        knobs=knobs,
        heap=heap,
        dtype=dtype,
        threads=threads,
        timeout=timeout,
        master_addr=master_addr,
        master_port=master_port,
        emulate_link=emulate_link,
        hosts=hosts,
        emulate_subnet=emulate_subnet,
        max_restarts=max_restarts,
        emulate_faults=tuple(emulate_faults),
    )
    try:
        info = run_train(plan, cfg, out=out, force=force)
    except KeyboardInterrupt:
        _say_how_to_resume(plan, out, epochs)
        raise
    print_run_summary(info)


def _say_how_to_resume(plan: str, out: str | None, epochs: int) -> None:
    """After Ctrl-C: the command that continues the run, when it left a checkpoint to continue from."""
    import shlex
    from pathlib import Path

    run = Path(out) if out else Path(plan).parent / f"{Path(plan).name}.run"
    if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
        click.echo(
            f"g3: the run keeps its checkpoints; continue it with: g3 train {shlex.quote(str(plan))} "
            f"-o {shlex.quote(str(run))} --resume --epochs {epochs}",
            err=True,
        )

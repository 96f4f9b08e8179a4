"""`g3`: full-graph GNN training with hybrid parallelism (G3), as a pipeline of on-disk stages."""

from __future__ import annotations

import errno
import sys

import click

from stages.common.errors import G3InputError, G3RuntimeError
from stages.common.version import VERSION

# what the machine refused, rather than a bug: a full disk, a read-only or forbidden path, a path under a file
ENVIRONMENT_ERRNOS = {
    errno.ENOSPC,
    errno.EROFS,
    errno.EACCES,
    errno.EPERM,
    errno.ENOTDIR,
    errno.EISDIR,
    errno.EDQUOT,
    errno.EMFILE,
    errno.ENAMETOOLONG,
    errno.EIO,
}


class G3Group(click.Group):
    """Turns g3's errors into one line on stderr and an exit code (2 for bad input or an environment that
    refuses: disk full, read-only, permission), unless --debug; finds its commands in ``COMMANDS``."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        return load_command(name)

    def format_commands(self, ctx: click.Context, formatter) -> None:
        """No generated command list: the group's help lists every command with its one line (each command's
        module would otherwise be imported for its summary, and with it numba and torch: 2.4 s for --help)."""

    def invoke(self, ctx: click.Context):
        def debug() -> bool:  # read at the error: the group's callback sets it inside super().invoke
            return bool(ctx.obj and ctx.obj.get("debug"))

        try:
            return super().invoke(ctx)
        except (G3InputError, G3RuntimeError) as exc:
            if debug():
                raise
            click.echo(f"g3: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except OSError as exc:
            if debug() or exc.errno not in ENVIRONMENT_ERRNOS:
                raise
            where = f"{exc.filename}: " if exc.filename else ""
            click.echo(f"g3: error: {where}{exc.strerror or exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt as exc:  # its message, when it has one, says what was kept
            click.echo(f"g3: interrupted{f': {exc}' if str(exc) else ''}", err=True)
            _forget_the_interrupt_for_python()
            sys.exit(130)


def _forget_the_interrupt_for_python() -> None:
    """A Ctrl-C that lands while a string is being executed (``dataclass`` and ``namedtuple`` build their
    methods with ``exec``) leaves CPython's "unhandled KeyboardInterrupt" flag set even though g3 handles it;
    under ``python -m g3cli.main`` (what the tests and the job scripts run) the interpreter then kills itself
    with SIGINT after its exit 130. Executing a string resets the flag on the versions that have it."""
    exec("None")


@click.group(cls=G3Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(VERSION, "--version", prog_name="g3")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line error messages.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """g3 trains graph neural networks on the whole graph across many workers (G3's hybrid parallelism),
    and runs the distributed systems it is compared with as strategies on the same runtime.

    \b
    Pipeline (each stage reads the previous stage's artifact from disk):
      g3 ingest SOURCE STORE      OGB / WebGraph / edge list / .npz / .pt / synthetic -> zarr graph store
      g3 partition STORE -w K     balanced partitions + per-worker shards
      g3 plan PART --strategy S   how strategy S executes it: g3, bns-gcn, sancus, distdgl, bytegnn,
                                  clustergcn, neutrontp, p3, hopgnn (`g3 plan --help` compares them)
      g3 bundle PLAN --nodes N    one self-contained folder per host of a multi-host (torchrun) run
      g3 train PLAN               distributed training with the plan's strategy
      g3 eval RUN                 exact inference, accuracy per split
      g3 predict RUN -o FILE      the trained model's logits for every node (.npy or .zarr)
      g3 export RUN -o FILE       the trained model as PyG's GraphSAGE / GCN / GAT loads it
      g3 report RUN...            plots and a summary of runs (strategies side by side)
      g3 bench STORE              strategies side by side with DGL and PyG
      g3 simulate PLAN            a discrete-event model of an epoch on K workers
      g3 advise STORE             which strategy and K for this graph and cluster: predicted, ranked
      g3 info PATH                summary of any g3 artifact
      g3 cluster check|clean      the emulated hosts of --emulate-link (train, eval, bench)

    `g3 COMMAND --help` explains a command and every option.
    """
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug


# Each command's module is imported when that command runs (or its help is shown), not when `g3` starts: the
# modules import their stages, and train's import torch, so `g3 ingest` or `g3 info` would otherwise pay for every
# stage (3.7 s of imports on the 2-core sandbox, against 0.7 s for ingest's own).
COMMANDS = (
    "ingest",
    "info",
    "partition",
    "plan",
    "bundle",
    "train",
    "eval",
    "predict",
    "export",
    "report",
    "bench",
    "simulate",
    "cluster",
    "advise",
)


def load_command(name: str) -> click.Command:
    """The command ``name``, its module (g3cli/NAME_cmd.py) imported now."""
    match name:
        case "ingest":
            from g3cli import ingest_cmd as module
        case "info":
            from g3cli import info_cmd as module
        case "partition":
            from g3cli import partition_cmd as module
        case "plan":
            from g3cli import plan_cmd as module
        case "bundle":
            from g3cli import bundle_cmd as module
        case "train":
            from g3cli import train_cmd as module
        case "eval":
            from g3cli import eval_cmd as module
        case "predict":
            from g3cli import predict_cmd as module
        case "export":
            from g3cli import export_cmd as module
        case "report":
            from g3cli import report_cmd as module
        case "bench":
            from g3cli import bench_cmd as module
        case "simulate":
            from g3cli import simulate_cmd as module
        case "cluster":
            from g3cli import cluster_cmd as module
        case "advise":
            from g3cli import advise_cmd as module
        case _:
            raise KeyError(name)
    return module.command


def main() -> None:
    cli(prog_name="g3")


if __name__ == "__main__":
    main()

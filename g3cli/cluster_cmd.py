"""`g3 cluster`: the emulated hosts of `--emulate-link` (check, clean)."""

from __future__ import annotations

import click

from stages.kits.runtime.launch.netemu import clean_stale, g3_namespaces, why_not_available


@click.group("cluster")
def command() -> None:
    """The emulated cluster of `g3 train/eval/bench --emulate-link`: one network namespace per host on this
    machine, links shaped by tbf (docs/DESIGN.md, "Emulated hosts")."""


@command.command("check")
def check() -> None:
    """Say whether emulated hosts can be made here (root or CAP_NET_ADMIN, iproute2, tbf); exit 2 if not."""
    reason = why_not_available()
    if reason:
        click.echo(f"g3: emulated hosts are not available here: {reason}", err=True)
        raise SystemExit(2)
    click.echo("emulated hosts are available: network namespaces, veth links and tbf shaping work here")


@command.command("clean")
@click.option(
    "--all",
    "everything",
    is_flag=True,
    help="Also remove the networks of launchers that are still running (their runs fail).",
)
def clean(everything: bool) -> None:
    """Remove what a killed launcher left: the namespaces of emulated networks whose `g3` process is gone, and the
    processes still running in them. A launcher cleans up after itself, also on failure or Ctrl-C; only a
    SIGKILLed one leaves anything (the next emulated run removes it too)."""
    removed = clean_stale(everything=everything)
    left = g3_namespaces()
    click.echo(
        f"removed {len(removed)} namespace{'s' if len(removed) != 1 else ''}"
        + (f": {', '.join(removed)}" if removed else "")
        + (f"; {len(left)} still in use by running launchers" if left else "")
    )

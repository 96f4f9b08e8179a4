"""An option declared once: a field declared with ``setting`` is the command's option (flag, type, default, choices,
help), and the commands made this way take their options from their stage's dataclass only."""

from __future__ import annotations

import dataclasses

import click
import pytest
from click.testing import CliRunner

from g3cli.settings import setting_options
from stages.common.errors import G3InputError
from stages.common.settings import REQUIRED, check_choices, setting


def _sizes(text: str) -> tuple[int, ...]:
    values = tuple(int(t) for t in text.split(","))
    if any(v < 1 for v in values):
        raise ValueError("sizes must be >= 1")
    return values


@dataclasses.dataclass
class Fixture:
    count: int = setting(REQUIRED, "How many.", short="-n")
    ratio: float = setting(0.5, "A share.")
    mode: str = setting("fast", "How.", choices=("fast", "slow"))
    limit: int | None = setting(None, "At most this many [default: none].")
    sizes: tuple[int, ...] = setting((1, 2), "Sizes, comma-separated.", parse=_sizes, cli_default="1,2")
    tags: tuple[str, ...] = setting((), "Repeatable.", flag="--tag")
    verbose: bool = setting(False, "Say more.")
    check: bool = setting(True, "Check (--no-check: do not).")
    report: str | None = setting(None, "Write a report here.", path="output")
    internal: int = 7  # no setting: not an option


def _command():
    @click.command()
    @setting_options(Fixture)
    def command(**settings):
        click.echo(repr(Fixture(**settings)))

    return command


def test_a_setting_is_its_option():
    help_text = " ".join(CliRunner().invoke(_command(), ["--help"]).output.split())
    for line in [
        "-n, --count INTEGER How many. [required]",
        "--ratio FLOAT A share. [default: 0.5]",
        "--mode [fast|slow] How. [default: fast]",
        "--limit INTEGER At most this many [default: none].",
        "--sizes TEXT Sizes, comma-separated. [default: 1,2]",
        "--tag TEXT Repeatable.",
        "--verbose Say more.",
        "--check / --no-check Check (--no-check: do not). [default: check]",
        "--report PATH Write a report here.",
    ]:
        assert line in help_text, line
    assert "--internal" not in help_text

    r = CliRunner().invoke(_command(), ["-n", "3"])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == repr(Fixture(count=3))  # every default the dataclass's own
    r = CliRunner().invoke(
        _command(),
        [
            "-n",
            "3",
            "--sizes",
            "4,5",
            "--tag",
            "a",
            "--tag",
            "b",
            "--no-check",
            "--verbose",
            "--mode",
            "slow",
            "--limit",
            "9",
        ],
    )
    assert r.exit_code == 0, r.output
    assert r.output.strip() == repr(
        Fixture(count=3, sizes=(4, 5), tags=("a", "b"), check=False, verbose=True, mode="slow", limit=9)
    )


@pytest.mark.parametrize(
    "args,error",
    [
        ([], "Missing option '-n' / '--count'"),
        (["-n", "1", "--sizes", "0"], "Invalid value for '--sizes': sizes must be >= 1"),
        (["-n", "1", "--mode", "medium"], "'medium' is not one of 'fast', 'slow'"),
        (["-n", "x"], "'x' is not a valid integer"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_option(args, error):
    r = CliRunner().invoke(_command(), args)
    assert r.exit_code == 2 and error in r.output, r.output


def test_choices_are_checked_where_click_does_not_see_the_value():
    check_choices(Fixture(count=1))
    with pytest.raises(G3InputError, match="--mode medium is not one of fast, slow"):
        check_choices(Fixture(count=1, mode="medium"))


def test_the_commands_take_their_options_from_their_stage_only():
    """g3 train, partition, simulate, advise, bench and ingest: every option but the output's is a setting of the stage's
    options dataclass (and the strategies' knobs for train), so an option is declared in one place."""
    import importlib

    from stages.advise import AdviseOptions
    from stages.bench.run import BenchOptions
    from stages.ingest.run import IngestOptions, SourceArgs
    from stages.partition.run import PartitionOptions
    from stages.simulate import SimulateOptions
    from stages.strategies.registry import knob_declarations
    from stages.train.run import TrainConfig

    own = {"out", "force", "as_json", "top", "plot", "help", "fmt"}
    for name, classes, extra in [
        ("train", (TrainConfig,), set(knob_declarations())),
        ("partition", (PartitionOptions,), set()),
        ("simulate", (SimulateOptions,), set()),
        ("advise", (AdviseOptions,), set()),
        ("bench", (BenchOptions,), set()),
        ("ingest", (IngestOptions, SourceArgs), set()),
    ]:
        module = importlib.import_module(f"g3cli.{name}_cmd")
        command = getattr(module, "command", None) or module.ingest
        settings = {f.name for c in classes for f in dataclasses.fields(c) if "setting" in f.metadata}
        params = {p.name for p in command.params if isinstance(p, click.Option)}
        assert params - own == settings | extra, name

"""Every command the README shows runs, in the README's order, from an empty folder (tests/readme_walkthrough.py on
`synthetic:tiny`); every `g3 …` command names a real command and real options of it; every plan it trains is one an
earlier README command writes (issue 40 §5: the README once trained `…plan-sage` after planning `…plan-p3-sage`)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from readme_walkthrough import g3_commands, readme_lines, walk

from g3cli.main import cli

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def readme_commands() -> list[list[str]]:
    """The `g3 …` command lines of the README's code blocks (continuations joined, comments dropped)."""
    return [shlex.split(c) for c in g3_commands()]


def options_of(command) -> set[str]:
    return {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}


def test_every_readme_command_and_option_exists():
    cmds = readme_commands()
    assert len(cmds) > 30
    for cmd in cmds:
        name = cmd[1]
        if name.startswith("-"):
            continue
        command = cli.get_command(None, name)
        assert command is not None, f"README: `{' '.join(cmd)}`: no command {name}"
        known = options_of(command)
        if hasattr(command, "commands"):  # a group (g3 cluster check|clean)
            continue
        for word in cmd[2:]:
            if word.startswith("--"):
                assert word.split("=")[0] in known, f"README: `{' '.join(cmd)}`: g3 {name} has no option {word}"


def test_the_plans_the_readme_trains_are_ones_it_plans():
    from stages.plan import PlanConfig, default_out

    written = set()
    for cmd in readme_commands():
        if cmd[1] == "plan":
            if "-o" in cmd:
                written.add(cmd[cmd.index("-o") + 1])
                continue
            strategy = cmd[cmd.index("--strategy") + 1] if "--strategy" in cmd else "g3"
            model = cmd[cmd.index("--model") + 1] if "--model" in cmd else "sage"
            written.add(str(default_out(Path(cmd[2]), PlanConfig(model=model, strategy=strategy))))
    for cmd in readme_commands():
        if cmd[1] in ("train", "bundle") and cmd[2].startswith("demo/"):
            assert cmd[2] in written, f"README: `{' '.join(cmd)}` trains a plan no README command writes"


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_every_readme_command_runs_in_order(tmp_path):
    """The README, run top to bottom by a user: each command exits 0 (the built-in graph at `tiny` scale)."""
    if not (SHARED / "data" / "real").is_dir() or not (SHARED / "data" / "webgraph").is_dir():
        pytest.skip(f"{SHARED}/data not found: the README ingests its real graphs")
    log = []
    steps = walk(tmp_path / "work", SHARED.resolve(), "tiny", echo=log.append)
    failed = [s for s in steps if s.status == "failed"]
    assert not failed, f"README command failed: {failed[0].command}\n{failed[0].output[-3000:]}"
    assert [s.command for s in steps] == readme_lines()  # every line reached, in order
    not_run = [s for s in steps if s.status != "ok"]
    # only the make lines, the README's one repeated ingest, and emulation where namespaces cannot be made
    assert all(s.command.startswith("make ") or "same command" in s.status or "--emulate-link" in s.command
               for s in not_run), not_run
    assert sum(s.status == "ok" for s in steps) >= 40
    # what the README says the commands leave behind
    work = tmp_path / "work"
    assert (work / "host0-run" / "model.pt").is_file() and (work / "demo" / "sage.pt.json").is_file()
    assert (work / "demo" / "long.run" / "checkpoints" / "epoch-00019.pt").is_file()
    assert (work / "demo" / "scaling" / "index.html").is_file()

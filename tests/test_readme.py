"""Every command the README shows runs, in the README's order (in lanes side by side), from an empty folder
(tests/readme_walkthrough.py on `synthetic:tiny`); every `g3 …` command names a real command and real options of it; every plan it trains is one an
earlier README command writes (issue 40 §5: the README once trained `…plan-sage` after planning `…plan-p3-sage`)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from dataclasses import asdict
from pathlib import Path

import pytest
from filelock import FileLock
from readme_walkthrough import (
    MAIN,
    PREPARE,
    SECTION_LANES,
    STARTS_FROM_PREPARE,
    Step,
    g3_commands,
    lane_of,
    lanes,
    readme_sections,
    walk,
)

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
                assert word.split("=")[0] in known, (
                    f"README: `{' '.join(cmd)}`: g3 {name} has no option {word}"
                )


def test_the_plans_the_readme_trains_are_ones_it_plans():
    from stages.plan.run import PlanConfig, default_out

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


def needs_shared_data():
    if not (SHARED / "data" / "real").is_dir() or not (SHARED / "data" / "webgraph").is_dir():
        pytest.skip(f"{SHARED}/data not found: the README ingests its real graphs")


@pytest.fixture(scope="session")
def prepared(tmp_path_factory, worker_id):
    """PREPARE's commands run once for the session, whichever pytest process asks first (the others wait on a
    lock): ``(folder, steps)``, the folder the other lanes start from in copies."""
    needs_shared_data()
    shared = (
        tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    )
    folder, record = shared / "readme-prepared", shared / "readme-prepared.json"
    with FileLock(str(shared / "readme-prepared.lock")):
        if not record.is_file():
            steps = walk(folder, SHARED.resolve(), "tiny", echo=lambda _: None, lane=PREPARE, in_process=True)
            record.write_text(json.dumps([asdict(step) for step in steps]))
    return folder, [Step(**step) for step in json.loads(record.read_text())]


def test_every_readme_line_is_in_a_lane_and_enough_of_them_run():
    sections = readme_sections()
    assert len(sections) >= 45 and {lane_of(title) for title, _ in sections} == set(lanes())
    named = {title for title, _ in sections}
    assert set(SECTION_LANES) <= named, (
        f"README has no section {set(SECTION_LANES) - named}: rename it here too"
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("lane", lanes())
def test_every_readme_command_runs_in_order(request, tmp_path, lane):
    """The README, run top to bottom by a user, one lane at a time (lanes side by side on the pytest processes):
    each command exits 0 (the built-in graph at `tiny` scale)."""
    needs_shared_data()
    work = tmp_path / "work"
    if lane == PREPARE:
        work, steps = request.getfixturevalue("prepared")
    else:
        if lane in STARTS_FROM_PREPARE:  # a lane that does not start from it does not wait for it
            folder, prepare_steps = request.getfixturevalue("prepared")
            assert not [s for s in prepare_steps if s.status == "failed"], "the prepare lane failed"
            shutil.copytree(folder, work, symlinks=True)
        steps = walk(work, SHARED.resolve(), "tiny", echo=lambda _: None, lane=lane, in_process=True)
    failed = [s for s in steps if s.status == "failed"]
    assert not failed, f"README command failed: {failed[0].command}\n{failed[0].output[-3000:]}"
    # every line of the lane reached, in order
    assert [s.command for s in steps] == [line for title, line in readme_sections() if lane_of(title) == lane]
    not_run = [s for s in steps if s.status != "ok"]
    # only the make lines, a command the lane ran already, and emulation where namespaces cannot be made
    assert all(
        s.command.startswith("make ") or "same command" in s.status or "--emulate-link" in s.command
        for s in not_run
    ), not_run
    # what the README says the commands leave behind
    for path in LEFT_BEHIND.get(lane, ()):
        assert (work / path).is_file(), path
    for step in steps:
        check_quoted_output(step)


def quoted_outputs() -> dict[str, str]:
    """The README's quoted outputs (```text blocks), by the command of the code block just before each."""
    quoted, command, block, inside = {}, None, [], None
    for line in (REPO / "README.md").read_text().splitlines():
        if inside is not None:
            if line.startswith("```"):
                if inside == "text" and command:
                    quoted[command] = "\n".join(block)
                inside, block = None, []
            elif inside == "":
                command = line.strip() or command
            else:
                block.append(line)
        elif line.startswith("```"):
            inside = line[3:].strip()
    return quoted


def check_quoted_output(step: Step) -> None:
    """A command whose output the README quotes prints what the quote shows: its first line with this graph's
    name and sizes, and every strategy of the quoted rows (the run is `tiny`, the quote `small`: figures differ)."""
    quote = quoted_outputs().get(step.command)
    if quote is None:
        return
    first = quote.splitlines()[0]
    pattern = re.escape(first).replace(re.escape("synthetic-small"), r"\S+")
    pattern = re.sub(r"[0-9][0-9,]*(?=\\ (nodes|arcs))", "[0-9,]+", pattern)
    assert re.search(pattern, step.output), (first, step.output[:2000])
    quoted = set(re.findall(r"^│\s+\d+ │ (\S+)", quote, re.MULTILINE))
    assert quoted and all(name in step.output for name in quoted), (quoted, step.output[-3000:])


LEFT_BEHIND = {
    MAIN: [
        "host0-run/model.pt",
        "demo/sage.pt.json",
        "demo/long.run/checkpoints/epoch-00019.pt",
        "demo/scaling/index.html",
    ],
    "emulated": ["demo/100mbit.run/model.pt", "demo/1gbit.run/model.pt"],
    "advise": ["demo/small.advise/advise.json", "demo/small.lab/advise.json"],
}

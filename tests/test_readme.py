"""Every `g3 …` command the README shows names a real command and real options of it, and every plan it trains
or evaluates is one an earlier README command writes (issue 40 §5: the README once trained `…plan-sage` after
planning `…plan-p3-sage`)."""

from __future__ import annotations

import shlex
from pathlib import Path

from g3cli.main import cli

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[list[str]]:
    """The `g3 …` command lines of the README's code blocks (continuations joined, comments dropped)."""
    blocks, current, fenced, plain = [], [], False, True
    for line in (REPO / "README.md").read_text().splitlines():
        if line.startswith("```"):
            if fenced:  # the block ends
                blocks.append("\n".join(current) if plain else "")
                current, fenced = [], False
            else:  # a block starts: plain ones hold commands (not ```python)
                fenced, plain = True, line.strip() == "```"
            continue
        if fenced:
            current.append(line)
    cmds = []
    for block in filter(None, blocks):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            for part in line.split(" && "):
                part = part.split("  #")[0].split(" # ")[0].strip()
                if part.startswith("g3 ") and "→" not in part:  # not the overview diagram
                    cmds.append(shlex.split(part))
    return cmds


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

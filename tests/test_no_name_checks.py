"""No code outside a strategy's own folder (stages/strategies/<name>/) compares or dispatches on a strategy name, a
partition-method name or the name of a simulated system: every stage and kit asks the registry
(stages/strategies/) for a spec and calls it. Docs and tests are free to name them."""

from __future__ import annotations

import re
from pathlib import Path

from stages.strategies.g3.schedules import baselines
from stages.strategies.registry import STRATEGIES, partition_methods

ROOT = Path(__file__).resolve().parent.parent
# strategies, partition methods, the systems `g3 simulate` names and the simulators they once had
SYSTEMS = {*baselines(), "bins", "minibatch", "tensor_parallel"}
NAMES = sorted({*STRATEGIES, *partition_methods(), *SYSTEMS, "p3", "hopgnn"}, key=len, reverse=True)
_NAME = "|".join(re.escape(n) for n in NAMES)
_Q = "['\"]"
CHECKS = {
    "comparison": re.compile(rf"[!=]=\s*{_Q}({_NAME}){_Q}|{_Q}({_NAME}){_Q}\s*[!=]="),
    "membership": re.compile(rf"\bin\s*[(\[{{]\s*{_Q}({_NAME}){_Q}\s*,"),
    "default name": re.compile(rf"\.get\(\s*{_Q}\w+{_Q}\s*,\s*{_Q}({_NAME}){_Q}\s*\)"),
    "prefix test": re.compile(rf"\.(startswith|removeprefix)\(\s*{_Q}({_NAME})-?{_Q}"),
}


def allowed_files() -> set[Path]:
    """Every file of a strategy's own folder."""
    return {path for path in ROOT.glob("stages/strategies/*/**/*.py")}


def name_checks(files, allowed: set[Path]) -> list[str]:
    found = []
    for path in files:
        if path in allowed:
            continue
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            for what, pattern in CHECKS.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{number}: {what}: {line.strip()}")
    return found


def test_no_strategy_or_method_name_is_compared_outside_its_own_modules():
    files = sorted([*ROOT.glob("stages/**/*.py"), *ROOT.glob("g3cli/**/*.py")])
    assert len(files) > 50
    found = name_checks(files, allowed_files())
    assert not found, "name checks outside a strategy's or method's own module:\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_name_check(tmp_path):
    """The patterns catch what they are meant to (a check that finds nothing proves nothing)."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        'if name == "distdgl":\n    pass\n'
        'if method in ("chunk", "feature"):\n    pass\n'
        'who = meta.get("name", "g3")\n'
        'if system.startswith("sancus-"):\n    pass\n'
        'if "neutrontp" != kind:\n    pass\n'
        'ok = name == "halo" or layout == "rows"\n'
    )
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        found = name_checks([bad], set())
    finally:
        ROOT = saved
    assert [f.split(":")[1] for f in found] == ["1", "3", "5", "6", "8", "10"]  # 10: a simulated system

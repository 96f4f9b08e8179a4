"""The architecture's rules are checked by a tool (`make lint` runs lint-imports on .importlinter): the CLI and the
API on top, the stages on the runtime, everything on common; a stage's modules reached by other packages only
through the stage's package (its entry and public names); no import circles inside a package. Here: the rules
hold on the code, and each one fails on a copy of the code with one import that breaks it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).with_name("lint-imports")


def lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(LINT), "--no-cache", "--config", str(root / ".importlinter")],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(root), "PATH": ""},
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    """The packages' sources and the rules, copied (no caches, no tests)."""
    root = tmp_path_factory.mktemp("arch")
    for package in ("g3", "g3cli", "stages"):
        shutil.copytree(REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(REPO / ".importlinter", root / ".importlinter")
    return root


def test_the_rules_hold_on_the_code():
    r = lint(REPO)
    assert r.returncode == 0 and "0 broken" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize(
    "module, line, broken",
    [
        (
            "stages/kits/runtime/_probe.py",
            "from stages.train import run_train",
            "stages.kits is not allowed to import stages.train",
        ),
        (
            "stages/kits/runtime/_probe.py",
            "from stages.strategies.g3.runtime import G3Strategy",
            "stages.kits is not allowed to import stages.strategies",
        ),
        (
            "stages/strategies/g3/_probe.py",
            "from stages.plan import run_plan",
            "stages.strategies is not allowed to import stages.plan",
        ),
        (
            "stages/common/_probe.py",
            "import stages.kits.plan",
            "stages.common is not allowed to import stages.kits",
        ),
        ("stages/plan/_probe.py", "import g3cli.main", "stages.plan is not allowed to import g3cli"),
        (
            "stages/simulate/_probe.py",
            "from stages.partition.report import print_partition_summary",
            "Illegal imports of protected package stages.partition.report",
        ),
        (
            "g3cli/_probe.py",
            "from stages.train.loop import train_rank",
            "Illegal imports of protected package stages.train.loop",
        ),
        (
            "stages/kits/partition/coarsen.py",
            "from stages.kits.partition import metis",
            "No cycles are allowed in stages.kits.partition",
        ),
    ],
)
def test_each_rule_fails_on_an_import_that_breaks_it(copy, module, line, broken):
    path = copy / module
    before = path.read_text() if path.exists() else None
    path.write_text((before or "") + f"\n{line}\n")
    try:
        r = lint(copy)
    finally:
        path.unlink() if before is None else path.write_text(before)
    assert r.returncode == 1 and broken in r.stdout, r.stdout + r.stderr


ARRAY_LIBRARIES = {"numpy", "torch", "zarr", "scipy", "h5py", "pyarrow", "numba", "matplotlib", "pymetis"}


def cli_imports(source: str) -> set[str]:
    """The top-level packages a CLI module imports, anywhere in it."""
    import ast

    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_cli_does_no_work_of_its_own():
    """A command parses its options, calls its stage's entry (or the API) and prints: no CLI module touches arrays,
    tensors or files of data itself — that work is a stage's, where the API reaches it too."""
    for path in sorted((REPO / "g3cli").glob("*.py")):
        used = cli_imports(path.read_text()) & ARRAY_LIBRARIES
        assert not used, f"{path.name} imports {sorted(used)}: move that work into its stage"
    assert cli_imports("import numpy as np\ndef f():\n    from torch import nn\n") == {"numpy", "torch"}


def loads_by_name(source: str) -> list[int]:
    """Lines that import a module whose name is a string (``importlib.import_module``, ``__import__``)."""
    import ast

    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
        in ("import_module", "__import__")
    ]


def test_no_product_code_imports_a_module_named_by_a_string():
    """Every arrow between modules is an import statement that import-linter and a reader can follow: the
    registry imports the strategies, the CLI its commands; a string never names the code to load."""
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for package in ("g3", "g3cli", "stages")
        for path in sorted((REPO / package).rglob("*.py"))
        for line in loads_by_name(path.read_text())
    ]
    assert not found, found
    assert loads_by_name(
        "import importlib\nm = importlib.import_module(f'g3cli.{x}')\nn = __import__('os')\n"
    ) == [2, 3]

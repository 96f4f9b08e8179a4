"""Terminal output: no table title holds a path (rich wraps a title to its table's width, which folded a long
path mid-word, `…plan-sag⏎e.run`, at any terminal width); each path is printed whole on a line of its own."""

from __future__ import annotations

import pytest
from rich.console import Console
from rich.table import Table
from test_report import make_run

import g3cli.output


@pytest.mark.parametrize("width", [40, 200])
def test_no_table_title_breaks_mid_word(tmp_path, cli_runner, monkeypatch, width):
    from g3cli.main import cli

    tables: list[Table] = []
    out: list[str] = []

    class Recording(Console):
        def print(self, *objects, **kwargs):
            tables.extend(o for o in objects if isinstance(o, Table))
            with self.capture() as cap:
                super().print(*objects, **kwargs)
            out.append(cap.get())

    monkeypatch.setattr(g3cli.output, "stdout_console", lambda: Recording(width=width, color_system=None))
    folder = tmp_path / "a-rather-long-folder-name-for-the-demo"
    store, part = folder / "small-store", folder / "small.part-random-2"
    plan, run = folder / "small.part-random-2.plan-sage", folder / "small.part-random-2.plan-sage.run"
    for args in (
        ["ingest", "synthetic:tiny", str(store)],
        ["info", str(store)],
        ["partition", str(store), "-w", "2", "--method", "random", "-o", str(part)],
        ["plan", str(part), "--strategy", "g3", "-o", str(plan)],
        ["info", str(plan)],
    ):
        r = cli_runner.invoke(cli, args)
        assert r.exit_code == 0, r.output
    make_run(folder, name=run.name, trace=False, plan=False, partition=False)
    g3cli.output.print_run_summary({"path": str(run), "status": "completed"})
    r = cli_runner.invoke(cli, ["report", str(run), "-o", str(folder / "report")])
    assert r.exit_code == 0, r.output

    lines = "".join(out).splitlines()
    titled = [t for t in tables if isinstance(t.title, str) and t.title]
    assert {"ingested", "g3 plan", "run completed", "g3 report"} <= {t.title for t in titled}
    for t in titled:
        for word in t.title.split():
            assert any(word in line for line in lines), (t.title, word, width)
    for what, path in (("store", store), ("plan", plan), ("run", run)):  # below the tables, whole
        assert f"{what}: {path}" in lines, (what, width)

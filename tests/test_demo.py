"""`make demo` in a reduced form (tiny preset, 2 workers, 3 epochs), so the demo cannot silently break: the whole
pipeline, then g3 eval and g3 report on the run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_demo_script_runs_the_whole_pipeline(tmp_path):
    g3 = Path(sys.executable).parent / "g3"
    env = dict(
        os.environ,
        DEMO_DIR=str(tmp_path),
        DEMO_PRESET="tiny",
        DEMO_WORKERS="2",
        DEMO_EPOCHS="3",
        G3=str(g3),
        PYTHON=sys.executable,
    )
    proc = subprocess.run(
        ["bash", str(REPO / "examples" / "demo.sh")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo done" in proc.stdout
    run = tmp_path / "tiny.part-g3-2.plan-sage.run"
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3
    assert (run / "eval.json").is_file()
    report = run / "report"
    index = (report / "index.html").read_text()
    for png in ("time_to_accuracy.png", "throughput.png", "workers.png", "partition.png"):
        assert (report / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f'src="{png}"' in index
    assert "final test accuracy:" in proc.stdout and "throughput:" in proc.stdout and "plots:" in proc.stdout

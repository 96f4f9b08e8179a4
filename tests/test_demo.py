"""`make demo` in a reduced form (tiny preset, 2 workers, 3 epochs), so the demo cannot silently break."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_demo_script_runs_the_whole_pipeline(tmp_path):
    g3 = Path(sys.executable).parent / "g3"
    env = dict(os.environ, DEMO_DIR=str(tmp_path), DEMO_PRESET="tiny", DEMO_WORKERS="2", DEMO_EPOCHS="3", G3=str(g3))
    proc = subprocess.run(["bash", str(REPO / "examples" / "demo.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "demo done" in proc.stdout
    run = tmp_path / "tiny.part-g3-2.plan-sage.run"
    assert json.loads((run / "run.json").read_text())["status"] == "completed"
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 3

"""`make gpu-check` (examples/gpu_check.py): without CUDA it says so in one line and runs nothing; with the CPU
standing in for the device (`--device cpu`) the whole procedure runs and its report holds what BENCHMARKS'
"GPU check" documents; the float32 verdict tells a device that adds error from float32's own rounding."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "gpu_check.py"


def load_script():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(spec.name, module)  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: gpu-check would run")
def test_without_cuda_one_line_exit_0_and_nothing_written(tmp_path):
    out = tmp_path / "gc"
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip().startswith("gpu-check: no CUDA device on this machine")
    assert len(p.stdout.strip().splitlines()) == 1 and p.stderr == ""
    assert not out.exists()


def test_make_target_runs_the_script(tmp_path):
    p = subprocess.run(
        ["make", "-s", "-n", "gpu-check", "GPU_PYTHON=python3", f"GPU_CHECK_DIR={tmp_path}"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["python3", "examples/gpu_check.py", "--out", str(tmp_path)]


@pytest.mark.parametrize(
    "row, verdict",
    [
        ({"float32_max_diff": 5e-5}, "absolute"),
        # float32 rounding moved both runs ~4e-2 from float64: the device is no worse than the CPU
        (
            {"float32_max_diff": 5.7e-2, "float32_cpu_vs_float64": 4.3e-2, "float32_dut_vs_float64": 4.5e-2},
            "as the CPU",
        ),
        # the device is far off where the CPU is not: a device error
        (
            {"float32_max_diff": 5.7e-2, "float32_cpu_vs_float64": 1e-6, "float32_dut_vs_float64": 5.7e-2},
            None,
        ),
        ({"float32_max_diff": 5.7e-2}, None),  # no float64 reference: only the absolute tolerance
        ({"float32_max_diff": None}, None),
    ],
)
def test_float32_verdict(row, verdict):
    assert load_script().float32_verdict(row) == verdict


@pytest.mark.parametrize("in_process", [False, True])
def test_each_command_has_its_log_and_a_failure_is_kept(tmp_path, in_process):
    """The check's two ways to run a g3 command (an interpreter each, as on a GPU machine by default, or this
    process): the same result, the same log, a failure returned with its last line rather than raised."""
    runner = load_script().Runner(tmp_path, sys.executable, 60.0, in_process)
    ok, last = runner.cli("version", "--version")
    assert ok and last.startswith("g3, version"), last
    log = (tmp_path / "logs" / "version.log").read_text()
    assert log.startswith(f"$ {sys.executable} -m g3cli --version\n# ") and "g3, version" in log
    ok, last = runner.cli("bad", "info", str(tmp_path / "nowhere"))
    assert not ok and last.startswith("g3: error:"), last


@pytest.mark.slow
def test_the_procedure_with_the_cpu_standing_in(tmp_path):
    out = tmp_path / "gc"
    p = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--out",
            str(out),
            "--graph",
            "synthetic:tiny",
            "--strategies",
            "g3 (bins),distdgl",
            "--epochs",
            "2",
            "--timeout",
            "240",
            "--no-float64-reference",
            "--in-process",  # one interpreter for its g3 commands: minutes less here (the runner of each: below)
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["schema"] == "g3.gpu-check/1" and report["passed"], p.stdout
    rows = {row["case"]: row for row in report["cases"]}
    assert set(rows) == {"g3 (bins)", "distdgl"}
    for row in rows.values():  # the host path and the device path on the same CPU: the same model
        assert row["float64_max_diff"] <= 1e-9 and row["float32_max_diff"] <= 1e-4
        assert row["float32_passed"] == "absolute" and row["cpu_epoch_s"] > 0 and row["dut_epoch_s"] > 0
        assert row["ops_per_step"] > 0 and row["sync_ops_per_step"] >= 0  # --count-ops on the device's runs
    # distdgl's partition fits: the stand-in ran it resident (the device path); the forced bins stream
    assert rows["distdgl"]["residency"] == ["device"] and rows["g3 (bins)"]["residency"] == ["host"]
    # the forced-bins case really has several bins in its largest layer, under a budget the plan records
    assert rows["g3 (bins)"]["plan_bound_source"] == "device_memory"
    plan = out / "work" / "timed.plan-g3-bins"
    layers = json.loads((plan / "worker-00000" / "worker.json").read_text())["layers"]
    assert max(layer["num_bins"] for layer in layers) >= 3
    assert "| g3 (bins) |" in (out / "gpu-check.md").read_text()
    # per case: exact on both, float32 on both
    assert len((out / "runs.jsonl").read_text().splitlines()) == 2 * 4

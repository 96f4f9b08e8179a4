"""`make gpu-check` (examples/gpu_check.py): without CUDA it says so in one line and runs nothing; its default fits
300 s by its own estimate, device runs first, and what does not fit a budget is trimmed; the bundle it is carried
with is unpacked and used, and what is still missing named in one line; with the CPU standing in for the device
(`--device cpu`) the whole procedure runs, its report holds what BENCHMARKS' "GPU check" documents with the
operation counts of each device run, and a run cut short keeps what it measured; the float32 verdict tells a
device that adds error from float32's own rounding."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from helpers import short_scratch

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "examples" / "gpu_check.py"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"
IS_LINUX_X86 = sys.platform.startswith("linux") and os.uname().machine == "x86_64"


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


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="this machine has CUDA: the venv's Python would be chosen"
)
def test_make_target_installs_nothing_and_falls_back_to_python3(tmp_path):
    """No `make setup` (the GPU machine reaches no package index): the default GPU_PYTHON is a Python whose torch
    sees CUDA, else python3, which then says there is no CUDA."""
    p = subprocess.run(
        ["make", "-s", "-n", "gpu-check", f"GPU_CHECK_DIR={tmp_path}", "GPU_CHECK_ARGS=--full"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["python3", "examples/gpu_check.py", "--out", str(tmp_path), "--full"]
    p = subprocess.run(
        ["make", "-s", "-n", "gpu-bundle"], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert (
        p.stdout.strip().splitlines()[-1].endswith("examples/gpu_check.py --make-bundle --bundle-python 3.12")
    )


def dry_run(capsys, *args: str) -> tuple[int, list[str], list[tuple[float, str, str]]]:
    """The check's plan without running it: exit code, its lines, and its steps (estimate, phase, name)."""
    code = load_script().main(["--dry-run", "--bundle", "/nonexistent", "--parallel", "5", *args])
    lines = capsys.readouterr().out.strip().splitlines()
    steps = [
        (float(m[1]), m[2], m[3])
        for m in (
            re.match(r"\s+(\d+) s  (preparation|device runs|PyG|CPU references)\s+(.*)$", ln) for ln in lines
        )
        if m
    ]
    return code, lines, steps


def test_the_default_fits_300_s_by_its_estimate_device_runs_first(capsys):
    code, lines, steps = dry_run(capsys)
    assert code == 0, lines
    total = float(re.search(r"estimated (\d+) s", lines[0])[1])
    assert "of --budget 300 s" in lines[0] and total <= 300, lines[0]
    assert not any("trimmed" in ln for ln in lines), lines  # nothing left out by default
    assert total == pytest.approx(sum(e for e, _, _ in steps), abs=len(steps))
    names = [n for _, _, n in steps]
    for graph in ("synthetic:small", "synthetic:medium"):
        for case in ("g3", "bns-gcn", "distdgl"):
            assert f"{case} on {graph}, cuda" in names
        assert f"PyG full-graph on {graph}" in names
    assert "PyG mini-batch on synthetic:small" in names and "PyG mini-batch on synthetic:medium" not in names
    phases = [ph for _, ph, _ in steps]
    # every timed device run and PyG before the CPU references; only the three cases are prepared
    assert phases.index("CPU references") > max(
        i for i, ph in enumerate(phases) if ph in ("device runs", "PyG")
    )
    assert sum(ph == "device runs" for ph in phases) == 6 and phases[-1] == "CPU references"
    code, full_lines, full_steps = dry_run(capsys, "--full")
    assert code == 0 and "of --budget 1500 s" in full_lines[0]
    assert sum(ph == "device runs" for _, ph, _ in full_steps) > 6


def test_what_does_not_fit_the_budget_is_trimmed_or_refused(capsys):
    code, lines, steps = dry_run(capsys, "--budget", "120")
    assert code == 0
    trimmed = [n for _, _, n in steps if n.endswith("(trimmed)")]
    # medium's preparation does not fit, so neither does anything on medium; the small graph's runs stay
    assert (
        "prepare synthetic:medium  (trimmed)" in trimmed
        and "g3 on synthetic:medium, cuda  (trimmed)" in trimmed
    )
    assert "g3 on synthetic:small, cuda" in [n for _, _, n in steps]
    assert lines[1].startswith("gpu-check: trimmed to fit --budget: prepare synthetic:medium")
    assert float(re.search(r"estimated (\d+) s", lines[0])[1]) <= 120
    code, lines, _ = dry_run(capsys, "--budget", "20")
    assert code == 2 and lines[-1].startswith("gpu-check: refused: no device run fits --budget 20 s"), lines


@pytest.mark.parametrize(
    "name, fits",
    [
        ("zarr-3.1.6-py3-none-any.whl", True),
        ("pygments-2.21.0-py3-none-any.whl", True),
        (f"numcodecs-0.16.6-{TAG}-{TAG}-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", IS_LINUX_X86),
        ("psutil-7.2.2-cp36-abi3-manylinux2010_x86_64.manylinux_2_12_x86_64.whl", IS_LINUX_X86),
        ("numcodecs-0.16.6-cp39-cp39-manylinux2014_x86_64.whl", False),  # another CPython
        (f"numcodecs-0.16.6-{TAG}-{TAG}-macosx_11_0_arm64.whl", False),
        ("broken.whl", False),
    ],
)
def test_a_bundled_wheel_is_used_where_it_fits(name, fits):
    assert load_script().wheel_fits(name) == fits


def test_the_bundle_is_unpacked_once_and_put_first(tmp_path, monkeypatch):
    wheels = tmp_path / "bundle" / "wheels"
    wheels.mkdir(parents=True)
    for name, module in (
        ("g3probe_a-1.0-py3-none-any.whl", "g3probe_a"),
        ("g3probe_b-1.0-cp39-cp39-linux_x86_64.whl", "g3probe_b"),
    ):
        with zipfile.ZipFile(wheels / name, "w") as z:
            z.writestr(f"{module}/__init__.py", "WHERE = 'bundle'\n")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    gc = load_script()
    used = gc.use_bundle(tmp_path / "bundle", tmp_path / "cache")
    assert used == ["g3probe_a-1.0-py3-none-any.whl"]  # the wheel for another CPython is left packed
    site = tmp_path / "cache" / f"site-{sys.implementation.cache_tag}"
    assert sys.path[0] == str(site) and os.environ["PYTHONPATH"] == f"{site}{os.pathsep}/elsewhere"
    assert (site / "g3probe_a" / "__init__.py").is_file() and not (site / "g3probe_b").exists()
    stamp = (site / ".wheels").stat().st_mtime_ns
    gc.use_bundle(tmp_path / "bundle", tmp_path / "cache")  # unpacked once
    assert (site / ".wheels").stat().st_mtime_ns == stamp


def test_a_missing_module_is_named_in_one_line_and_nothing_runs(tmp_path, capsys, monkeypatch):
    gc = load_script()
    monkeypatch.setitem(gc.NEEDED, "g3_no_such_module", "pure")
    monkeypatch.setitem(gc.NEEDED, "g3_no_such_compiled", "compiled")
    out = tmp_path / "gc"
    code = gc.main(["--device", "cpu", "--out", str(out), "--bundle", str(tmp_path / "none")])
    lines = capsys.readouterr().out.strip().splitlines()
    assert code == 1 and len(lines) == 1 and not out.exists()
    assert (
        "cannot import g3_no_such_module (pure; bundled), g3_no_such_compiled (compiled; not bundled"
        in lines[0]
    )


def test_a_case_is_not_checked_until_its_runs_are_there(tmp_path):
    """``passed``: None while a run it needs has not run (or was left out for time), False once one fails."""
    gc = load_script()
    run = tmp_path / "run"
    run.mkdir()
    torch.save({"w": torch.ones(2, dtype=torch.float64)}, run / "model.pt")
    ok = {"status": "ok", "run": str(run), "median_epoch_s": 0.1, "peak_memory_bytes": 1, "test_acc": 0.5}
    ok_dut = {**ok, "ops_per_step": 9, "sync_ops_per_step": 0, "h2d_copies_per_step": 0}
    results = {("exact", "g3", "float64", "cpu"): ok, ("exact", "g3", "float64", "cuda"): ok}
    results[("timed", "g3", "float32", "cuda")] = ok_dut
    row = gc.compare("g3", results, "cuda", {}, reference=False)
    assert row["passed"] is None and row["float64_max_diff"] == 0.0 and row["h2d_copies_per_step"] == 0
    results[("timed", "g3", "float32", "cpu")] = {"status": "skipped", "note": "not run: past --budget"}
    row = gc.compare("g3", results, "cuda", {}, reference=False)
    assert row["passed"] is None and row["notes"] == ["float32 cpu: not run: past --budget"]
    results[("timed", "g3", "float32", "cpu")] = ok
    assert gc.compare("g3", results, "cuda", {}, reference=False)["passed"] is True
    results[("exact", "g3", "float64", "cpu")] = {"status": "failed", "note": "boom"}
    assert gc.compare("g3", results, "cuda", {}, reference=False)["passed"] is False


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


def stand_in(out: Path, *args: str) -> list[str]:
    """The check's command with the CPU standing in for the GPU on the tiny graph, its g3 commands in one
    interpreter (minutes less here than one each)."""
    return [
        sys.executable,
        str(SCRIPT),
        "--device",
        "cpu",
        "--out",
        str(out),
        "--graph",
        "synthetic:tiny",
        "--epochs",
        "2",
        "--timeout",
        "240",
        "--bundle",
        str(out.parent / "no-bundle"),
        "--in-process",
        *args,
    ]


COUNTS = ("ops_per_step", "sync_ops_per_step", "h2d_copies_per_step", "sampler_ops_per_step")


@pytest.mark.slow
def test_the_procedure_with_the_cpu_standing_in(tmp_path):
    out = tmp_path / "gc"
    cmd = stand_in(out, "--strategies", "g3,g3 (bins),distdgl", "--budget", "900")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith("gpu-check: 8 steps, estimated "), p.stdout
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["schema"] == "g3.gpu-check/2" and report["state"] == "done" and report["passed"], p.stdout
    steps = report["estimate"]["steps"]
    assert [s["status"] for s in steps] == ["done"] * 8 and steps[-1]["name"] == "CPU references"
    rows = {row["case"]: row for row in report["cases"]}
    assert set(rows) == {"g3", "g3 (bins)", "distdgl"}
    for row in rows.values():  # the host path and the device path on the same CPU: the same model
        assert row["float64_max_diff"] <= 1e-9 and row["float32_max_diff"] <= 1e-4
        assert row["float32_passed"] == "absolute" and row["cpu_epoch_s"] > 0 and row["dut_epoch_s"] > 0
        # the device run's counted step (--count-ops): every count there, a whole number
        assert all(type(row[k]) is int for k in COUNTS), row
        assert row["ops_per_step"] > 0
    # g3, resident, full-graph: nothing made from host data in its step, nothing sampled, and no host wait but
    # Adam's step counters (on the CPU they count as waits: 6 here, none on a GPU)
    g3 = rows["g3"]
    assert g3["h2d_copies_per_step"] == 0 and g3["sampler_ops_per_step"] == 0 and g3["sync_ops_per_step"] <= 6
    # distdgl's sampling (on its sampler thread) is counted in its step, and is part of it
    assert 0 < rows["distdgl"]["sampler_ops_per_step"] < rows["distdgl"]["ops_per_step"]
    # only the mini-batch case is judged against a float64 CPU run
    assert "float32_cpu_vs_float64" in rows["distdgl"] and "float32_cpu_vs_float64" not in g3
    # distdgl's partition fits: the stand-in ran it resident (the device path); the forced bins stream
    assert rows["distdgl"]["residency"] == ["device"] and rows["g3 (bins)"]["residency"] == ["host"]
    # the forced-bins case really has several bins in its largest layer, under a budget the plan records
    assert rows["g3 (bins)"]["plan_bound_source"] == "device_memory"
    plan = out / "work" / "timed.plan-g3-bins"
    layers = json.loads((plan / "worker-00000" / "worker.json").read_text())["layers"]
    assert max(layer["num_bins"] for layer in layers) >= 3
    table = (out / "gpu-check.md").read_text()
    assert "| ops / syncs / h2d per step |" in table
    assert (
        f"| {g3['ops_per_step']} / {g3['sync_ops_per_step']} / 0 |"
        in table.split("| g3 |")[1].splitlines()[0]
    )
    # per case: on the device, exact on both, float32 on the CPU; distdgl's float64 CPU reference
    assert len((out / "runs.jsonl").read_text().splitlines()) == 3 * 4 + 1


@pytest.mark.slow
def test_what_does_not_fit_is_left_out_and_the_case_not_checked(tmp_path):
    out = tmp_path / "gc"
    cmd = stand_in(out, "--strategies", "g3", "--budget", "40", "--parallel", "1")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "gpu-check: trimmed to fit --budget: CPU references" in p.stdout, p.stdout
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["state"] == "done" and report["passed"] is None
    assert report["estimate"]["steps"][-1]["status"] == "trimmed"
    (row,) = report["cases"]
    assert row["passed"] is None and row["dut_epoch_s"] > 0 and "cpu_epoch_s" not in row
    assert "All passed: not checked" in (out / "gpu-check.md").read_text()
    statuses = [json.loads(line)["status"] for line in (out / "runs.jsonl").read_text().splitlines()]
    assert statuses == ["ok", "skipped", "skipped", "skipped"]


@pytest.mark.slow
def test_a_check_cut_short_keeps_what_it_measured(tmp_path):
    """Each finished step is written at once (gpu-check.json replaced whole), so a check stopped at a time limit
    (SIGTERM) leaves its finished runs, marked as cut short."""
    out = tmp_path / "gc"
    with open(tmp_path / "stdout", "w") as log:
        proc = subprocess.Popen(
            stand_in(out, "--strategies", "g3,distdgl"),
            cwd=REPO,
            stdout=log,
            stderr=log,
            # a process ended by SIGTERM leaves its fork server's socket folder
            env={**os.environ, "TMPDIR": str(short_scratch())},
        )
        try:
            deadline = time.monotonic() + 400
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(0.5)
                if (out / "gpu-check.json").is_file():
                    report = json.loads((out / "gpu-check.json").read_text())  # never half-written
                    if any(row.get("dut_epoch_s") for row in report["cases"]):
                        break
            assert proc.poll() is None, (tmp_path / "stdout").read_text()
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
        finally:
            proc.kill()
    # ended by the signal, or exit 130 where it reached a g3 command run in the check's own process
    assert proc.returncode in (-signal.SIGTERM, 130), (tmp_path / "stdout").read_text()
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["state"] == "cut short" and report["passed"] is None
    assert report["cases"][0]["case"] == "g3" and report["cases"][0]["dut_epoch_s"] > 0
    assert type(report["cases"][0]["h2d_copies_per_step"]) is int
    assert "(cut short)" in (out / "gpu-check.md").read_text().splitlines()[0]


def test_the_pyg_mini_batch_peer_is_called_as_its_runner_takes_it(tmp_path):
    """The check calls `g3 bench`'s PyG runner in its mini-batch mode: it takes the check's arguments and either
    times its epochs or says why NeighborLoader cannot sample (no pyg-lib or torch-sparse)."""
    gc = load_script()
    modes = gc.runner_modes(sys.executable)
    assert "mini-batch" in modes
    from stages.bench.export import export_graph

    runner = gc.Runner(tmp_path, sys.executable, 120.0, in_process=True)
    ok, last = runner.cli("ingest", "ingest", "synthetic:tiny", str(tmp_path / "tiny.g3"))
    assert ok, last
    npz = export_graph(tmp_path / "tiny.g3", tmp_path / "tiny.npz")
    res = gc.pyg_minibatch(sys.executable, npz, "cpu", modes, [5, 5], 200, 16, 2, tmp_path / "log", 120.0)
    if res["status"] == "ok":
        assert res["median_epoch_s"] > 0 and res["fanouts"] == [5, 5] and res["batch_size"] == 200
    else:
        assert res["status"] == "failed" and "pyg-lib or torch-sparse" in res["note"], res
    assert "--fanouts 5,5 --batch-size 200" in (tmp_path / "log").read_text()

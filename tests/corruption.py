"""Damaging g3's artifacts at random and checking that the commands reading them refuse the damage.

Used by tests/test_corruption.py (a few hypothesis cases in `make test`) and, as a script, for the larger
sweep whose counts are in docs/BENCHMARKS.md ("Validating what is read"):

    .venv/bin/python tests/corruption.py --cases 200 --seed 1

A case: copy a set of artifacts built once on ``synthetic:tiny`` (store, g3 partition K = 2, g3 plan, a 2-epoch
run), damage one file of one artifact — truncate it, delete it, flip a byte, edit a JSON field, or write an
id out of range into an integer array — and run the command that reads that artifact. It must end with exit 2
and one line on stderr naming a file or folder of the damaged artifact: never a traceback, a signal, another
exit code or exit 0; and no file outside the command's own output may change.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
G3 = [sys.executable, "-m", "g3cli.main"]
DAMAGES = ("truncate", "delete", "flip", "json_edit", "out_of_range")
KINDS = ("store", "partition", "plan", "run")


def _g3(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "G3_NO_PROGRESS": "1", "COLUMNS": "200"}
    return subprocess.run([*G3, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def build_artifacts(base: Path) -> Path:
    """store/, part/, plan/, run/ in ``base`` (once; every case copies them). Built in a sibling folder that is
    then renamed, so the absolute paths the artifacts record lead nowhere: a case's copies find each other by
    their relative references only, and a damaged copy cannot be bypassed by reaching the intact original."""
    base = Path(base)
    build = base.with_name(base.name + "-build")
    build.mkdir(parents=True, exist_ok=True)
    steps = [
        ("ingest", "synthetic:tiny", "store"),
        ("partition", "store", "-w", "2", "-o", "part"),
        ("plan", "part", "--strategy", "g3", "-o", "plan"),
        ("train", "plan", "-o", "run", "--epochs", "2", "--checkpoint-every", "1"),
    ]
    for step in steps:
        r = _g3(*step, cwd=build)
        if r.returncode != 0:
            raise RuntimeError(f"g3 {' '.join(step)} failed: {r.stderr[-2000:]}")
    build.rename(base)
    return base


FOLDERS = {"store": "store", "partition": "part", "plan": "plan", "run": "run"}


# the command that reads each artifact (run in the case's folder)
def command_for(kind: str, damaged: str) -> tuple[tuple[str, ...], str]:
    """The command that reads the damaged file (run in the case's folder) and its own output (relative)."""
    if kind == "store":
        return ("partition", "store", "-w", "2", "-o", "OUT"), "OUT"
    if kind in ("partition", "plan"):
        return ("train", "plan", "-o", "OUT", "--epochs", "1", "--timeout", "120"), "OUT"
    if damaged == "run/metrics.jsonl":
        return ("report", "run", "-o", "OUT"), "OUT"
    if damaged.startswith("run/checkpoints/"):
        return ("train", "plan", "-o", "run", "--resume", "--epochs", "3", "--timeout", "120"), "run"
    return ("eval", "run", "--force"), "run/eval.json"


def damage_targets(case: Path, kind: str) -> list[Path]:
    """The files of an artifact that hold its content (logs, plots and summaries excluded)."""
    folder = case / FOLDERS[kind]
    skip_suffix = {".log", ".png", ".html", ".md", ".lock"}
    out = []
    for f in sorted(folder.rglob("*")):
        if not f.is_file() or f.suffix in skip_suffix or "logs" in f.relative_to(folder).parts:
            continue
        rel = str(f.relative_to(folder))
        if kind == "run" and (
            rel in {"eval.json", "init.pt", "init.pt.sha256"}
            or rel.startswith("checkpoints/")
            and "epoch-00001" not in rel
        ):
            continue  # eval's own output; initial weights nothing reads back; checkpoints resume does not read
        out.append(f)
    return out


@dataclass
class Case:
    kind: str
    damage: str
    file: str
    detail: str
    returncode: int
    stderr: str
    ok: bool
    why: str


def _json_edit(f: Path, rng: random.Random) -> str:
    meta = json.loads(f.read_text())
    paths = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                paths.append((*path, k))
                walk(v, (*path, k))
        elif isinstance(node, list):
            for i, v in enumerate(node[:4]):
                paths.append((*path, i))
                walk(v, (*path, i))

    walk(meta, ())
    path = rng.choice(paths)
    parent = meta
    for p in path[:-1]:
        parent = parent[p]
    edit = rng.choice(["delete", "string", "negative", "huge", "null", "list"])
    if edit == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = {
            "string": "x",
            "negative": -7,
            "huge": 2**62,
            "null": None,
            "list": [1, 2],
            "delete": None,
        }[edit]
    f.write_text(json.dumps(meta, indent=2))
    return f"{edit} {'/'.join(map(str, path))}"


def _npy_out_of_range(f: Path, rng: random.Random) -> str | None:
    try:
        a = np.load(f)
    except Exception:
        return None
    if a.dtype.kind not in "iu" or a.size == 0:
        return None
    flat = a.reshape(-1)
    i = rng.randrange(flat.size)
    value = rng.choice([-1, int(flat.max()) + 1 + rng.randrange(1000), np.iinfo(a.dtype).max])
    flat[i] = value
    np.save(f, a)
    return f"[{i}] = {value}"


def apply_damage(f: Path, damage: str, rng: random.Random) -> str | None:
    """Damage ``f``; the detail, or None where this damage does not apply to this file."""
    size = f.stat().st_size
    if damage == "truncate":
        if size == 0:
            return None
        keep = rng.randrange(size)
        with open(f, "r+b") as fh:
            fh.truncate(keep)
        return f"to {keep} of {size} bytes"
    if damage == "delete":
        f.unlink()
        return "deleted"
    if damage == "flip":
        if size == 0:
            return None
        at = rng.randrange(size)
        data = bytearray(f.read_bytes())
        data[at] ^= 1 << rng.randrange(8)
        f.write_bytes(bytes(data))
        return f"bit at byte {at}"
    if damage == "json_edit":
        if f.suffix != ".json":
            return None
        try:
            return _json_edit(f, rng)
        except (json.JSONDecodeError, IndexError):
            return None
    if damage == "out_of_range":
        if f.suffix != ".npy":
            return None
        return _npy_out_of_range(f, rng)
    raise ValueError(damage)


def snapshot(folder: Path, skip: Path) -> dict[str, str]:
    """sha256 of every file below ``folder`` except under ``skip`` (the command's output) and logs."""
    out = {}
    for f in folder.rglob("*"):
        if (
            f.is_file()
            and skip not in f.parents
            and f != skip
            and "logs" not in f.parts
            and f.suffix != ".lock"
        ):
            out[str(f.relative_to(folder))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def judge(r: subprocess.CompletedProcess, case: Path, kind: str) -> tuple[bool, str]:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    if r.returncode == 0:
        return False, "exit 0: the damage was accepted"
    if r.returncode < 0:
        return False, f"killed by signal {-r.returncode}"
    if "Traceback" in r.stderr:
        return False, "a traceback"
    if r.returncode != 2:
        return False, f"exit {r.returncode}"
    if len(lines) != 1:
        return False, f"{len(lines)} lines on stderr"
    folder = FOLDERS[kind]
    if not any(tok in lines[0] for tok in (f"{folder}/", f"{folder}:", f"/{folder} ", f" {folder} ")):
        return False, "the message does not name the damaged artifact"
    return True, ""


def run_case(base: Path, kind: str, damage: str, rng: random.Random, work: Path) -> Case | None:
    case = Path(tempfile.mkdtemp(dir=work))
    try:
        for sub in FOLDERS.values():
            shutil.copytree(base / sub, case / sub, symlinks=True)
        # references between the copies are relative; the absolute ones point at base: drop base's view
        targets = damage_targets(case, kind)
        f = rng.choice(targets)
        if damage == "delete" and f.suffix == ".sha256":
            return None  # the content it vouches for is intact: nothing to refuse
        detail = apply_damage(f, damage, rng)
        if detail is None:
            return None
        args, out_rel = command_for(kind, str(f.relative_to(case)))
        out = case / out_rel
        before = snapshot(case, out)
        before.pop(str(f.relative_to(case)), None)
        r = _g3(*args, cwd=case)
        after = snapshot(case, out)
        after.pop(str(f.relative_to(case)), None)
        ok, why = judge(r, case, kind)
        if ok and before != after:
            changed = sorted(set(before.items()) ^ set(after.items()))
            ok, why = False, f"files outside the output changed: {[c[0] for c in changed][:3]}"
        return Case(
            kind, damage, str(f.relative_to(case)), detail, r.returncode, r.stderr.strip()[-400:], ok, why
        )
    finally:
        shutil.rmtree(case, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--work", default=None, help="scratch folder (default: a temporary one)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    work = Path(args.work or tempfile.mkdtemp(prefix="g3-corruption-"))
    base = build_artifacts(work / "base")
    kinds = args.kinds.split(",")
    results: list[Case] = []
    while len(results) < args.cases:
        kind, damage = rng.choice(kinds), rng.choice(DAMAGES)
        c = run_case(base, kind, damage, rng, work)
        if c is None:
            continue
        results.append(c)
        mark = "ok  " if c.ok else "FAIL"
        print(
            f"{mark} {c.kind:9s} {c.damage:12s} {c.file} ({c.detail}) -> exit {c.returncode}"
            + ("" if c.ok else f": {c.why}: {c.stderr[-300:]!r}"),
            flush=True,
        )
    failed = [c for c in results if not c.ok]
    print(
        f"\n{len(results)} cases, {len(results) - len(failed)} refused as they should be, {len(failed)} not"
    )
    for kind in kinds:
        n = sum(c.kind == kind for c in results)
        bad = sum(c.kind == kind and not c.ok for c in results)
        print(f"  {kind:9s} {n:4d} cases, {bad} not refused")
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run every command the README shows, in the README's order, in a fresh folder, as a user would type them.

    python tests/readme_walkthrough.py [--scale tiny|as-written] [--dir DIR] [--shared ../shared]

Each command runs through bash (so globs, ``~`` and ``&&`` mean what they mean in a shell) with the
environment's ``g3`` and ``torchrun`` first on PATH, and must exit 0; with ``in_process`` (the suite's way), a
plain ``g3 …`` line (no shell syntax) runs through the same CLI in this process instead, so that the suite pays
for importing torch, compiling kernels and starting the fork server once, not once per command. What a user would have of their own is
made first, in DIR: an OGB-layout folder for ``~/data/ogbn_products``, the real cnr-2000 crawl of ../shared for
``~/data/cnr-2000``, ``edges.txt`` with ``x.h5`` and ``y.npy``, ``graph.pt``. The torchrun command runs as
the README says, once per host: the bundle's node folders are copied to ``host0/`` and ``host1/`` (two local
"hosts", HOST0 and THIS_HOST = 127.0.0.1, the rendezvous on a free port), and ``host0-run`` is host 0's run
copied back. ``--scale tiny`` (what ``make test`` runs, tests/test_readme.py) replaces the built-in
``synthetic:small`` graph by ``synthetic:tiny`` and changes nothing else; ``--scale as-written`` runs the
README verbatim (tens of minutes on 2 cores). Run from here, the README runs top to bottom in one folder;
tests/test_readme.py runs it in lanes (:data:`SECTION_LANES`) side by side, each lane's commands in the
README's order in a copy of what the prepare lane made.

Not run: the ``make`` lines (``make test`` is the suite this runs in; ``make demo`` is tests/test_demo.py),
a command identical to one already run (the README repeats ``g3 ingest synthetic:small demo/small``), and,
where this machine cannot make network namespaces, the commands with ``--emulate-link`` (listed as skipped).
Python blocks are not commands: examples/python_api.py and tests/test_export.py run them.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCALES = {"tiny": {"synthetic:small": "synthetic:tiny"}, "as-written": {}}
NOT_RUN = {"make demo": "tests/test_demo.py runs the demo", "make test": "the suite this walkthrough runs in"}
COMMAND_SECONDS = 900  # each command's bound


def readme_blocks(readme: Path = REPO / "README.md") -> list[tuple[str, str]]:
    """The README's plain code blocks (not ```python or ```text), the ones that hold shell commands, each with the
    title of the section it stands in."""
    blocks, current, fenced, plain, title = [], [], False, True, ""
    for line in readme.read_text().splitlines():
        if line.startswith("```"):
            if fenced:
                if plain:
                    blocks.append((title, "\n".join(current)))
                current, fenced = [], False
            else:
                fenced, plain = True, line.strip() == "```"
            continue
        if fenced:
            current.append(line)
        elif line.startswith("#"):
            title = line.lstrip("#").strip()
    return blocks


def strip_comment(line: str) -> str:
    return line.split("  #")[0].split(" # ")[0].strip()


def readme_sections() -> list[tuple[str, str]]:
    """Every command line of the README in order, with its section's title: continuations joined, comments and the
    overview diagram (``g3 ingest  →  …``) dropped; a line with ``&&`` stays one line (bash runs it as written)."""
    lines = []
    for title, block in readme_blocks():
        for line in block.replace("\\\n", " ").splitlines():
            line = strip_comment(re.sub(r"\s+", " ", line))
            if line and not line.startswith("#") and "→" not in line and not line.startswith("("):
                lines.append((title, line))
    return lines


def readme_lines() -> list[str]:
    """Every command line of the README in order (:func:`readme_sections` without the titles)."""
    return [line for _, line in readme_sections()]


# The README in lanes that run side by side (tests/test_readme.py spreads them over the pytest processes): a
# section's commands run in its lane, in the README's order; a lane that starts from PREPARE runs in a copy of
# what PREPARE's commands made (the store, the partitions and the plans). A section not named runs in MAIN.
PREPARE, MAIN = "prepare", "main"
SECTION_LANES = {
    "Quick start": MAIN,
    "Which strategy should I use?": "advise",
    "`g3 ingest SOURCE OUT_STORE`": PREPARE,
    "`g3 info PATH`": PREPARE,
    "`g3 partition STORE --workers K`": PREPARE,
    "`g3 plan PART --strategy NAME`": PREPARE,
    "An emulated cluster on one machine: `--emulate-link RATE`": "emulated",
}
STARTS_FROM_PREPARE = {MAIN, "emulated"}


def lane_of(title: str) -> str:
    return SECTION_LANES.get(title, MAIN)


def lanes() -> list[str]:
    """Every lane the README's commands fall in, PREPARE first."""
    names = {lane_of(title) for title, _ in readme_sections()}
    return sorted(names, key=lambda n: (n != PREPARE, n))


def g3_commands() -> list[str]:
    """Every ``g3 …`` command of the README (a line's ``&&`` parts separately): for the CLI checks."""
    return [
        part.strip()
        for line in readme_lines()
        for part in line.split(" && ")
        if part.strip().startswith("g3 ")
    ]


@dataclass
class Step:
    command: str
    seconds: float = 0.0
    status: str = "ok"  # ok | not run: REASON | failed
    output: str = ""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def can_emulate(in_process: bool = False) -> str | None:
    """None when `--emulate-link` can run here, else why not (the reason `g3 cluster check` gives)."""
    if in_process:
        rc, output = run_g3_here(["cluster", "check"], Path.cwd())
        return None if rc == 0 else output.strip().splitlines()[-1]
    r = subprocess.run(
        [str(Path(sys.executable).with_name("g3")), "cluster", "check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return None if r.returncode == 0 else (r.stdout + r.stderr).strip().splitlines()[-1]


def make_user_files(work: Path, shared: Path) -> None:
    """What a user following the README has of their own, under ``work``."""
    import h5py
    import numpy as np
    import torch

    rng = np.random.default_rng(0)
    n, e = 300, 2400
    src, dst = rng.integers(0, n, e), rng.integers(0, n, e)
    (work / "edges.txt").write_text("".join(f"{s} {d}\n" for s, d in zip(src, dst, strict=True)))
    with h5py.File(work / "x.h5", "w") as f:
        f["feat"] = rng.standard_normal((n, 8)).astype(np.float32)
    np.save(work / "y.npy", rng.integers(0, 4, n))
    torch.save(
        {
            "edge_index": torch.as_tensor(np.stack([src, dst])),
            "x": torch.randn(n, 8),
            "y": torch.as_tensor(rng.integers(0, 4, n)),
            "train_mask": torch.rand(n) < 0.6,
            "val_mask": torch.rand(n) < 0.2,
            "test_mask": torch.rand(n) < 0.2,
        },
        work / "graph.pt",
    )
    ogb = work / "data" / "ogbn_products"
    rows = {
        "raw/edge.csv.gz": [f"{s},{d}" for s, d in zip(src, dst, strict=True)],
        "raw/node-feat.csv.gz": [",".join(f"{v:.4f}" for v in row) for row in rng.standard_normal((n, 8))],
        "raw/node-label.csv.gz": [str(v) for v in rng.integers(0, 4, n)],
        "raw/num-node-list.csv.gz": [str(n)],
        "raw/num-edge-list.csv.gz": [str(e)],
    }
    order = rng.permutation(n)
    for name, ids in zip(
        ("train", "valid", "test"), np.split(order, [n * 6 // 10, n * 8 // 10]), strict=True
    ):
        rows[f"split/sales_ranking/{name}.csv.gz"] = [str(i) for i in ids]
    for rel, lines in rows.items():
        (ogb / rel).parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(ogb / rel, "wt") as f:
            f.write("".join(f"{ln}\n" for ln in lines))
    for part in (shared / "data" / "webgraph").glob("cnr-2000.*"):
        (work / "data" / part.name).symlink_to(part)


def substitute(command: str, scale: dict, shared: Path) -> str:
    """The README's placeholders for this machine's paths and hosts, then the scale's replacements."""
    command = command.replace("~/data/", "data/").replace("../shared/", f"{shared}/")
    for old, new in scale.items():
        command = command.replace(old, new)
    return command


def run_torchrun(command: str, work: Path, env: dict) -> tuple[int, str]:
    """The README's torchrun line on two local hosts: host n runs it in its copy of demo/bundle/node-0000n
    (``is_host=1`` on host 0 only, as the README says), then host 0's run is copied back as ``host0-run``."""
    port = free_port()
    procs = []
    for n in range(2):
        host = work / f"host{n}"
        shutil.copytree(work / "demo" / "bundle" / f"node-{n:05d}", host)
        line = (
            command.replace("HOST0:29400", f"127.0.0.1:{port}")
            .replace("THIS_HOST", "127.0.0.1")
            .replace("JOB", "readme")
            .replace("is_host=1", f"is_host={int(n == 0)}")
        )
        procs.append(
            subprocess.Popen(
                ["bash", "-c", line],
                cwd=host,
                env={**env, "TMPDIR": str(host)},  # torchrun's torchelastic_* folders stay in the host's copy
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
            )
        )
    outputs, rc = [], 0
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=COMMAND_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            out, _ = proc.communicate()
        outputs.append(out)
        rc = rc or proc.returncode
    if rc == 0:
        shutil.copytree(work / "host0" / "run", work / "host0-run")
    return rc, "\n".join(outputs)


def plain_g3_command(command: str) -> list[str] | None:
    """The arguments of a ``g3 …`` line that bash would pass as they stand (no pipe, redirection, ``&&``,
    glob, ``~`` or variable), else None."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    words = list(lexer)
    if words[:1] != ["g3"] or any(set(w) <= set("();<>|&") or re.search(r"[*?\[$]|^~", w) for w in words):
        return None
    return words[1:]


def run_g3_here(args: list[str], work: Path) -> tuple[int, str]:
    """``g3 ARGS`` run by the CLI in this process, in ``work``: (exit code, what it printed)."""
    import traceback
    from contextlib import chdir

    from click.testing import CliRunner

    from g3cli.main import cli

    with chdir(work):
        result = CliRunner(env={"GLOO_SOCKET_IFNAME": "lo"}).invoke(cli, args, prog_name="g3")
    output = result.output
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        output += "".join(traceback.format_exception(result.exception))
    return result.exit_code, output


def walk(
    work: Path,
    shared: Path,
    scale: str = "tiny",
    echo=print,
    lane: str | None = None,
    in_process: bool = False,
) -> list[Step]:
    """Run the README in ``work`` (which must be empty or absent; with ``lane``, a lane starting from PREPARE
    finds PREPARE's output there); stops at the first failing command. ``lane``: that lane's commands only;
    ``in_process``: plain ``g3 …`` lines run in this process (:func:`run_g3_here`)."""
    work.mkdir(parents=True, exist_ok=True)
    if lane is None or lane not in STARTS_FROM_PREPARE:
        make_user_files(work, shared)
    bindir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ.get('PATH', '')}", "GLOO_SOCKET_IFNAME": "lo"}
    no_emulation = can_emulate(in_process)
    steps, done = [], set()
    for title, line in readme_sections():
        if lane is not None and lane_of(title) != lane:
            if lane in STARTS_FROM_PREPARE and lane_of(title) == PREPARE:
                done.add(line)  # ran before this lane started, in the folder it starts from
            continue
        step = Step(line)
        steps.append(step)
        if line in NOT_RUN:
            step.status = f"not run: {NOT_RUN[line]}"
        elif line in done:
            step.status = "not run: the same command ran above"
        elif "--emulate-link" in line and no_emulation:
            step.status = f"not run: {no_emulation}"
        if step.status != "ok":
            echo(f"-- {line}\n   {step.status}")
            continue
        done.add(line)
        command = substitute(line, SCALES[scale], shared)
        echo(f"$ {command}")
        t0 = time.perf_counter()
        here = [plain_g3_command(part) for part in command.split(" && ")] if in_process else [None]
        if command.startswith("torchrun "):
            rc, step.output = run_torchrun(command, work, env)
        elif None not in here:  # bash's `a && b`: b runs if a exits 0
            rc, step.output = 0, ""
            for args in here:
                rc, output = run_g3_here(args, work) if rc == 0 else (rc, "")
                step.output += output
        else:
            try:
                r = subprocess.run(
                    ["bash", "-c", command],
                    cwd=work,
                    env=env,
                    capture_output=True,
                    text=True,
                    timeout=COMMAND_SECONDS,
                )
                rc, step.output = r.returncode, r.stdout + r.stderr
            except subprocess.TimeoutExpired as exc:
                rc, step.output = -1, f"did not finish in {COMMAND_SECONDS} s: {exc.output or ''}"
        step.seconds = time.perf_counter() - t0
        echo(f"   {step.seconds:.1f} s, exit {rc}")
        if rc != 0:
            step.status = "failed"
            echo(step.output[-4000:])
            break
    return steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scale", choices=sorted(SCALES), default="tiny")
    ap.add_argument(
        "--dir", type=Path, default=None, help="work folder (default: a new temporary one, removed)"
    )
    ap.add_argument("--shared", type=Path, default=REPO.parent / "shared")
    args = ap.parse_args()
    if not (args.shared / "data").is_dir():
        print(f"{args.shared}/data not found: the README's real graphs live there")
        return 2
    import tempfile

    with tempfile.TemporaryDirectory(prefix="g3-readme-") as tmp:
        work = args.dir or Path(tmp) / "work"
        t0 = time.perf_counter()
        steps = walk(work, args.shared.resolve(), args.scale)
        ran = [s for s in steps if s.status == "ok"]
        print(
            f"{len(ran)} commands ran, {sum(s.status.startswith('not run') for s in steps)} not run, "
            f"{sum(s.status == 'failed' for s in steps)} failed; {time.perf_counter() - t0:.0f} s"
        )
        return 1 if any(s.status == "failed" for s in steps) else 0


if __name__ == "__main__":
    sys.exit(main())

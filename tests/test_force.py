"""`--force` replaces only an earlier artifact of the kind the command writes — never one of the command's inputs,
another kind of artifact, a file or the user's own folder (issue 41 §1: each of these once lost data)."""

from __future__ import annotations

import json

import pytest
from test_train import invoke


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """A store, a partition, a plan and a run, made once."""
    root = tmp_path_factory.mktemp("force")
    store, part, plan, run = root / "s.g3", root / "s.part", root / "s.plan", root / "s.run"
    for args in (
        ["ingest", "synthetic:tiny", str(store)],
        ["partition", str(store), "--workers", "2", "-o", str(part)],
        ["plan", str(part), "--hidden", "4", "-o", str(plan)],
        ["train", str(plan), "--epochs", "1", "--threads", "1", "-o", str(run)],
    ):
        r = invoke(args)
        assert r.exit_code == 0, r.output
    return root, store, part, plan, run


def snapshot(path):
    return (
        sorted((str(p.relative_to(path)), p.stat().st_size) for p in path.rglob("*"))
        if path.is_dir()
        else path.read_bytes()
    )


def assert_refused_leaving_targets_alone(cases: list) -> None:
    """Each (args, target, message): `g3 ARGS` is refused (exit 2, MESSAGE, no traceback), TARGET unchanged."""
    for args, target, message in cases:
        before = snapshot(target)
        r = invoke(args)
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, (args, r.output)
        assert snapshot(target) == before, args


@pytest.mark.slow
def test_force_never_replaces_an_input_or_something_else(chain, tmp_path):
    root, store, part, plan, run = chain
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own file")
    cases = [
        (["ingest", str(edges), str(edges), "--force"], edges, "is an input of this command"),
        (["ingest", str(edges), str(mine), "--force"], mine, "is a folder of other files, not a g3 store"),
        (["ingest", "synthetic:tiny", str(part), "--force"], part, "is a g3 partition, not a g3 store"),
        (["partition", str(store), "--workers", "2", "-o", str(store), "--force"], store, "is an input"),
        (["partition", str(store), "--workers", "2", "-o", str(root), "--force"], root, "holds an input"),
        (["plan", str(part), "-o", str(part), "--force"], part, "is an input"),
        (["plan", str(part), "-o", str(run), "--force"], run, "is a g3 run, not a g3 plan"),
        (["train", str(plan), "--epochs", "1", "-o", str(plan), "--force"], plan, "is an input"),
        (
            ["train", str(plan), "--epochs", "1", "-o", str(edges), "--force"],
            edges,
            "is a file, not a g3 run",
        ),
        (["bundle", str(plan), "--nodes", "2", "-o", str(part), "--force"], part, "is an input"),
        (
            ["bundle", str(plan), "--nodes", "2", "-o", str(run), "--force"],
            run,
            "is a g3 run, not a g3 bundle",
        ),
    ]
    assert_refused_leaving_targets_alone(cases)
    # a symbolic link to an input is that input
    link = tmp_path / "link"
    link.symlink_to(store)
    r = invoke(["partition", str(store), "--workers", "2", "-o", str(link), "--force"])
    assert r.exit_code == 2 and "is an input" in r.output, r.output
    # what --force is for still works: an earlier artifact of the same kind, or an empty folder
    r = invoke(["plan", str(part), "--hidden", "4", "-o", str(plan), "--force"])
    assert r.exit_code == 0, r.output
    assert json.loads((plan / "plan.json").read_text())["config"]["hidden"] == 4
    empty = tmp_path / "empty"
    empty.mkdir()
    assert invoke(["ingest", str(edges), str(empty), "--force"]).exit_code == 0


@pytest.mark.slow
def test_the_later_commands_never_replace_an_input_or_the_users_files(chain, tmp_path):
    """predict, export and advise (issue 51 §1, each once lost data): the input store, a folder of the user's
    files, the run's own weights; a link to the store is the store, and a replaced link leaves nothing behind."""
    root, store, part, plan, run = chain
    zstore = tmp_path / "s.zarr"  # a store whose name a .zarr output could take
    assert invoke(["ingest", "synthetic:tiny", str(zstore)]).exit_code == 0
    mine = tmp_path / "mine.zarr"
    mine.mkdir()
    (mine / "notes.txt").write_text("the user's own file")
    link = tmp_path / "link.zarr"
    link.symlink_to(zstore)
    plans = tmp_path / "plans"
    plans.mkdir()
    (plans / "notes.txt").write_text("the user's own file")
    cases = [
        (["predict", str(run), "--store", str(zstore), "-o", str(zstore), "--force"], zstore, "is an input"),
        (["predict", str(run), "--store", str(zstore), "-o", str(link), "--force"], zstore, "is an input"),
        (
            ["predict", str(run), "-o", str(mine), "--force"],
            mine,
            "is a folder of other files, not a g3 logits",
        ),
        (["export", str(run), "-o", str(run / "model.pt"), "--force"], run, "is part of an input"),
        (
            [
                "advise",
                str(store),
                "--plans",
                str(plans),
                "--workers",
                "2",
                "--force",
                "-o",
                str(tmp_path / "a"),
            ],
            plans,
            "holds files this command did not make",
        ),
        (
            ["advise", str(store), "--cache", str(store / "x"), "--workers", "2", "-o", str(tmp_path / "a")],
            store,
            "is part of an input",
        ),
    ]
    assert_refused_leaving_targets_alone(cases)
    assert invoke(["eval", str(run)]).exit_code == 0  # the run is whole
    # an earlier prediction is replaced, also through a link, which is replaced and leaves nothing behind
    out = tmp_path / "logits.zarr"
    assert invoke(["predict", str(run), "-o", str(out)]).exit_code == 0
    assert invoke(["predict", str(run), "-o", str(out), "--force"]).exit_code == 0
    to_logits = tmp_path / "to-logits.zarr"
    to_logits.symlink_to(out)
    assert invoke(["predict", str(run), "-o", str(to_logits), "--force"]).exit_code == 0
    assert to_logits.is_dir() and not to_logits.is_symlink() and out.is_dir()
    assert not [p for p in tmp_path.iterdir() if ".old-" in p.name or ".tmp" in p.name]


@pytest.mark.slow
@pytest.mark.parametrize(
    "args,message",
    [
        (
            ["partition", "{store}", "-w", "2", "--balance-tol", "nan"],
            "--balance-tol must be a finite number >= 1",
        ),
        (
            ["partition", "{store}", "-w", "2", "--balance-tol", "inf"],
            "--balance-tol must be a finite number >= 1",
        ),
        (
            ["partition", "{store}", "-w", "2", "--degree-tol", "inf"],
            "--degree-tol must be a finite number >= 1",
        ),
        (["partition", "{store}", "-w", "2", "--remote-budget", "nan"], "--remote-budget must be > 0"),
        (["plan", "{part}", "--device-memory", "0"], "the device memory must be a positive size"),
    ],
)
def test_options_that_once_accepted_nonsense(chain, tmp_path, args, message):
    """Issue 41 §4: each of these was accepted (a NaN tolerance, a device of 0 bytes)."""
    root, store, part, plan, run = chain
    r = invoke([a.format(store=store, part=part) for a in args] + ["-o", str(tmp_path / "out")])
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert not (tmp_path / "out").exists()


def test_features_too_large_for_their_storage_type_are_refused_naming_the_feature_file(tmp_path):
    import numpy as np

    (tmp_path / "e.txt").write_text("0 1\n1 2\n")
    np.save(tmp_path / "x.npy", np.array([[1.0, 2.0], [3.0, 1e300], [0.0, 0.0]]))
    r = invoke(
        ["ingest", str(tmp_path / "e.txt"), str(tmp_path / "s.g3"), "--features", str(tmp_path / "x.npy")]
    )
    assert r.exit_code == 2 and not (tmp_path / "s.g3").exists()
    assert (
        "x.npy: feature value 1e+300 in row 1 (node 1), column 1 does not fit --feature-dtype float32"
        in r.output
    )
    assert "Warning" not in r.output, r.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["--lr", "nan"], "--lr must be a positive number"),
        (["--dropout", "2"], "--dropout must be in [0, 1)"),
        (["--bin-size", "0"], "the bin size must be at least 1 node"),
        (["--threads", "0"], "--threads must be >= 1"),
        (["--timeout", "-1"], "--timeout must be a positive number of seconds"),
        (
            ["--strategies", "bns-gcn{boundary-sample=0}"],
            "--boundary-sample 0: the sampling ratio must be in (0, 1]",
        ),
    ],
)
def test_bench_checks_every_candidate_before_the_first_run(tiny_store, tmp_path, args, message):
    """g3 bench refuses a bad option in one line with the checks g3 plan and g3 train apply, before any run
    (issue 51 §2: these were a traceback, or every run failing, or accepted)."""
    out = tmp_path / "bench"
    r = invoke(
        ["bench", str(tiny_store), "--workers", "1", "--peers", "none", "--no-single", *args, "-o", str(out)]
    )
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, r.output
    assert not out.exists()


def output_params() -> set[tuple[str, str]]:
    """(command, parameter) of every output the CLI declares (``g3cli.paths.OutputPath``), from its definition."""
    import click

    from g3cli.main import cli
    from g3cli.paths import OutputPath

    found = set()

    def walk(cmd, name):
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for sub in cmd.list_commands(ctx):
                walk(cmd.get_command(ctx, sub), f"{name} {sub}".strip())
            return
        for p in cmd.params:
            if isinstance(p.type, OutputPath):
                found.add((name, p.name))
            elif isinstance(p.type, click.Path):  # an output must be declared as one to be covered here
                assert p.name not in ("out", "out_store", "plot", "plans"), (name, p.name)

    walk(cli, "")
    return found


def output_cases(root, store, part, plan, run, edges, spare):
    """For each declared output: (the command's arguments with the output at T, the input it reads, the file
    suffix its output takes). ``spare`` is a fresh folder for other outputs the command needs."""
    return {
        ("ingest", "out_store"): (lambda t: ["ingest", str(edges), t, "--force"], edges, ""),
        ("partition", "out"): (
            lambda t: ["partition", str(store), "--workers", "2", "-o", t, "--force"],
            store,
            "",
        ),
        ("partition", "plot"): (
            lambda t: [
                "partition",
                str(store),
                "--workers",
                "2",
                "-o",
                str(spare / "p"),
                "--plot",
                t,
                "--force",
            ],
            store,
            ".png",
        ),
        ("plan", "out"): (lambda t: ["plan", str(part), "-o", t, "--force"], part, ""),
        ("train", "out"): (lambda t: ["train", str(plan), "--epochs", "1", "-o", t, "--force"], plan, ""),
        ("train", "profile"): (
            lambda t: [
                "train",
                str(plan),
                "--epochs",
                "1",
                "-o",
                str(spare / "r"),
                "--profile",
                t,
                "--force",
            ],
            plan,
            ".json",
        ),
        ("bundle", "out"): (lambda t: ["bundle", str(plan), "--nodes", "2", "-o", t, "--force"], plan, ""),
        ("export", "out"): (
            lambda t: ["export", str(run), "--format", "pyg", "-o", t, "--force"],
            run,
            ".pt",
        ),
        ("predict", "out"): (lambda t: ["predict", str(run), "-o", t, "--force"], run, ".zarr"),
        ("report", "out"): (lambda t: ["report", str(run), "-o", t], run, ""),  # it has no --force
        ("simulate", "out"): (lambda t: ["simulate", str(plan), "-o", t, "--force"], plan, ""),
        ("simulate", "cache"): (
            lambda t: [
                "simulate",
                str(plan),
                "--workers",
                "4",
                "--cache",
                t,
                "-o",
                str(spare / "s"),
                "--force",
            ],
            plan,
            "",
        ),
        ("advise", "out"): (lambda t: ["advise", str(store), "-o", t, "--force"], store, ""),
        ("advise", "plans"): (
            lambda t: ["advise", str(store), "--plans", t, "-o", str(spare / "a"), "--force"],
            store,
            "",
        ),
        ("advise", "cache"): (
            lambda t: ["advise", str(store), "--cache", t, "-o", str(spare / "a"), "--force"],
            store,
            "",
        ),
        ("bench", "out"): (
            lambda t: [
                "bench",
                str(store),
                "--strategies",
                "g3",
                "--workers",
                "2",
                "--epochs",
                "1",
                "-o",
                t,
                "--force",
            ],
            store,
            "",
        ),
    }


@pytest.mark.slow
def test_every_declared_output_refuses_its_input_a_part_of_it_and_the_users_files(chain, tmp_path):
    """Every output option of every command, found in the CLI's definition: pointed with --force at the
    command's input, at a file inside that input, or at a folder of the user's own files, it is refused in one
    line (exit 2) and nothing there changes. A command added with an output and no case here fails the test."""
    root, store, part, plan, run = chain
    edges = tmp_path / "edges.txt"
    edges.write_text("0 1\n1 2\n2 0\n")
    cases = output_cases(root, store, part, plan, run, edges, tmp_path / "spare")
    assert output_params() == set(cases), "outputs without a data-loss case (or cases of no output)"
    for (command, param), (args_for, source, suffix) in sorted(cases.items()):
        mine = tmp_path / f"mine-{command}-{param}{suffix}"
        mine.mkdir()
        (mine / "notes.txt").write_text("the user's own file")
        inside = (
            next((p for p in sorted(source.rglob("*")) if p.is_file()), None) if source.is_dir() else None
        )
        for target in [t for t in (source, inside, mine) if t is not None]:
            before, before_src = snapshot(target), snapshot(source)
            r = invoke(args_for(str(target)))
            lines = r.output.strip().splitlines()
            assert r.exit_code == 2 and len(lines) == 1 and "Traceback" not in r.output, (
                command,
                param,
                str(target),
                r.output,
            )
            assert snapshot(target) == before and snapshot(source) == before_src, (
                command,
                param,
                str(target),
            )


def test_export_to_a_folder_names_the_folder_not_a_temporary_file(chain, tmp_path):
    root, store, part, plan, run = chain
    folder = tmp_path / "weights"
    folder.mkdir()
    r = invoke(["export", str(run), "--format", "pyg", "-o", str(folder), "--force"])
    assert r.exit_code == 2 and f"{folder}: is a folder: give the file to write" in r.output, r.output
    assert ".tmp" not in r.output and "force=True" not in r.output


def test_a_killed_attempts_work_folder_is_removed_by_the_next_attempt(tmp_path):
    """A stage killed mid-write (OOM, SIGKILL) leaves its `.NAME.tmp-*` work folder; the next attempt at the same
    output removes it, and no other folder beside it."""
    from helpers import ok

    out = tmp_path / "s"
    left = tmp_path / ".s.tmp-abc123"
    (left / "arrays").mkdir(parents=True)
    (left / "arrays" / "big.bin").write_bytes(b"x" * 1024)
    other = tmp_path / ".t.tmp-abc123"  # another output's: not this command's to touch
    other.mkdir()
    ok(["ingest", "synthetic:tiny", out])
    assert not left.exists() and other.is_dir() and (out / "zarr.json").is_file()

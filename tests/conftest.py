"""Shared fixtures: small stores built once per session, the ../shared path, CLI runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("G3_QUIET", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


# `make test-fast` (pytest -m "not slow"): everything but the modules that train with launched worker
# processes and the few other tests that take more than ~3 s (measured: docs/BENCHMARKS.md, "The test suite").
# `make test` runs them all.
SLOW_MODULES = {
    "test_demo",
    "test_device_path",
    "test_emulated_hosts",
    "test_eval",
    "test_runtime_v2",
    "test_multihost",
    "test_runs",
    "test_bench",
    "test_bytegnn",
    "test_hopgnn",
    "test_p3",
    "test_minibatch",
    "test_neutrontp",
    "test_strategies",
    "test_train",
}
SLOW_TESTS = {
    "test_local_order_trains_the_even_split_as_one_process_fed_the_union_batches",
    "test_transport_between_processes",
    "test_cnr2000_budget_is_infeasible_at_8_and_16_workers",
    "test_simulate_real_plan_and_cli",
    "test_two_partitions_to_one_target",
    "test_csr_equals_scipy_reference",
    "test_incremental_tracking_equals_recount_after_random_swaps",
    "test_several_runs_compare_and_scale",
    "test_g3_simulate_reproduces_a_real_p3_run_at_its_worker_count",
    "test_g3_simulate_a_hopgnn_plan_from_its_run",
    "test_processes_missing_the_same_version_compile_it_once",
    "test_eval_of_a_run_on_a_read_only_file_system_is_one_line",
}


# The tests of minutes each (docs/BENCHMARKS.md, "The test suite"), collected first: pytest-xdist hands tests out in
# collection order, so the longest start at once and the short ones fill the gaps, instead of one of them
# starting last and running alone while the other process idles.
# The README's lanes that start from its prepare lane come after a test of minutes: by then it is made.
LONGEST_FIRST = (
    "test_every_readme_command_runs_in_order[prepare]",
    "test_every_readme_command_runs_in_order[advise]",
    "test_the_procedure_with_the_cpu_standing_in",
    "test_every_stage_on_a_full_disk",
    "test_every_readme_command_runs_in_order[main]",
    "test_every_readme_command_runs_in_order[emulated]",
    "test_demo_script_runs_the_whole_pipeline",
    "test_bench_runs_every_strategy_at_every_rate",
)


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module.__name__ in SLOW_MODULES or item.originalname in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.name, len(rank)))  # stable: the rest keep their order


# Seconds of test (setup, call and teardown) by file, for the summary that ends `make test` (docs/BENCHMARKS.md,
# "The test suite"); under pytest-xdist the controller sees every worker's reports
SECONDS_BY_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    SECONDS_BY_FILE[path] = SECONDS_BY_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not SECONDS_BY_FILE:
        return
    total = sum(SECONDS_BY_FILE.values())
    terminalreporter.section("seconds of test by file (the 15 largest)")
    for path, seconds in sorted(SECONDS_BY_FILE.items(), key=lambda kv: -kv[1])[:15]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {100 * seconds / total:4.1f} %  {path}")
    terminalreporter.write_line(f"{total:8.1f} s  in all, {len(SECONDS_BY_FILE)} files")


def shared_path(*parts: str) -> Path:
    """A path under ../shared, or skip the test with a clear message when it is absent."""
    p = SHARED.joinpath(*parts)
    if not p.exists():
        pytest.skip(f"{p} not found: the reference data in ../shared is absent (a fresh clone has none)")
    return p


@pytest.fixture(scope="session")
def tiny_store(tmp_path_factory) -> Path:
    from stages.ingest.build import IngestOptions, build_store
    from stages.ingest.synthetic import resolve_spec, synthetic_source

    out = tmp_path_factory.mktemp("stores") / "tiny"
    build_store(synthetic_source(resolve_spec("tiny")), out, IngestOptions())
    return out


@pytest.fixture(scope="session")
def store(tmp_path_factory) -> Path:
    """The small graph of the training and strategy tests: 240 nodes, 6 communities, 10 features, 4 classes."""
    from helpers import STORE_SPEC, synthetic_store

    return synthetic_store(tmp_path_factory.mktemp("train") / "g", **STORE_SPEC)


@pytest.fixture(scope="session")
def partitions(store, tmp_path_factory):
    """`g3 partition` of `store` (seed 1), made once per (method, K) and only read by the tests."""
    from helpers import g3_partition

    root = tmp_path_factory.mktemp("parts")
    made: dict[tuple[str, int], Path] = {}

    def get(method: str, k: int) -> Path:
        if (method, k) not in made:
            made[(method, k)] = g3_partition(store, root / f"{method}-{k}", k, method=method, seed=1)
        return made[(method, k)]

    return get


@pytest.fixture
def cli_runner():
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture(autouse=True)
def _scratch_removed():
    """What :func:`helpers.short_scratch` made for a test goes when the test ends."""
    yield
    from helpers import remove_scratch

    remove_scratch()

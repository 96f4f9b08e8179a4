"""Shared fixtures: small stores built once per session, the ../shared path, CLI runner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("G3_QUIET", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


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
    from stages.ingest.build import IngestOptions, build_store
    from stages.ingest.synthetic import resolve_spec, synthetic_source

    spec = resolve_spec(None, nodes=240, avg_degree=6, feat_dim=10, num_classes=4, communities=6, seed=5)
    out = tmp_path_factory.mktemp("train") / "g"
    build_store(synthetic_source(spec), out, IngestOptions(seed=5))
    return out


@pytest.fixture
def cli_runner():
    from click.testing import CliRunner

    return CliRunner()

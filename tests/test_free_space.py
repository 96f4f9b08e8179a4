"""A disk too small is found before the work: `g3 ingest` and `g3 partition` estimate what they write at least
(the spilled arcs, the store's indices, generated features; the shards' feature rows and indices) and refuse
an output whose file system has less free, in one line with the figures, leaving nothing behind."""

from __future__ import annotations

import shutil
from collections import namedtuple

import pytest
from test_train import invoke

from stages.ingest.build import IngestOptions, disk_estimate
from stages.ingest.synthetic import resolve_spec, synthetic_source

Usage = namedtuple("Usage", "total used free")


@pytest.fixture
def full_disk(monkeypatch):
    """The file system reports 1 MiB free (nothing is really filled)."""
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(real(path).total, real(path).used, 1 << 20))


def test_an_ingest_that_cannot_fit_is_refused_before_it_reads_anything(tmp_path, full_disk):
    out = tmp_path / "store"
    r = invoke(["ingest", "synthetic:small", str(out)])
    assert r.exit_code == 2, r.output
    line = r.output.strip()
    assert "\n" not in line and str(out.name) in line and "1.0 MiB free" in line and "features" in line, line
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_partition_that_cannot_fit_is_refused_before_it_partitions(store, tmp_path, monkeypatch):
    real = shutil.disk_usage
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(real(path).total, real(path).used, 1000))
    out = tmp_path / "part"
    r = invoke(["partition", str(store), "--workers", "2", "-o", str(out)])
    assert r.exit_code == 2 and "free" in r.output and "indices" in r.output, r.output
    assert not out.exists()


def test_the_estimate_is_a_floor_of_what_ingest_writes(tmp_path):
    """The estimate never exceeds the store actually written (so a refusal is never wrong)."""
    src = synthetic_source(resolve_spec("tiny"))
    need = sum(disk_estimate(src, IngestOptions(), True).values())
    r = invoke(["ingest", "synthetic:tiny", str(tmp_path / "s")])
    assert r.exit_code == 0, r.output
    written = sum(f.stat().st_size for f in (tmp_path / "s").rglob("*") if f.is_file())
    assert 0 < need <= written

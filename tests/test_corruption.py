"""Damaged artifacts are refused where they are read: one line naming a file of the artifact, exit 2, nothing
else changed (issue 41 §2 and §6). A property-based test draws the artifact, the damage and the file
(tests/corruption.py, whose sweep over many more cases is counted in docs/BENCHMARKS.md), and unit tests pin
each reader's check so that it can be told from its absence."""

from __future__ import annotations

import json
import random

import corruption
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stages.common.artifact_json import SEAL, read_json_file, sealed
from stages.common.errors import G3InputError
from stages.common.npy import check_digest, load_checked, npy_manifest, write_digest


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return corruption.build_artifacts(tmp_path_factory.mktemp("corruption") / "base")


@pytest.mark.slow
@settings(
    max_examples=8,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    kind=st.sampled_from(corruption.KINDS),
    damage=st.sampled_from(corruption.DAMAGES),
    seed=st.integers(0, 2**32 - 1),
)
def test_random_damage_is_refused_by_the_command_that_reads_it(base, tmp_path_factory, kind, damage, seed):
    """Eight drawn cases, the same on every run (derandomized: CI is not a lottery); the sweep of
    tests/corruption.py explores many more, with other seeds (docs/BENCHMARKS.md)."""
    case = corruption.run_case(base, kind, damage, random.Random(seed), tmp_path_factory.mktemp("case"))
    if case is None:  # this damage does not apply to the drawn file (an edit of a binary file, …)
        return
    assert case.ok, f"{case.kind} {case.damage} {case.file} ({case.detail}): {case.why}\n{case.stderr}"


def test_a_sealed_json_refuses_any_edit(tmp_path):
    f = tmp_path / "plan.json"
    meta = sealed(
        {
            "num_workers": 2,
            "partition": {},
            "store": {},
            "config": {},
            "layers": [],
            "widths": [],
            "workers": [],
        }
    )
    f.write_text(json.dumps(meta))
    assert read_json_file(f)["num_workers"] == 2
    meta["num_workers"] = 3  # still a valid value: only the seal tells
    f.write_text(json.dumps(meta))
    with pytest.raises(G3InputError, match="content_sha256"):
        read_json_file(f)


def test_an_unsealed_json_is_checked_for_its_required_keys(tmp_path):
    f = tmp_path / "partition.json"
    f.write_text(json.dumps({"num_partitions": 2, "store": {}, "method": "g3"}))
    assert read_json_file(f)["num_partitions"] == 2
    f.write_text(json.dumps({"num_partitions": "2", "store": {}, "method": "g3"}))
    with pytest.raises(G3InputError, match="num_partitions.*not a integer|num_partitions"):
        read_json_file(f)
    f.write_text(json.dumps({"store": {}, "method": "g3"}))
    with pytest.raises(G3InputError, match="lacks the field 'num_partitions'"):
        read_json_file(f)
    f.write_text("[1, 2]")
    with pytest.raises(G3InputError, match="not an object"):
        read_json_file(f)
    assert SEAL not in json.loads(json.dumps({"a": 1}))


def test_a_flipped_byte_in_an_array_is_refused_by_its_checksum(tmp_path):
    np.save(tmp_path / "send.npy", np.arange(100, dtype=np.int64))
    manifest = npy_manifest(tmp_path)
    assert load_checked(tmp_path, "send.npy", manifest)[5] == 5
    a = np.load(tmp_path / "send.npy")
    a[5] = 10**9  # a well-formed file, an id out of range: the header check alone passes it
    np.save(tmp_path / "send.npy", a)
    assert load_checked(tmp_path, "send.npy", manifest, verify=False)[5] == 10**9
    with pytest.raises(G3InputError, match="does not match the sha256"):
        load_checked(tmp_path, "send.npy", manifest)


def test_weights_carry_a_digest_that_their_readers_check(tmp_path):
    f = tmp_path / "model.pt"
    f.write_bytes(b"0123456789")
    write_digest(f)
    check_digest(f)
    f.write_bytes(b"0123456780")
    with pytest.raises(G3InputError, match="does not match the sha256"):
        check_digest(f)

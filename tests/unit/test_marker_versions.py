"""Markers written by an earlier release (fingerprint version 1) still match a replay of their rows.

The earlier release is played by a fake sink that writes the version-1 fingerprint of the rows it
committed, which is what that release computed (``test_fingerprint.py`` pins version 1 to the
values the release before fingerprint versions wrote).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path

import pyarrow as pa
import pytest

from tests.unit.test_coordinator import zombie_commits_after_the_replay_check
from twophase import (
    AbortRequiredError,
    ConfigurationError,
    Fingerprint,
    Marker,
    NondeterministicBatchError,
    TaskContext,
    fingerprint_batches,
)
from twophase._engine._participant import TaskPlan, run_participant
from twophase._engine._replay import legacy_versions, match_markers
from twophase.testing import (
    FakeMarkerSink,
    FakeTarget,
    FakeTransaction,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once,
)

pytestmark = pytest.mark.unit


def rows(batch_id: int, n: int = 9) -> list[dict[str, object]]:
    # Values of 48 bytes and more: the path version 1 hashed one Python call at a time.
    return [{"id": batch_id * 100 + i, "payload": f"{i:04d}" * (3 + 10 * i)} for i in range(n)]


def split(batch_id: int, partitions: int = 3) -> list[list[dict[str, object]]]:
    parts: list[list[dict[str, object]]] = [[] for _ in range(partitions)]
    for index, row in enumerate(rows(batch_id)):
        parts[index % partitions].append(row)
    return parts


def ids(target: FakeTarget) -> list[int]:
    return [int(r["id"]) for r in target.committed_rows()]


@dataclass
class _Transaction(FakeTransaction):
    batches: list[pa.RecordBatch] = field(default_factory=list)


class EarlierReleaseSink(FakeMarkerSink):
    """Commits markers as the release before fingerprint versions did (version 1)."""

    def begin_transaction(self, context: TaskContext) -> FakeTransaction:
        super().begin_transaction(context)
        return _Transaction(context)

    def write(self, txn: FakeTransaction, batch: pa.RecordBatch) -> None:
        super().write(txn, batch)
        assert isinstance(txn, _Transaction)
        txn.batches.append(batch)

    def commit_with_marker(self, txn: FakeTransaction, marker: Marker) -> None:
        assert isinstance(txn, _Transaction)
        old = fingerprint_batches(txn.batches, version=1)
        assert old.count == marker.fingerprint.count
        super().commit_with_marker(txn, replace(marker, fingerprint=old))


def versions(target: FakeTarget, batch_id: int) -> list[int]:
    return sorted(m.fingerprint.version for m in target.markers(batch_id=batch_id))


def upgraded(old: LocalRunner, target: FakeTarget, log_dir: Path) -> LocalRunner:
    """The same query restarted from its checkpoint with this release."""
    return LocalRunner(FakeMarkerSink("m", target), log_dir, query_id=old.query_id)


def test_a_batch_partly_committed_by_the_earlier_release_is_finished_by_this_one(
    tmp_path: Path,
) -> None:
    target = FakeTarget.in_memory()
    old = LocalRunner(EarlierReleaseSink("m", target), tmp_path)
    target.fail("write", batch_id=0, partition_id=1, times=-1)
    with pytest.raises(Exception, match="injected fault"):
        old.run_batch(0, split(0))
    assert versions(target, 0) == [1]  # partition 0 committed, partition 1 failed
    target.clear_faults()
    new = upgraded(old, target, tmp_path)
    metrics = new.run_batch(0, split(0))
    assert metrics.skipped_partitions == 1
    assert versions(target, 0) == [1, 2, 2]
    assert_exactly_once(ids(target), [int(r["id"]) for r in rows(0)])


def test_markers_of_both_versions_in_one_batch_all_match(tmp_path: Path) -> None:
    target = FakeTarget.in_memory()
    old = LocalRunner(EarlierReleaseSink("m", target), tmp_path)
    target.fail("write", batch_id=0, partition_id=1, times=-1)
    target.fail("write", batch_id=0, partition_id=2, times=-1)
    with pytest.raises(Exception, match="injected fault"):
        old.run_batch(0, split(0))
    target.clear_faults()
    new = upgraded(old, target, tmp_path)
    target.fail("write", batch_id=0, partition_id=2, times=-1)
    with pytest.raises(Exception, match="injected fault"):
        new.run_batch(0, split(0))
    assert versions(target, 0) == [1, 2]
    target.clear_faults()
    new.restart()
    metrics = new.run_batch(0, split(0))
    assert metrics.skipped_partitions == 2
    assert versions(target, 0) == [1, 2, 2]
    assert_exactly_once(ids(target), [int(r["id"]) for r in rows(0)])


def test_a_replay_of_other_rows_is_still_refused_against_earlier_markers(tmp_path: Path) -> None:
    target = FakeTarget.in_memory()
    old = LocalRunner(EarlierReleaseSink("m", target), tmp_path)
    old.crash_at("phase1_done", 0)
    with pytest.raises(SimulatedCrash):
        old.run_batch(0, split(0))
    new = upgraded(old, target, tmp_path)
    changed = split(0)
    changed[1][0] = {**changed[1][0], "payload": "changed" * 10}
    committed = sorted(ids(target))
    with pytest.raises(NondeterministicBatchError, match=r"fingerprints 3:[0-9a-f]{16} x1"):
        new.run_batch(0, changed)
    assert sorted(ids(target)) == committed, "nothing may be written"


def test_a_zombie_of_the_earlier_release_committing_after_the_replay_check(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The new attempt streamed its rows (no copy kept) and cannot fingerprint them as version 1:
    # it aborts, and its retry, which keeps the rows, finds the zombie's commit and steps aside.
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("m", target)
    runner = LocalRunner(sink, max_task_failures=2)
    # Attempt 1 of the crashed run, a task of the earlier release, resumed late.
    earlier = EarlierReleaseSink("m", target)
    ran = zombie_commits_after_the_replay_check(sink, runner, split(0)[0], zombie_sink=earlier)
    with caplog.at_level(logging.INFO, logger="twophase.testing"):
        metrics = runner.run_batch(0, split(0))
    assert ran == [3]
    assert "attempt 1 of partition 0, run by another release" in caplog.text
    assert metrics.skipped_partitions == 1
    assert versions(target, 0) == [1, 2, 2]
    assert_exactly_once(ids(target), [int(r["id"]) for r in rows(0)])


def test_the_attempt_that_cannot_compare_aborts_its_transaction() -> None:
    target = FakeTarget.in_memory()
    identity = "m.0000000000000000"
    part = [pa.RecordBatch.from_pylist(split(0)[0])]
    earlier = EarlierReleaseSink("m", target)
    txn = earlier.begin_transaction(TaskContext("m", identity, 0, 0, 1))
    earlier.write(txn, part[0])
    # Committed after the plan below was made: not one of its pre-existing markers.
    earlier.commit_with_marker(txn, Marker(identity, 0, 0, 1, fingerprint_batches(part)))
    plan = TaskPlan("m", identity, 0, FakeMarkerSink("m", target).protocol)
    with pytest.raises(AbortRequiredError, match="another release"):
        run_participant(FakeMarkerSink("m", target), plan, 0, 0, part)
    assert len(ids(target)) == 3, "the attempt must not commit"
    assert target.open_transactions() == [], "the attempt must abort its transaction"


def test_match_markers_uses_each_replayed_partition_once_across_versions() -> None:
    same_v2, same_v1 = Fingerprint(1, 42), Fingerprint(1, 7, 1)
    markers = [Marker("s.1", 0, 0, 0, same_v1), Marker("s.1", 0, 1, 0, same_v2)]
    replayed = {0: same_v2, 1: same_v2, 2: Fingerprint(2, 9)}
    legacy = {0: same_v1, 1: same_v1, 2: Fingerprint(2, 5, 1)}
    skip, expected = match_markers(markers, replayed, sink="s", batch_id=0, legacy=[legacy])
    assert skip == frozenset({0, 1})
    assert expected == {2: Fingerprint(2, 9)}
    with pytest.raises(NondeterministicBatchError):  # two committed copies, one replayed
        match_markers(markers, {0: same_v2}, sink="s", batch_id=0, legacy=[{0: same_v1}])


def test_markers_of_a_newer_release_are_refused_before_anything_is_written() -> None:
    markers = [
        Marker("s.1", 4, 0, 0, Fingerprint(1, 1, 1)),
        Marker("s.1", 4, 1, 0, Fingerprint(1, 1)),
    ]
    assert legacy_versions(markers, sink="s", batch_id=4) == [1]
    newer = [*markers, Marker("s.1", 4, 2, 0, Fingerprint.parse("v9:1:0000000000000001"))]
    with pytest.raises(ConfigurationError, match=r"version\(s\) \[9\]"):
        legacy_versions(newer, sink="s", batch_id=4)

"""Real-time mode on an executor: small commits on a clock, a replay skips the committed prefix."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pyarrow as pa
import pytest

from twophase import CommitProtocol
from twophase._engine._participant import TaskPlan
from twophase._engine._realtime import RealtimeSettings, committed_prefix, run_realtime_partition
from twophase.errors import AbortRequiredError, NondeterministicBatchError
from twophase.testing import FakeMarkerSink, FakeTarget

pytestmark = pytest.mark.unit

IDENTITY = "rt.0123456789abcdef"
FAST = RealtimeSettings(commit_interval=0.05, commit_rows=1_000)


def _plan(epoch: int = 3) -> TaskPlan:
    return TaskPlan("rt", IDENTITY, epoch, CommitProtocol.MARKERS, epoch=1)


def _rows(start: int, stop: int) -> Iterator[pa.RecordBatch]:
    for i in range(start, stop):
        yield pa.record_batch({"id": [i]})


def _ids(target: FakeTarget) -> list[int]:
    return sorted(row["id"] for row in target.committed_rows())


def test_rows_commit_on_the_clock_while_the_partition_waits_for_its_next_row() -> None:
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("rt", target)
    seen_during_pause: list[list[int]] = []
    pause = threading.Event()

    def source() -> Iterator[pa.RecordBatch]:
        yield from _rows(0, 5)
        # No row arrives for a while: the five must become visible meanwhile.
        for _ in range(100):
            if _ids(target) == [0, 1, 2, 3, 4]:
                break
            pause.wait(0.02)
        seen_during_pause.append(_ids(target))
        yield from _rows(5, 8)

    result = run_realtime_partition(sink, _plan(), 0, 0, source(), FAST)
    assert seen_during_pause == [[0, 1, 2, 3, 4]]
    assert _ids(target) == list(range(8))
    assert result.rows == 8
    assert result.commits >= 2
    assert result.skipped == 0
    # Every commit marked the prefix it ended; the longest is the whole partition.
    prefix = committed_prefix(target.markers(IDENTITY, 3), 0)
    assert prefix is not None
    assert prefix.count == 8
    assert sorted(m.fingerprint.count for m in target.markers(IDENTITY, 3)) == sorted(
        {m.fingerprint.count for m in target.markers(IDENTITY, 3)}
    )


def test_commit_rows_commits_at_once_whatever_the_interval() -> None:
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("rt", target)
    slow = RealtimeSettings(commit_interval=3600.0, commit_rows=10)
    result = run_realtime_partition(sink, _plan(), 0, 0, _rows(0, 35), slow)
    assert _ids(target) == list(range(35))
    assert result.commits >= 4  # 10 + 10 + 10 + the rest at the epoch's end


def _crashing(start: int, stop: int, after: int) -> Iterator[pa.RecordBatch]:
    yield from _rows(start, after)
    raise RuntimeError("the executor died")


def test_a_replay_skips_the_committed_prefix_and_writes_the_rest_once() -> None:
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("rt", target)
    # The first run commits every 10 rows, then dies after 25 (rows 20..24 uncommitted).
    first = RealtimeSettings(commit_interval=3600.0, commit_rows=10)
    with pytest.raises(RuntimeError, match="executor died"):
        run_realtime_partition(sink, _plan(), 0, 0, _crashing(0, 40, 25), first)
    assert _ids(target) == list(range(20))
    # The replay of the epoch gets the same rows from the start, and more.
    result = run_realtime_partition(sink, _plan(), 0, 0, _rows(0, 40), FAST)
    assert result.skipped == 20
    assert result.rows == 20
    assert _ids(target) == list(range(40))


def test_a_replay_whose_rows_differ_is_refused_before_writing() -> None:
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("rt", target)
    first = RealtimeSettings(commit_interval=3600.0, commit_rows=10)
    with pytest.raises(RuntimeError):
        run_realtime_partition(sink, _plan(), 0, 0, _crashing(0, 40, 15), first)
    with pytest.raises(NondeterministicBatchError, match="does not begin with the rows") as info:
        run_realtime_partition(sink, _plan(), 0, 0, _rows(100, 140), FAST)
    assert info.value.batch_id == 3
    assert info.value.partition_id == 0
    assert _ids(target) == list(range(10))


def test_a_replay_that_ends_inside_the_committed_prefix_fails_and_writes_nothing() -> None:
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("rt", target)
    run_realtime_partition(sink, _plan(), 0, 0, _rows(0, 30), FAST)
    with pytest.raises(AbortRequiredError, match="ended after 12 rows, before the 30"):
        run_realtime_partition(sink, _plan(), 0, 0, _rows(0, 12), FAST)
    assert _ids(target) == list(range(30))


def test_a_commit_after_another_attempt_extended_the_prefix_is_refused() -> None:
    target = FakeTarget.in_memory()
    sink = FakeMarkerSink("rt", target)
    gate = threading.Event()

    def slow_zombie() -> Iterator[pa.RecordBatch]:
        yield from _rows(0, 5)
        gate.wait(5)  # meanwhile another attempt commits the partition's rows

    errors: list[BaseException] = []

    def zombie() -> None:
        try:
            run_realtime_partition(
                sink, _plan(), 0, 0, slow_zombie(), RealtimeSettings(3600.0, 1_000)
            )
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=zombie)
    thread.start()
    run_realtime_partition(sink, _plan(), 0, 1, _rows(0, 10), FAST)
    gate.set()
    thread.join(10)
    assert len(errors) == 1
    assert isinstance(errors[0], AbortRequiredError)
    assert "another attempt committed rows" in str(errors[0])
    assert _ids(target) == list(range(10))


def test_dead_letters_keep_their_place_in_the_partition_across_commits() -> None:
    target = FakeTarget.in_memory()
    target.reject("id", [3, 17], error_class="invalid_value", code="22P02")
    sink = FakeMarkerSink("rt", target, bad_rows="dead_letter")
    result = run_realtime_partition(sink, _plan(), 0, 0, _rows(0, 20), RealtimeSettings(3600.0, 10))
    assert _ids(target) == [i for i in range(20) if i not in {3, 17}]
    assert sorted(d.position for d in target.dead_letters()) == [3, 17]
    assert result.dead_lettered == 2
    assert result.rows == 20

"""A decided batch whose prepared transactions the target lost (issue 40).

After a failover to a replica that had not received them, the transactions a
commit decision names are neither prepared nor committed. The fake target loses
them the same way (``FakeTarget.rollback``). While the restarted query replays
that batch, it is written again, exactly once; partly committed, or lost after
the query moved past it, it fails with a ``FatalError`` that names the batch and
the lost partitions -- never reported committed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from twophase import FatalError, TransactionHandle, TransactionStatus
from twophase.testing import FakeSink, FakeTarget, LocalRunner, SimulatedCrash

pytestmark = pytest.mark.unit

ROWS = [[{"id": p * 10 + i} for i in range(3)] for p in range(2)]
IDS = [0, 1, 2, 10, 11, 12]


def _decided(tmp_path: Path, sink: FakeSink | None = None) -> tuple[LocalRunner, FakeTarget]:
    """Batch 0 prepared on two partitions and decided; the driver dies before phase 2."""
    target = sink.target if sink is not None else FakeTarget(str(tmp_path / "target"))
    runner = LocalRunner(sink or FakeSink("orders", target), tmp_path / "chk")
    runner.crash_at("decided", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, ROWS)
    assert len(target.prepared()) == 2
    assert target.committed_rows() == []
    assert 0 in runner.log.load().decided
    return runner, target


def _ids(target: FakeTarget) -> list[int]:
    return sorted(r["id"] for r in target.committed_rows())


def _lose(target: FakeTarget, partition: int) -> None:
    (gid,) = [g for g in target.prepared() if g.endswith(f":0:{partition}:0")]
    assert target.rollback(gid)
    assert target.status(gid) is TransactionStatus.LOST


def test_every_transaction_lost_while_the_batch_replays_is_written_again(tmp_path: Path) -> None:
    runner, target = _decided(tmp_path)
    _lose(target, 0)
    _lose(target, 1)
    runner.restart()
    runner.run_batch(0, ROWS)  # Spark replays batch 0: its commits/0 was never written
    assert _ids(target) == IDS
    assert target.prepared() == []
    state = runner.log.load()
    assert 0 in state.lost
    assert state.is_committed(0)
    record = runner.log.read_record(0, "lost")
    assert record is not None
    assert record["lost_partitions"] == [0, 1]
    assert record["rolled_back"] == 0
    decision = runner.log.read_record(0, "decision")
    assert decision is not None
    assert decision["epoch"] == record["epoch"]


def test_one_lost_and_one_still_prepared_rolls_that_back_and_writes_the_batch_once(
    tmp_path: Path,
) -> None:
    runner, target = _decided(tmp_path)
    _lose(target, 1)
    runner.restart()
    runner.run_batch(0, ROWS)
    assert _ids(target) == IDS  # partition 0's rows once: its old transaction was rolled back
    assert target.prepared() == []
    assert runner.metrics_history[-1].recovered_aborted == 1
    record = runner.log.read_record(0, "lost")
    assert record is not None
    assert record["lost_partitions"] == [1]


def test_partly_committed_and_partly_lost_is_refused_by_name(tmp_path: Path) -> None:
    target = FakeTarget(str(tmp_path / "target"))
    runner = LocalRunner(FakeSink("orders", target), tmp_path / "chk")
    runner.crash_at("committed_handle", 0, index=0)  # phase 2 committed partition 0, then died
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, ROWS)
    assert _ids(target) == [0, 1, 2]
    _lose(target, 1)
    runner.restart()
    with pytest.raises(FatalError) as caught:
        runner.run_batch(0, ROWS)
    error = caught.value
    assert not error.restartable
    assert error.sink == "orders"
    assert error.batch_id == 0
    assert "partitions [1]" in str(error)
    assert "partitions [0] committed" in str(error)
    assert "failover" in str(error)
    assert _ids(target) == [0, 1, 2], "nothing written again, nothing reported committed"
    state = runner.log.load()
    assert 0 in state.decided
    assert not state.is_committed(0)
    assert 0 not in state.lost


def test_lost_after_the_query_moved_past_the_batch_is_refused_by_name(tmp_path: Path) -> None:
    runner, target = _decided(tmp_path)
    _lose(target, 0)
    _lose(target, 1)
    runner.restart()
    with pytest.raises(FatalError) as caught:
        runner.run_batch(1, [[{"id": 100}]])
    assert "partitions [0, 1]" in str(caught.value)
    assert "starts at batch 1" in str(caught.value)
    assert caught.value.batch_id == 0
    assert target.committed_rows() == []
    assert 0 in runner.log.load().decided


def test_a_crash_while_the_lost_batch_is_written_again_still_ends_exact(tmp_path: Path) -> None:
    runner, target = _decided(tmp_path)
    _lose(target, 0)
    _lose(target, 1)
    runner.restart()
    runner.crash_at("decided", 0)  # the rewrite's own decision, then the driver dies again
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, ROWS)
    assert len(target.prepared()) == 2
    runner.restart()
    runner.run_batch(0, ROWS)  # its new decision is committed by recovery, as any
    assert _ids(target) == IDS
    assert target.prepared() == []


class _Unknowing(FakeSink):
    """A sink written before ``transaction_status``: it cannot tell."""

    def transaction_status(self, handle: TransactionHandle) -> None:  # type: ignore[override]
        return None


def test_a_sink_that_cannot_tell_is_committed_as_before(tmp_path: Path) -> None:
    target = FakeTarget(str(tmp_path / "target"))
    runner, _ = _decided(tmp_path, _Unknowing("orders", target))
    _lose(target, 1)
    runner.restart()
    with pytest.raises(Exception, match="neither prepared nor committed"):
        runner.run_batch(0, ROWS)
    assert 0 not in runner.log.load().lost

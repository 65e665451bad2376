"""The coordinator's calls of ``TwoPhaseCommitSink.fence_attempts`` (issue 22), without Spark.

When it is called (after recovery, after every finished batch, after a failed batch's abort), with
which rank, what a refusal (False: a prepared zombie holds the fence) and a failure do, and that a
committed batch never fails because of the fence.
"""

from __future__ import annotations

import logging
from typing import ClassVar

import pytest

from twophase import AbortRequiredError
from twophase.testing import FakeSink, FakeTarget, LocalRunner

pytestmark = pytest.mark.unit

#: Every fence_attempts call of this process: (identity, epoch, batch) -- the driver's copy.
CALLS: list[tuple[str, int, int]] = []


class FencingSink(FakeSink):
    """A fake coordinated sink whose fence answers from a script."""

    answers: ClassVar[list[bool | Exception]] = []

    def fence_attempts(self, identity: str, epoch: int, batch_id: int) -> bool:
        CALLS.append((identity, epoch, batch_id))
        answer = self.answers.pop(0) if self.answers else True
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest.fixture(autouse=True)
def _fresh() -> None:
    CALLS.clear()
    FencingSink.answers = []


def rows(batch: int) -> list[list[dict[str, int]]]:
    return [[{"id": batch * 10 + i}] for i in range(2)]


def test_fenced_after_recovery_and_after_every_committed_batch() -> None:
    runner = LocalRunner(FencingSink("f", FakeTarget.in_memory()))
    runner.run_batch(0, rows(0))
    runner.run_batch(1, rows(1))
    identity, epoch = runner.identity.token, runner.log.epoch
    assert [(identity, epoch, -1), (identity, epoch, 0), (identity, epoch, 1)] == CALLS
    runner.restart()
    runner.run_batch(2, rows(2))
    assert runner.log.epoch == epoch + 1
    assert CALLS[3:] == [(identity, epoch + 1, -1), (identity, epoch + 1, 2)]


def test_fenced_after_a_failed_batch_is_aborted() -> None:
    target = FakeTarget.in_memory()
    target.fail("pre_commit", batch_id=0, partition_id=1, times=-1, error=AbortRequiredError)
    runner = LocalRunner(FencingSink("f", target), max_task_failures=1)
    with pytest.raises(AbortRequiredError):
        runner.run_batch(0, rows(0))
    assert CALLS[-1] == (runner.identity.token, runner.log.epoch, 0)
    assert target.prepared() == []


def test_a_held_fence_sends_the_coordinator_back_to_sweep(
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = FakeTarget.in_memory()
    sink = FencingSink("f", target)
    runner = LocalRunner(sink)
    runner.run_batch(0, rows(0))
    # A zombie of batch 1 prepared after the batch's sweep: the fence is held until it is gone.
    zombie = f"{runner.identity.token}:1:0:7"
    target.begin(zombie)
    target.prepare(zombie)
    FencingSink.answers = [False, True]
    with caplog.at_level(logging.WARNING, "twophase.coordinator"):
        metrics = runner.run_batch(1, rows(1))
    assert metrics.outcome == "committed"
    assert zombie not in target.prepared()
    assert [c[2] for c in CALLS] == [-1, 0, 1, 1]
    assert "held up the fence" in caplog.text


@pytest.mark.parametrize("answer", [False, RuntimeError("server away")])
def test_a_fence_that_cannot_be_recorded_never_fails_a_committed_batch(
    caplog: pytest.LogCaptureFixture, answer: bool | Exception
) -> None:
    runner = LocalRunner(FencingSink("f", FakeTarget.in_memory()))
    runner.run_batch(0, rows(0))
    FencingSink.answers = [answer] * 3
    with caplog.at_level(logging.WARNING, "twophase.coordinator"):
        metrics = runner.run_batch(1, rows(1))
    assert metrics.outcome == "committed"
    assert "could not fence stale attempts after batch 1" in caplog.text


def test_the_default_fence_records_nothing_and_lets_the_batch_commit() -> None:
    target = FakeTarget.in_memory()
    sink = FakeSink("plain", target)
    assert sink.fence_attempts("plain.x", 1, 0) is True
    assert LocalRunner(sink).run_batch(0, rows(0)).outcome == "committed"
    assert len(target.committed_rows()) == 2

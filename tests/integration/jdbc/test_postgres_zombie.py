"""The markers protocol on PostgreSQL fences zombies (the hole docs/guarantees.md used to list).

A zombie is a task attempt Spark gave up on while its process lives on: it may
resume and try to commit after Spark's retry. Each test plays one interleaving
of a zombie (an executor-side copy of the sink, driven by hand) with the
production coordinator's retry (``LocalRunner`` with task retries), against the
real server, and checks per-key counts: every id exactly once.
"""

from __future__ import annotations

import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from jdbc_support import PgTarget, batch_rows, every_id, part

from twophase import Marker, TaskContext, TwoPhaseError, fingerprint_batches
from twophase.connectors.jdbc import PostgresMarkerSink
from twophase.errors import AbortRequiredError, FatalError
from twophase.testing import FakeTarget, LocalRunner, SimulatedCrash, with_faults

pytestmark = [pytest.mark.integration, pytest.mark.chaos]

#: Run once by the next read_markers() of this process (an interleaving point).
AFTER_READ_MARKERS: list[Callable[[], None]] = []


class _Interleaved(PostgresMarkerSink):
    def read_markers(self, identity: str, batch_id: int) -> Any:
        markers = super().read_markers(identity, batch_id)
        while AFTER_READ_MARKERS:
            AFTER_READ_MARKERS.pop()()
        return markers


class Zombie:
    """An attempt (0 unless said) of partition 0 of a batch (1 unless said), run by hand."""

    def __init__(
        self,
        sink: Any,
        runner: LocalRunner,
        epoch: int | None = None,
        *,
        batch: int = 1,
        attempt: int = 0,
    ) -> None:
        self.sink = pickle.loads(pickle.dumps(sink))
        epoch = runner.log.epoch if epoch is None else epoch
        self.context = TaskContext(sink.name, runner.identity.token, batch, 0, attempt, epoch or 0)
        self.txn: Any = None

    def begin_and_write(self) -> None:
        self.txn = self.sink.begin_transaction(self.context)
        for batch in part(self.context.batch_id, 0):
            self.sink.write(self.txn, batch)

    def commit(self) -> None:
        c = self.context
        rows = part(c.batch_id, 0)
        marker = Marker(c.identity, c.batch_id, 0, c.attempt, fingerprint_batches(rows))
        try:
            self.sink.commit_with_marker(self.txn, marker)
        except BaseException:
            self.sink.abort(self.txn)
            raise


@pytest.fixture
def plain_table(pg_b: PgTarget, table: str) -> str:
    # No primary key: a partition written twice shows up as ids counted twice.
    pg_b.sql(f'CREATE TABLE "{table}" (id bigint NOT NULL, payload text)')
    return table


def _runner(pg_b: PgTarget, table: str, failures: int = 2) -> tuple[Any, FakeTarget, LocalRunner]:
    sink = pg_b.sink("zombie", table)
    sink.__class__ = _Interleaved
    rules = FakeTarget.in_memory()
    faulty = with_faults(sink, rules)
    runner = LocalRunner(faulty, max_task_failures=failures)
    runner.run_batch(0, batch_rows(0))
    return faulty, rules, runner


def _counts(pg_b: PgTarget, table: str) -> Counter[int]:
    return Counter(pg_b.ids(table))


def test_a_zombie_holding_its_transaction_is_terminated_by_the_retry(
    pg_b: PgTarget, plain_table: str
) -> None:
    sink, rules, runner = _runner(pg_b, plain_table)
    zombie = Zombie(sink, runner)
    zombie.begin_and_write()  # holds partition 0's slot, then freezes
    lost = rules.fail("begin_transaction", batch_id=1, partition_id=0, attempt=0)
    runner.run_batch(1, batch_rows(1))  # Spark's retry: attempt 1 of partition 0
    assert rules.fired(lost) == 1
    with pytest.raises(TwoPhaseError):  # its backend was terminated by attempt 1
        zombie.commit()
    assert _counts(pg_b, plain_table) == every_id(0, 1)


def test_a_zombie_resuming_after_the_retry_committed_is_refused(
    pg_b: PgTarget, plain_table: str
) -> None:
    sink, rules, runner = _runner(pg_b, plain_table)
    lost = rules.fail("begin_transaction", batch_id=1, partition_id=0, attempt=0)
    runner.run_batch(1, batch_rows(1))
    assert rules.fired(lost) == 1
    zombie = Zombie(sink, runner)  # frozen before it began; resumes now
    zombie.begin_and_write()
    with pytest.raises(AbortRequiredError, match="attempt 1 of this run already committed"):
        zombie.commit()
    assert _counts(pg_b, plain_table) == every_id(0, 1)


def test_a_zombie_committing_between_the_retrys_marker_read_and_its_lock(
    pg_b: PgTarget, plain_table: str
) -> None:
    # The retry reads the markers (none yet), then the zombie commits, then the retry
    # takes the slot: it must step aside, and its next attempt must find the marker.
    sink, rules, runner = _runner(pg_b, plain_table, failures=3)
    zombie = Zombie(sink, runner)
    rules.fail("begin_transaction", batch_id=1, partition_id=0, attempt=0)
    fired: list[str] = []

    def zombie_commits_now() -> None:
        zombie.begin_and_write()
        zombie.commit()
        fired.append("zombie committed")

    AFTER_READ_MARKERS.append(zombie_commits_now)
    metrics = runner.run_batch(1, batch_rows(1))
    assert fired == ["zombie committed"]
    # attempt 1 stepped aside at its commit; attempt 2 found the zombie's marker and skipped
    assert (metrics.skipped_partitions, metrics.rows) == (1, 6)
    assert _counts(pg_b, plain_table) == every_id(0, 1)


def test_a_zombie_of_an_older_run_is_fenced_by_the_restarted_query(
    pg_b: PgTarget, plain_table: str
) -> None:
    sink, _rules, runner = _runner(pg_b, plain_table)
    crash = runner.crash_at("intent_recorded", 1)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(1, batch_rows(1))
    assert crash.fired
    holding = Zombie(sink, runner)  # began before the driver died, still holds its slot
    holding.begin_and_write()
    late = Zombie(sink, runner)  # had not begun yet
    runner.restart()
    runner.run_batch(1, batch_rows(1))  # run 2: its attempt 0 terminates the older holder
    with pytest.raises(TwoPhaseError):
        holding.commit()
    late.begin_and_write()
    with pytest.raises(FatalError, match="is a zombie"):
        late.commit()
    assert _counts(pg_b, plain_table) == every_id(0, 1)


def test_an_attempt_finding_a_newer_holder_stops_at_once(pg_b: PgTarget, plain_table: str) -> None:
    sink, _rules, runner = _runner(pg_b, plain_table)
    newer = Zombie(sink, runner)
    newer.context = TaskContext(sink.name, runner.identity.token, 1, 0, 3, newer.context.epoch)
    newer.begin_and_write()  # attempt 3 holds the slot
    older = Zombie(sink, runner)  # attempt 0
    with pytest.raises(FatalError, match="is fenced: attempt 3"):
        older.begin_and_write()
    newer.sink.abort(newer.txn)
    assert _counts(pg_b, plain_table) == every_id(0)


def test_a_zombie_of_an_earlier_batch_never_fences_a_later_batch(
    pg_b: PgTarget, plain_table: str
) -> None:
    """Its attempt number is higher, but batch 1 is over: batch 2's attempt 0 is the newer."""
    sink, _rules, runner = _runner(pg_b, plain_table)
    runner.run_batch(1, batch_rows(1))
    zombie = Zombie(sink, runner, attempt=5)  # Spark's attempt 5 of batch 1, left hanging
    zombie.begin_and_write()
    later = Zombie(sink, runner, batch=2)
    later.begin_and_write()  # terminates the zombie's backend instead of stopping
    later.commit()
    with pytest.raises(TwoPhaseError):
        zombie.commit()
    assert _counts(pg_b, plain_table) == every_id(0, 1) + Counter([200, 201, 202])


def test_an_attempt_of_an_earlier_batch_finding_a_later_batch_holding_the_slot_stops(
    pg_b: PgTarget, plain_table: str
) -> None:
    sink, _rules, runner = _runner(pg_b, plain_table)
    later = Zombie(sink, runner, batch=2)
    later.begin_and_write()
    zombie = Zombie(sink, runner, attempt=5)
    with pytest.raises(FatalError, match=r"attempt 5 of batch 1 .* attempt 0 of batch 2"):
        zombie.begin_and_write()
    later.sink.abort(later.txn)
    assert _counts(pg_b, plain_table) == every_id(0)

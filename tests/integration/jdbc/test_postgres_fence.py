"""The coordinated protocol on PostgreSQL: no prepared transaction outlives its run (issue 22).

A zombie -- a task attempt Spark gave up on whose process lives on -- used to be
able to ``PREPARE TRANSACTION`` after the run's last sweep, leaving a prepared
transaction until the next run. The driver now records in ``twophase_fences``,
after every finished batch and after recovery, the rank at or below which
attempts are stale, and every attempt reads it ``FOR SHARE`` right before it
prepares. Each test plays one interleaving of a zombie (an executor-side copy of
the sink, driven by hand) with the production coordinator (``LocalRunner``),
against the real server, and checks the phases: nothing prepared, and only the
batch's own rows visible.
"""

from __future__ import annotations

import pickle
from collections import Counter
from typing import Any

import pytest
from jdbc_support import PgTarget, batch_rows, every_id, part

from twophase import TaskContext
from twophase.connectors.jdbc import PostgresTwoPhaseSink
from twophase.errors import FatalError, TwoPhaseError
from twophase.testing import LocalRunner, install_step_listener

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


class Zombie:
    """An attempt of partition 0 of ``batch``, run by hand on an executor-side copy."""

    def __init__(
        self, sink: Any, runner: LocalRunner, batch: int, epoch: int | None = None, attempt: int = 0
    ) -> None:
        self.sink = pickle.loads(pickle.dumps(sink))
        epoch = (runner.log.epoch or 0) if epoch is None else epoch
        self.context = TaskContext(sink.name, runner.identity.token, batch, 0, attempt, epoch)
        self.txn: Any = None

    def begin_and_write(self) -> None:
        self.txn = self.sink.begin_transaction(self.context)
        for batch in part(900 + self.context.batch_id, 0):  # rows no batch writes
            self.sink.write(self.txn, batch)

    def pre_commit(self) -> Any:
        try:
            return self.sink.pre_commit(self.txn)
        except BaseException:
            self.sink.abort(self.txn)
            raise


@pytest.fixture
def setup(pg_a: PgTarget, table: str) -> tuple[PgTarget, str, Any, LocalRunner]:
    pg_a.sql(f'CREATE TABLE "{table}" (id bigint NOT NULL, payload text)')
    sink = pg_a.sink("fenced", table)
    assert isinstance(sink, PostgresTwoPhaseSink)
    return pg_a, table, sink, LocalRunner(sink)


def ids(pg: PgTarget, table: str) -> Counter[int]:
    return Counter(pg.ids(table))


def test_a_zombie_waking_after_the_last_batch_cannot_prepare(
    setup: tuple[PgTarget, str, Any, LocalRunner],
) -> None:
    pg, table, sink, runner = setup
    runner.run_batch(0, batch_rows(0))  # the coordinator's batch 0 (its own attempt 0)
    runner.run_batch(1, batch_rows(1))
    zombie = Zombie(sink, runner, batch=0)  # an attempt of batch 0 that Spark gave up on
    # The zombie was frozen during its COPY; it wakes after the query's last batch.
    zombie.begin_and_write()
    with pytest.raises(FatalError, match="fenced: batch 0 is finished"):
        zombie.pre_commit()
    assert pg.prepared() == []
    assert ids(pg, table) == every_id(0, 1)
    fence = pg.sql(
        "SELECT epoch, batch_id FROM twophase_fences WHERE identity = %s",
        (runner.identity.token,),
    )
    assert fence == [(runner.log.epoch, 1)]


def test_a_zombie_of_an_earlier_run_cannot_prepare_after_recovery(
    setup: tuple[PgTarget, str, Any, LocalRunner],
) -> None:
    pg, table, sink, runner = setup
    runner.run_batch(0, batch_rows(0))
    old_epoch = runner.log.epoch
    runner.restart()  # a new run: recovery fences every attempt of the earlier one
    runner.run_batch(1, batch_rows(1))
    zombie = Zombie(sink, runner, batch=1, epoch=old_epoch)
    zombie.begin_and_write()
    with pytest.raises(FatalError, match=f"run {old_epoch} is over"):
        zombie.pre_commit()
    assert pg.prepared() == []
    assert ids(pg, table) == every_id(0, 1)


def test_a_live_zombie_holding_the_fence_row_is_terminated(
    setup: tuple[PgTarget, str, Any, LocalRunner],
) -> None:
    pg, table, sink, runner = setup
    runner.run_batch(0, batch_rows(0))
    zombie = Zombie(sink, runner, batch=1)
    zombie.begin_and_write()
    # The zombie merged, read the fence row (FOR SHARE) and froze right before PREPARE.
    zombie.sink._writer.finish(zombie.txn)
    with zombie.txn.conn.cursor() as cur:
        cur.execute(
            "SELECT epoch FROM twophase_fences WHERE identity = %s FOR SHARE",
            (runner.identity.token,),
        )
    runner.run_batch(1, batch_rows(1))  # its fence terminates the zombie's backend
    with pytest.raises(TwoPhaseError):
        zombie.pre_commit()
    assert pg.prepared() == []
    assert ids(pg, table) == every_id(0, 1)


def test_a_zombie_that_prepared_before_the_fence_is_rolled_back_and_fenced(
    setup: tuple[PgTarget, str, Any, LocalRunner],
) -> None:
    pg, table, sink, runner = setup
    runner.run_batch(0, batch_rows(0))
    # Another attempt than the one the coordinator commits (its gid is not kept).
    zombie = Zombie(sink, runner, batch=1, attempt=1)
    zombie.begin_and_write()
    prepared: list[Any] = []

    def prepare_late(step: str, batch: int, _index: int | None) -> None:
        # After phase 2 and after the sweep's listing: the zombie prepares in between.
        if step == "phase2_done" and batch == 1:
            prepared.append(zombie.pre_commit())

    install_step_listener(sink, prepare_late)
    sweep = sink.list_in_doubt
    calls: list[int] = []

    def list_then_nothing(context: Any) -> Any:
        calls.append(1)
        return [] if len(calls) == 1 else sweep(context)  # the first sweep misses it

    sink.list_in_doubt = list_then_nothing
    runner.run_batch(1, batch_rows(1))
    assert prepared, "the zombie did not prepare"
    assert len(calls) >= 2, "the fence did not send the coordinator back to sweep"
    assert pg.prepared() == []
    assert ids(pg, table) == every_id(0, 1)
    del sink.list_in_doubt
    late = Zombie(sink, runner, batch=1, attempt=2)
    late.begin_and_write()
    with pytest.raises(FatalError, match="fenced"):
        late.pre_commit()
    assert pg.prepared() == []


def test_the_fence_table_is_created_beside_the_marker_table(pg_a: PgTarget, table: str) -> None:
    pg_a.sql("CREATE SCHEMA IF NOT EXISTS fence_elsewhere")
    pg_a.sql(f'CREATE TABLE "{table}" (id bigint NOT NULL, payload text)')
    sink = pg_a.sink("fenced2", table, marker_table="fence_elsewhere.my_markers")
    runner = LocalRunner(sink)
    runner.run_batch(0, batch_rows(0))
    rows = pg_a.sql(
        "SELECT epoch, batch_id FROM fence_elsewhere.twophase_fences WHERE identity = %s",
        (runner.identity.token,),
    )
    assert rows == [(runner.log.epoch, 0)]

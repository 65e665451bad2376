"""A decided batch whose prepared transactions the database lost, on the real servers (issue 40).

What a failover to an asynchronous standby or replica that had not received them leaves behind is
what a ``ROLLBACK PREPARED`` (``XA ROLLBACK``) by hand leaves: the transactions a commit decision
names are neither prepared nor committed, and their proof rows (``twophase_commits``,
``twophase_prepared``), written inside them, are gone with them. The driver dies right after the
decision; the decided transactions are lost; the restarted query, replaying that batch, writes it
again exactly once. Partly committed, it fails with a ``FatalError`` that names the partitions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from jdbc_support import PgTarget, mariadb_sql, three_partitions
from jdbc_support import three_partition_ids as expected

from twophase import FatalError, TransactionHandle
from twophase.connectors.jdbc import mariadb_sink
from twophase.testing import LocalRunner, SimulatedCrash, assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


@dataclass
class Database:
    """One dialect: a sink on a fresh table, what a reader sees, and a transaction lost."""

    sink: Callable[[], Any]
    ids: Callable[[], list[int]]
    lose: Callable[[TransactionHandle], None]


@pytest.fixture(
    params=[
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
    ]
)
def database(request: pytest.FixtureRequest) -> Iterator[Database]:
    table = f"lost_{uuid.uuid4().hex[:12]}"
    name = f"lost-{uuid.uuid4().hex[:8]}"
    if request.param == "postgres":
        pg: PgTarget = request.getfixturevalue("pg_a")
        pg.sql(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text)')
        yield Database(
            lambda: pg.sink(name, table),
            lambda: pg.ids(table),
            lambda h: pg.sql("ROLLBACK PREPARED %s", (h.transaction_id,)) and None,
        )
        return
    server = request.getfixturevalue("mariadb_server")
    mariadb_sql(server, f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, payload TEXT)")

    def lose(handle: TransactionHandle) -> None:  # XA ROLLBACK by hand, of this xid only
        sink.recover_and_abort(handle)

    sink = mariadb_sink(name, table=table, url=server.password_url, lock_timeout=5.0)
    yield Database(
        lambda: sink,
        lambda: sorted(int(r[0]) for r in mariadb_sql(server, f"SELECT id FROM `{table}`")),
        lose,
    )
    mariadb_sql(server, f"SET STATEMENT lock_wait_timeout = 5 FOR DROP TABLE `{table}`")


def _crash(db: Database, step: str, index: int | None = None) -> tuple[LocalRunner, list[Any]]:
    runner = LocalRunner(db.sink())
    runner.crash_at(step, 0, index)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, three_partitions(0))
    handles = runner.log.read_decision(0, runner.sink.decode_handle)
    assert len(handles) == 3
    return runner, sorted(handles, key=lambda h: h.partition_id)


def test_every_decided_transaction_lost_while_the_batch_replays_is_written_again(
    database: Database,
) -> None:
    runner, handles = _crash(database, "decided")
    assert database.ids() == []  # prepared, invisible
    for handle in handles:
        database.lose(handle)
    runner.restart()
    runner.run_batch(0, three_partitions(0))  # Spark's replay of batch 0
    assert_exactly_once(database.ids(), expected(0))
    record = runner.log.read_record(0, "lost")
    assert record is not None
    assert record["lost_partitions"] == [0, 1, 2]
    runner.run_batch(1, three_partitions(1))
    assert_exactly_once(database.ids(), expected(0, 1))


def test_one_lost_two_still_prepared_are_rolled_back_and_the_batch_written_once(
    database: Database,
) -> None:
    runner, handles = _crash(database, "decided")
    database.lose(handles[1])
    runner.restart()
    runner.run_batch(0, three_partitions(0))
    assert_exactly_once(database.ids(), expected(0))
    assert runner.metrics_history[-1].recovered_aborted == 2
    record = runner.log.read_record(0, "lost")
    assert record is not None
    assert record["lost_partitions"] == [1]


def test_partly_committed_and_partly_lost_fails_naming_the_lost_partitions(
    database: Database,
) -> None:
    runner, handles = _crash(database, "committed_handle", 0)  # phase 2 committed partition 0
    visible = database.ids()
    assert sorted(visible) == [0, 1, 2]
    database.lose(handles[2])
    runner.restart()
    with pytest.raises(FatalError, match=r"partitions \[2\] while those of partitions \[0\]"):
        runner.run_batch(0, three_partitions(0))
    assert sorted(database.ids()) == visible  # nothing written again, nothing reported committed
    state = runner.log.load()
    assert 0 in state.decided
    assert not state.is_committed(0)
    database.lose(handles[1])  # the one left prepared holds its rows' locks: let the table go

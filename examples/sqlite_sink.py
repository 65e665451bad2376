"""A complete markers sink in about 40 lines: rows and markers in one SQLite transaction.

Assumptions: ``database`` is a SQLite file reachable from the driver and every
executor (local mode, or a shared disk), and ``table`` exists with a column for
every column of the stream. SQLite cannot prepare a transaction for another
process to commit, so the sink uses the markers protocol: each partition inserts its rows
and an idempotence marker in one local transaction and commits both on the
executor; on a replay the coordinator reads the markers and writes only the
partitions that are not committed yet. Uncommitted work dies with its connection
(SQLite rolls back an unfinished transaction of a dead process), so there is
nothing to fence and ``list_in_doubt`` keeps its default.

Guarantee: every row of every micro-batch is in ``table`` exactly once, for a
deterministic pipeline (or with ``staging=True``). Readers may see the
partitions of a batch appear one after another. Run it:
``python examples/sqlite_sink.py`` (no servers needed): it writes two batches through the
production coordinator, the driver "crashing" after the partitions of the second committed, and
checks that the replay skips them; then the same with poison rows, which
:class:`SqliteDeadLetterSink` sets aside. Its contract test is
``tests/unit/test_custom_sink_contract.py``.

:class:`SqliteDeadLetterSink` adds dead letters (``bad_rows="dead_letter"``): a batch is
inserted in one statement, as before; when SQLite refuses it (a ``NOT NULL``, ``UNIQUE``,
``CHECK`` or foreign-key constraint), it is split in halves inside the transaction, a savepoint
around each, down to the rows SQLite refuses, which ``write`` hands back. twophase passes them
as dead letters to ``write_dead_letters``, which inserts them into ``twophase_dead_letters`` in
the same transaction as the good rows and the marker: every row is in ``table`` or in the dead
letters, exactly once, and a replay skips both.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from twophase import (
    DeadLetter,
    Fingerprint,
    Marker,
    MarkerCommitSink,
    RowError,
    SinkContext,
    TaskContext,
)

MARKERS = "twophase_markers"


class SqliteSink(MarkerCommitSink[sqlite3.Connection]):
    def __init__(self, name: str, database: str, table: str, **settings: Any) -> None:
        super().__init__(name, **settings)  # staging=True, bad_rows=..., max_bad_rows=...
        self.database, self.table = database, table

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.database, timeout=60, isolation_level=None)  # explicit BEGIN

    def open(self, context: SinkContext) -> None:
        with contextlib.closing(self._connect()) as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MARKERS} (identity TEXT, batch_id INTEGER, "
                "partition_id INTEGER, attempt INTEGER, fingerprint TEXT, "
                "PRIMARY KEY (identity, batch_id, partition_id, attempt, fingerprint))"
            )

    def begin_transaction(self, context: TaskContext) -> sqlite3.Connection:
        conn = self._connect()
        conn.execute("BEGIN")
        return conn

    def write(self, txn: sqlite3.Connection, batch: pa.RecordBatch) -> None:
        columns = ", ".join(batch.schema.names)
        marks = ", ".join("?" * batch.num_columns)
        rows = zip(*(column.to_pylist() for column in batch.columns), strict=True)
        txn.executemany(f"INSERT INTO {self.table} ({columns}) VALUES ({marks})", rows)

    def commit_with_marker(self, txn: sqlite3.Connection, marker: Marker) -> None:
        m = marker
        values = (m.identity, m.batch_id, m.partition_id, m.attempt, str(m.fingerprint))
        txn.execute(f"INSERT INTO {MARKERS} VALUES (?, ?, ?, ?, ?)", values)
        txn.execute("COMMIT")  # rows and marker become visible together
        txn.close()

    def abort(self, txn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.ProgrammingError):  # already closed: nothing open
            if txn.in_transaction:
                txn.execute("ROLLBACK")
            txn.close()

    def read_markers(self, identity: str, batch_id: int) -> list[Marker]:
        query = f"SELECT partition_id, attempt, fingerprint FROM {MARKERS} WHERE identity = ?"
        with contextlib.closing(self._connect()) as conn:
            rows = conn.execute(query + " AND batch_id = ?", (identity, batch_id)).fetchall()
        return [Marker(identity, batch_id, p, a, Fingerprint.parse(f)) for p, a, f in rows]


DEAD_LETTERS = "twophase_dead_letters"
#: SQLite's constraint names, as its messages give them, and the error class of each.
CLASSES = {
    "NOT NULL": "not_null",
    "UNIQUE": "unique",
    "CHECK": "check",
    "FOREIGN KEY": "foreign_key",
}


class SqliteDeadLetterSink(SqliteSink):
    def open(self, context: SinkContext) -> None:
        super().open(context)
        with contextlib.closing(self._connect()) as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {DEAD_LETTERS} (sink TEXT, batch_id INTEGER, "
                "partition_id INTEGER, position INTEGER, error_class TEXT, code TEXT, "
                "message TEXT, column_name TEXT, row_json TEXT, "
                "PRIMARY KEY (sink, batch_id, partition_id, position))"
            )

    def write(self, txn: sqlite3.Connection, batch: pa.RecordBatch) -> list[RowError]:
        return self._insert(txn, batch, 0)

    def _insert(self, txn: sqlite3.Connection, batch: pa.RecordBatch, at: int) -> list[RowError]:
        txn.execute("SAVEPOINT rows")  # the clean batch: one statement, as before
        try:
            super().write(txn, batch)
        except sqlite3.IntegrityError as exc:  # a row error; anything else fails the batch
            txn.execute("ROLLBACK TO rows")
            txn.execute("RELEASE rows")
            if batch.num_rows == 1:
                kind, _, where = str(exc).partition(" constraint failed: ")
                code = getattr(exc, "sqlite_errorname", None)  # SQLITE_CONSTRAINT_NOTNULL...
                column = where.rpartition(".")[2] if kind == "NOT NULL" else None
                return [RowError(at, CLASSES.get(kind, "other"), str(exc), code, column)]
            half = batch.num_rows // 2  # split inside the transaction, not row by row
            return self._insert(txn, batch.slice(0, half), at) + self._insert(
                txn, batch.slice(half), at + half
            )
        txn.execute("RELEASE rows")
        return []

    def write_dead_letters(self, txn: sqlite3.Connection, letters: Sequence[DeadLetter]) -> None:
        rows = [dataclasses.astuple(letter) for letter in letters]  # every field, in order
        txn.executemany(f"INSERT INTO {DEAD_LETTERS} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

    def read_dead_letters(self) -> Iterator[DeadLetter]:  # twophase dead-letters list
        query = f"SELECT * FROM {DEAD_LETTERS} WHERE sink = ? ORDER BY batch_id, partition_id, "
        with contextlib.closing(self._connect()) as conn:
            rows = conn.execute(query + "position", (self.name,)).fetchall()
        return iter([DeadLetter(*row) for row in rows])

    def redrive_dead_letters(self, letters: Sequence[DeadLetter]) -> list[RowError]:
        batch = pa.RecordBatch.from_pylist([letter.values() for letter in letters])
        where = "sink = ? AND batch_id = ? AND partition_id = ? AND position = ?"
        with contextlib.closing(self._connect()) as conn:
            conn.execute("BEGIN")  # the rows in, their letters out: one transaction
            refused = self._insert(conn, batch, 0)  # what the table still refuses stays
            kept = {error.row for error in refused}
            moved = [dataclasses.astuple(x)[:4] for i, x in enumerate(letters) if i not in kept]
            conn.executemany(f"DELETE FROM {DEAD_LETTERS} WHERE {where}", moved)
            conn.execute("COMMIT")
        return refused


def read_dead_letters(database: str) -> list[DeadLetter]:
    """Return every dead letter committed to ``database``."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute(f"SELECT * FROM {DEAD_LETTERS}").fetchall()
    return [DeadLetter(*row) for row in rows]


def replay_after_a_crash(runner: Any, batch_id: int, partitions: list[list[Any]]) -> str:
    """Run a batch whose driver "crashes" after its partitions committed; restart; replay it."""
    from twophase.testing import SimulatedCrash

    runner.crash_at("phase1_done", batch_id=batch_id)  # partitions committed, batch not recorded
    try:
        runner.run_batch(batch_id, partitions)
    except SimulatedCrash:
        print(f"driver crashed after batch {batch_id}'s partitions committed; restarting")
    runner.restart()
    return str(runner.run_batch(batch_id, partitions).log_line())


def demo() -> None:
    """Write two batches, one partition of the second committing just before a driver "crash".

    Runs the production coordinator without Spark (``twophase.testing.LocalRunner``): the driver
    dies after the partitions of batch 1 committed on their executors but before it recorded the
    batch as committed; the replay after the restart finds both markers and writes nothing again.
    Raises ``AssertionError`` if any row is missing or duplicated.
    """
    import os
    import tempfile

    from twophase.testing import LocalRunner, assert_exactly_once

    database = os.path.join(tempfile.mkdtemp(), "events.db")
    with contextlib.closing(sqlite3.connect(database)) as setup:
        setup.execute("CREATE TABLE events (id INTEGER, payload TEXT)")
    runner = LocalRunner(SqliteSink("events", database, "events"))
    print(
        runner.run_batch(0, [[{"id": 1, "payload": "a"}], [{"id": 2, "payload": "b"}]]).log_line()
    )
    batch_1 = [[{"id": 3, "payload": "c"}], [{"id": 4, "payload": "d"}]]
    print(replay_after_a_crash(runner, 1, batch_1))  # the replay: skipped=2
    with contextlib.closing(sqlite3.connect(database)) as check:
        rows = check.execute("SELECT id, payload FROM events ORDER BY id").fetchall()
    assert_exactly_once([r[0] for r in rows], [1, 2, 3, 4])
    print(f"OK: {rows} committed exactly once")


def demo_dead_letters() -> None:
    """Write two batches with poison rows, the driver "crashing" after the second's partitions.

    Runs the production coordinator without Spark (``twophase.testing.LocalRunner``). Raises
    ``AssertionError`` if a row is missing, duplicated, or in both places.
    """
    import os
    import tempfile

    from twophase.testing import LocalRunner, assert_exactly_once_or_dead_lettered

    database = os.path.join(tempfile.mkdtemp(), "events.db")
    with contextlib.closing(sqlite3.connect(database)) as setup:
        setup.execute("CREATE TABLE events (id INTEGER UNIQUE, payload TEXT NOT NULL)")
    sink = SqliteDeadLetterSink("events", database, "events", bad_rows="dead_letter")
    runner = LocalRunner(sink)
    batch_0 = [[{"id": 1, "payload": "a"}, {"id": 2, "payload": None}], [{"id": 3, "payload": "c"}]]
    print(runner.run_batch(0, batch_0).log_line())  # dead_lettered=1
    batch_1 = [
        [{"id": 4, "payload": "d"}, {"id": 1, "payload": "again"}],
        [{"id": 5, "payload": "e"}],
    ]
    print(replay_after_a_crash(runner, 1, batch_1))  # skips rows and dead letters alike
    with contextlib.closing(sqlite3.connect(database)) as check:
        good = [(i, p) for i, p in check.execute("SELECT id, payload FROM events")]
    dead = [(d.values()["id"], d.values()["payload"]) for d in read_dead_letters(database)]
    every = [(r["id"], r["payload"]) for b in (batch_0, batch_1) for part in b for r in part]
    assert_exactly_once_or_dead_lettered(good, dead, every, refused=[(2, None), (1, "again")])
    for letter in read_dead_letters(database):
        print(f"dead letter: batch {letter.batch_id} {letter.error_class}: {letter.message}")
    print(f"OK: {len(good)} rows and {len(dead)} dead letters, each input row once")


if __name__ == "__main__":
    demo()
    demo_dead_letters()

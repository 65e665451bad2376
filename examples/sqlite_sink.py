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
checks that the replay skips them. Its contract test is
``tests/unit/test_custom_sink_contract.py``.
"""

from __future__ import annotations

import contextlib
import sqlite3

import pyarrow as pa

from twophase import Fingerprint, Marker, MarkerCommitSink, SinkContext, TaskContext

MARKERS = "twophase_markers"


class SqliteSink(MarkerCommitSink[sqlite3.Connection]):
    def __init__(self, name: str, database: str, table: str, *, staging: bool = False) -> None:
        super().__init__(name, staging=staging)
        self.database, self.table = database, table

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.database, timeout=60, isolation_level=None)  # explicit BEGIN

    def open(self, context: SinkContext) -> None:
        with contextlib.closing(self._connect()) as conn:
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {MARKERS} (identity TEXT, batch_id INTEGER, "
                "partition_id INTEGER, attempt INTEGER, fingerprint TEXT, "
                "PRIMARY KEY (identity, batch_id, partition_id, attempt))"
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


def demo() -> None:
    """Write two batches, one partition of the second committing just before a driver "crash".

    Runs the production coordinator without Spark (``twophase.testing.LocalRunner``): the driver
    dies after the partitions of batch 1 committed on their executors but before it recorded the
    batch as committed; the replay after the restart finds both markers and writes nothing again.
    Raises ``AssertionError`` if any row is missing or duplicated.
    """
    import os
    import tempfile

    from twophase.testing import LocalRunner, SimulatedCrash, assert_exactly_once

    database = os.path.join(tempfile.mkdtemp(), "events.db")
    with contextlib.closing(sqlite3.connect(database)) as setup:
        setup.execute("CREATE TABLE events (id INTEGER, payload TEXT)")
    runner = LocalRunner(SqliteSink("events", database, "events"))
    print(
        runner.run_batch(0, [[{"id": 1, "payload": "a"}], [{"id": 2, "payload": "b"}]]).log_line()
    )
    batch_1 = [[{"id": 3, "payload": "c"}], [{"id": 4, "payload": "d"}]]
    runner.crash_at("phase1_done", batch_id=1)  # partitions committed, batch not recorded
    try:
        runner.run_batch(1, batch_1)
    except SimulatedCrash:
        print("driver crashed after batch 1's partitions committed; restarting")
    runner.restart()
    print(runner.run_batch(1, batch_1).log_line())  # the replay: skipped=2
    with contextlib.closing(sqlite3.connect(database)) as check:
        rows = check.execute("SELECT id, payload FROM events ORDER BY id").fetchall()
    assert_exactly_once([r[0] for r in rows], [1, 2, 3, 4])
    print(f"OK: {rows} committed exactly once")


if __name__ == "__main__":
    demo()

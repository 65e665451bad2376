"""Real-time mode's commits on the real databases, without Spark: the engine's task function.

What the Spark test (``tests/realtime``) cannot time exactly: each commit keeps one marker per
partition and epoch; a replay skips the committed prefix; a zombie attempt that resumes after a
newer attempt committed is refused under the slot's lock; rows that differ are refused.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from jdbc_support import id_batch, mariadb_sql

from twophase import CommitProtocol, SinkContext
from twophase._engine._participant import TaskPlan
from twophase._engine._realtime import RealtimeSettings, run_realtime_partition
from twophase.connectors.jdbc import mariadb_sink, postgres_sink
from twophase.errors import AbortRequiredError, NondeterministicBatchError

pytestmark = [pytest.mark.integration]

EVERY_COMMIT = RealtimeSettings(commit_interval=3600.0, commit_rows=10)


class _Db:
    """A database, a sink of the markers protocol on a new table, and what a reader sees."""

    def __init__(self, kind: str, server: Any) -> None:
        self.kind, self.server = kind, server
        self.table = f"rt_{uuid.uuid4().hex[:10]}"
        self.identity = f"rt.{uuid.uuid4().hex[:16]}"
        if kind == "postgres":
            self.sink = postgres_sink(
                "rt", table=self.table, dsn=server.dsn, protocol="markers", create_table=True
            )
        else:
            self.sink = mariadb_sink(
                "rt", table=self.table, url=server.url, protocol="markers", create_table=True
            )
        self.sink.open(SinkContext("rt", self.identity, str(uuid.uuid4()), "run", "/unused"))
        self.sink.check_schema(id_batch([0]).schema, 0)

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        if self.kind == "mariadb":
            return mariadb_sql(self.server, statement)
        conn = self.server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                return list(cur.fetchall())
        finally:
            conn.close()

    def ids(self) -> Counter[int]:
        return Counter(int(r[0]) for r in self.sql(f"SELECT id FROM {self.table}"))

    def markers(self) -> list[tuple[Any, ...]]:
        return self.sql(
            "SELECT batch_id, partition_id, attempt, fingerprint FROM twophase_markers "
            f"WHERE identity = '{self.identity}'"
        )

    def run(self, rows: Iterator[pa.RecordBatch], attempt: int = 0, **kw: Any) -> Any:
        plan = TaskPlan("rt", self.identity, 7, CommitProtocol.MARKERS, epoch=1)
        settings = kw.pop("settings", EVERY_COMMIT)
        return run_realtime_partition(self.sink, plan, 0, attempt, rows, settings)


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres), "mariadb"])
def db(request: pytest.FixtureRequest) -> _Db:
    if request.param == "mariadb":
        request.applymarker(pytest.mark.mariadb)
        return _Db("mariadb", request.getfixturevalue("mariadb_server"))
    return _Db("postgres", request.getfixturevalue("postgres_server_no_prepared"))


def _rows(start: int, stop: int, crash_at: int | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(start, stop):
        if i == crash_at:
            raise RuntimeError("the executor died")
        yield id_batch([i])


@pytest.mark.mariadb
def test_each_commit_keeps_one_marker_per_partition_and_epoch(db: _Db) -> None:
    result = db.run(_rows(0, 35))
    assert result.commits == 4
    assert db.ids() == Counter(range(35))
    markers = db.markers()
    assert len(markers) == 1, markers  # the longer prefix replaced the shorter ones
    assert markers[0][:3] == (7, 0, 0)
    assert markers[0][3].split(":")[1] == "35"


@pytest.mark.mariadb
def test_a_replay_after_a_crash_skips_the_committed_prefix(db: _Db) -> None:
    with pytest.raises(RuntimeError, match="executor died"):
        db.run(_rows(0, 60, crash_at=25))
    assert db.ids() == Counter(range(20))  # two commits of 10; rows 20..24 were not committed
    result = db.run(_rows(0, 60), attempt=1)
    assert result.skipped == 20
    assert db.ids() == Counter(range(60))
    with pytest.raises(NondeterministicBatchError, match="does not begin with the rows"):
        db.run(_rows(1000, 1100), attempt=2)
    assert db.ids() == Counter(range(60))


@pytest.mark.mariadb
def test_a_zombie_that_resumes_after_a_newer_attempt_committed_is_refused(db: _Db) -> None:
    resume = threading.Event()
    refused: list[BaseException] = []

    def frozen() -> Iterator[pa.RecordBatch]:
        yield from _rows(0, 5)
        resume.wait(30)  # frozen; Spark declares it lost and runs attempt 1

    def zombie() -> None:
        try:
            db.run(frozen(), attempt=0, settings=RealtimeSettings(3600.0, 1_000))
        except BaseException as exc:
            refused.append(exc)

    thread = threading.Thread(target=zombie)
    thread.start()
    db.run(_rows(0, 30), attempt=1)
    resume.set()
    thread.join(60)
    assert len(refused) == 1, "the zombie was not refused"
    assert isinstance(refused[0], AbortRequiredError)
    assert "another attempt committed rows" in str(refused[0])
    assert db.ids() == Counter(range(30))

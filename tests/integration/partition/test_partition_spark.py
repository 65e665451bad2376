"""A streaming query on Spark (``local[2,3]``) whose target is cut off right after its first batch.

The issue's experiment with bounds of seconds: a Parquet source, one file per trigger; the
partition starts when the driver has recovered for batch 1, so that the executors' phase 1 (their
Python workers' pooled connections, or new ones) meets it. A long partition fails the query with a
restartable twophase error within the bound (plus Spark's task retries); the query restarted after
the heal is exact with nothing left prepared. A short one is a pause: the query finishes.
"""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import twophase
from tests.integration.kafka.kafka_support import read_all, unstable_partitions
from tests.spark.helpers import SCHEMA, write_input
from twophase.connectors.jdbc import close_connections, mariadb_sink, postgres_sink
from twophase.connectors.kafka import KafkaSink
from twophase.errors import find_error
from twophase.testing import install_step_listener

from .support import Cut

pytestmark = [pytest.mark.root, pytest.mark.integration, pytest.mark.spark]

BATCHES = 3
#: Each of the 3 attempts of a task waits its bound (2 s, or a connect of 1 s) and Spark's retry.
LIMIT = 30.0


class Case:
    """One sink kind on its server in a namespace, and what a reader sees there."""

    def __init__(self, kind: str, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        fixture = {
            "postgres": "pg_partition",
            "mariadb": "maria_partition",
            "kafka": "kafka_partition",
        }
        self.partitioned = request.getfixturevalue(fixture[kind])
        self.netns = self.partitioned.netns
        self.table = f"s_{uuid.uuid4().hex[:10]}"
        if kind == "kafka":
            self.partitioned.server.create_topic(self.table, partitions=2)

    def sink(self) -> Any:
        if self.kind == "kafka":
            return KafkaSink(
                "spark-part",
                bootstrap_servers=self.partitioned.server.bootstrap_servers,
                topic=self.table,
                control_topic=f"ctl-{self.table}",
                operation_timeout=2.0,
                local_retries=1,
                producer_lanes=1,
            )
        bounds = {"network_timeout": 2, "connect_timeout": 1, "create_table": True}
        if self.kind == "postgres":
            return postgres_sink(
                "spark-part", table=self.table, dsn=self.partitioned.server.dsn, **bounds
            )
        return mariadb_sink(
            "spark-part", table=self.table, url=self.partitioned.server.url, **bounds
        )

    def ids(self) -> list[int]:
        server = self.partitioned.server
        if self.kind == "kafka":
            return sorted(
                int(r.value.split(b",")[0]) for r in read_all(server.bootstrap_servers, self.table)
            )
        conn = server.connect() if self.kind == "postgres" else server.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                quote = '"' if self.kind == "postgres" else "`"
                cur.execute(f"SELECT id FROM {quote}{self.table}{quote}")
                return sorted(r[0] for r in cur.fetchall())
        finally:
            conn.close()

    def nothing_left(self) -> None:
        server = self.partitioned.server
        if self.kind == "kafka":
            assert unstable_partitions(server.bootstrap_servers, [self.table]) == []
        elif self.kind == "postgres":
            assert [g for g, _ in server.prepared_transactions() if g.startswith("tp:")] == []
        else:
            assert [x for x in server.prepared_xids() if x.startswith("tp:")] == []


def start(spark: Any, source: Path, checkpoint: Path, case: Case, sink: Any) -> Any:
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    if case.kind == "kafka":
        df = df.selectExpr(
            "CAST(id AS STRING) AS key", "concat(CAST(id AS STRING), ',', payload) AS value"
        )
    return twophase.write_stream(
        df, sink, checkpoint_location=str(checkpoint), trigger={"availableNow": True}
    ).start()


def cut_at_batch_1(sink: Any, cut: Cut, heal_after: float | None = None) -> None:
    """Cut when the driver has recovered for batch 1 (before its tasks run)."""

    def listener(step: str, batch_id: int, _index: int | None) -> None:
        if step == "recovered" and batch_id == 1 and cut.started is None:
            cut.start()
            if heal_after is not None:
                threading.Timer(heal_after, cut.heal).start()

    install_step_listener(sink, listener)


@pytest.mark.parametrize(
    "kind",
    # Kafka's steps under a partition: test_partition_kafka.py, through the same coordinator.
    [
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("mariadb", marks=pytest.mark.mariadb),
        pytest.param("kafka", marks=[pytest.mark.kafka, pytest.mark.extended]),
    ],
)
def test_a_long_partition_fails_the_query_and_the_restart_is_exact(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest, kind: str
) -> None:
    case = Case(kind, request)
    written = write_input(tmp_path / "in", BATCHES)
    sink = case.sink()
    cut = Cut(case.netns)
    cut_at_batch_1(sink, cut)
    query = start(spark, tmp_path / "in", tmp_path / "chk", case, sink)
    try:
        query.awaitTermination(120)
    except Exception:
        pass
    finally:
        if query.isActive:
            query.stop()
        cut.heal()
    assert cut.started is not None, "the cut never happened"
    assert cut.healed is not None
    took = cut.healed - cut.started
    cut.assert_blocked()
    error = find_error(query.exception())
    assert error is not None, query.exception()
    assert error.restartable, error
    assert error.batch_id == 1, error
    assert took < LIMIT, f"the query failed {took:.1f} s into the partition (bound {LIMIT} s)"
    close_connections()
    restarted = start(spark, tmp_path / "in", tmp_path / "chk", case, case.sink())
    assert restarted.awaitTermination(120)
    assert restarted.exception() is None, restarted.exception()
    assert case.ids() == sorted(written), "rows lost or duplicated"
    case.nothing_left()


@pytest.mark.postgres
def test_a_short_partition_is_a_pause_for_the_query(
    spark: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    case = Case("postgres", request)
    written = write_input(tmp_path / "in", BATCHES)
    sink = case.sink()
    cut = Cut(case.netns)
    cut_at_batch_1(sink, cut, heal_after=0.8)
    query = start(spark, tmp_path / "in", tmp_path / "chk", case, sink)
    try:
        assert query.awaitTermination(120), "the query did not finish"
    finally:
        if query.isActive:
            query.stop()
    deadline = time.monotonic() + 5
    while cut.healed is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert query.exception() is None, query.exception()
    cut.assert_blocked()
    assert case.ids() == sorted(written)
    case.nothing_left()

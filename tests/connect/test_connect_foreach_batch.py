"""``foreachBatch(sink)`` under Spark Connect: the sink runs in the server, without py4j.

The Connect server is the driver: the crash tests SIGKILL it (JVM and Python workers) at a
protocol step, start it again, and run the query again from its checkpoint.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

import twophase
from tests.connect.support import KillServerAt, crash_server, run_to_end, start_query
from tests.spark.helpers import ODD_NAMES, table_ids, write_input
from twophase.errors import ConfigurationError
from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget, assert_exactly_once
from twophase_dev import SparkConnectServer

pytestmark = [pytest.mark.connect, pytest.mark.spark, pytest.mark.slow]


def _run(
    server: SparkConnectServer, tmp_path: Path, sink: Any, checkpoint: str = "", **kwargs: Any
) -> None:
    checkpoint = checkpoint or str(tmp_path / "chk")
    run_to_end(
        server, lambda spark: start_query(spark, tmp_path / "in", checkpoint, sink, **kwargs)
    )


def _crash(
    server: SparkConnectServer,
    tmp_path: Path,
    sink: Any,
    step: str,
    checkpoint: str = "",
    **kwargs: Any,
) -> None:
    """Run the query until the server SIGKILLs itself at ``step`` of batch 1, then restart it."""
    listener = KillServerAt(step, 1)
    checkpoint = checkpoint or str(tmp_path / "chk")
    crash_server(
        server,
        lambda spark: start_query(
            spark, tmp_path / "in", checkpoint, sink, listener=listener, **kwargs
        ),
        step,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("protocol", "step"),
    [
        ("coordinated", "decided"),
        # Not in the default run (20-minute budget): the markers protocol across a server crash
        # at phase1_done is the Kafka sink's case below, and PostgreSQL's markers recovery after
        # its driver's death is tests/integration/jdbc/test_postgres_chaos.py's.
        pytest.param("markers", "phase1_done", marks=pytest.mark.extended),
    ],
)
def test_postgres_sink_on_connect_is_exactly_once_across_a_server_crash(
    connect_server: SparkConnectServer,
    tmp_path: Path,
    postgres_server: Any,
    postgres_server_no_prepared: Any,
    gcs_endpoint: Any,
    protocol: str,
    step: str,
) -> None:
    """The coordinated run keeps its checkpoint on ``gs://`` (the emulator), markers locally.

    Every id ending in 7 has a NULL payload, which the table's NOT NULL refuses: the sink sets
    it aside (``bad_rows="dead_letter"``), so the core's read-ahead of Spark's rows and the dead
    letters run in the Connect server's Python workers too.
    """
    from twophase._stores._store import open_store
    from twophase.connectors.jdbc import postgres_sink

    server = postgres_server if protocol == "coordinated" else postgres_server_no_prepared
    table = f"connect_{uuid.uuid4().hex[:8]}"
    conn = server.connect()
    with conn, conn.cursor() as cur:
        cur.execute(f'CREATE TABLE "{table}" (id bigint PRIMARY KEY, payload text NOT NULL)')
    conn.close()
    written = write_input(tmp_path / "in", 3)
    expected = [i for i in written if i % 10 != 7]
    if protocol == "coordinated":
        checkpoint = f"gs://{gcs_endpoint.new_bucket()}/chk"
    else:
        checkpoint = str(tmp_path / "chk")

    def sink() -> Any:
        return postgres_sink(
            "connect", table=table, dsn=server.dsn, protocol=protocol, bad_rows="dead_letter"
        )

    def visible() -> list[int]:
        return table_ids(server, table)

    def prepared() -> list[str]:
        return [g for g, _db in server.prepared_transactions() if ":connect." in g]

    def transform(df: Any) -> Any:
        from pyspark.sql import functions as sf

        poison = sf.when(sf.col("id") % 10 == 7, sf.lit(None)).otherwise(sf.col("payload"))
        return df.withColumn("payload", poison).repartition(2)

    _crash(connect_server, tmp_path, sink(), step, checkpoint, transform=transform)
    assert 0 < len(visible()) < len(expected), "the crash did not land inside the query"
    if protocol == "coordinated":
        assert prepared(), "a crash after the decision leaves prepared transactions"
        with pytest.MonkeyPatch.context() as env:
            for name, value in gcs_endpoint.environment().items():
                env.setenv(name, value)
            chk = open_store(checkpoint)
            (query,) = chk.list_directories("twophase/connect")
            decisions = chk.list(f"twophase/connect/{query}/batches")
            assert f"{1:020d}.decision.json" in decisions, "the decision is on the emulator"
            assert chk.list("offsets"), "Spark's own offset log is on the emulator"
    _run(connect_server, tmp_path, sink(), checkpoint, transform=transform)
    assert_exactly_once(visible(), expected)
    letters = list(sink().read_dead_letters())
    assert_exactly_once(
        [d.values()["id"] for d in letters], [i for i in written if i % 10 == 7], what="letters"
    )
    assert {d.error_class for d in letters} == {"not_null"}
    assert prepared() == []


@pytest.mark.integration
def test_kafka_sink_on_connect_is_exactly_once_across_a_server_crash(
    connect_server: SparkConnectServer, tmp_path: Path, kafka_broker: Any, make_topic: Any
) -> None:
    from tests.integration.kafka.kafka_support import read_all
    from twophase.connectors.kafka import KafkaSink

    topic = make_topic(partitions=2)
    expected = write_input(tmp_path / "in", 3)

    def sink() -> Any:
        return KafkaSink("connect", bootstrap_servers=kafka_broker.bootstrap_servers, topic=topic)

    def visible() -> list[int]:
        return [int(r.value) for r in read_all(kafka_broker.bootstrap_servers, topic)]

    def transform(df: Any) -> Any:
        return df.repartition(2).selectExpr("CAST(id AS STRING) AS value")

    _crash(connect_server, tmp_path, sink(), "phase1_done", transform=transform)
    assert 0 < len(visible()) < len(expected), "the crash did not land inside the query"
    _run(connect_server, tmp_path, sink(), transform=transform)
    assert_exactly_once(visible(), expected)


def test_a_sink_without_its_checkpoint_location_is_refused_on_connect(
    connect_server: SparkConnectServer, tmp_path: Path
) -> None:
    write_input(tmp_path / "in", 1)
    target = FakeTarget(tmp_path / "target")
    spark = connect_server.session()
    try:
        df = spark.readStream.schema("id long, payload string").parquet(str(tmp_path / "in"))
        query = (
            df.writeStream.foreachBatch(FakeSink("nochk", target))
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )
        # The error comes back by class, with its context, from the Connect server's worker.
        with pytest.raises(ConfigurationError) as caught:
            twophase.await_termination(query, 120)
        assert (caught.value.sink, caught.value.setting) == ("nochk", "checkpoint_location")
        assert caught.value.batch_id == 0
    finally:
        spark.stop()
    assert target.committed_rows() == []


def test_a_failed_task_on_connect_is_retried_and_written_once(
    connect_server: SparkConnectServer, tmp_path: Path
) -> None:
    # The markers protocol: the retried attempt must find no marker of its failed one, and commit
    # once.
    expected = write_input(tmp_path / "in", 2)
    target = FakeTarget(tmp_path / "target")
    fault = target.fail(
        "commit_with_marker", batch_id=1, partition_id=1, attempt=0, error="AbortRequiredError"
    )

    def transform(df: Any) -> Any:
        # And column names that SQL text reads otherwise: they cross as they are (issue 52).
        from pyspark.sql import functions as sf

        return df.select("id", *[sf.col("payload").alias(n) for n in ODD_NAMES]).repartition(2)

    _run(connect_server, tmp_path, FakeMarkerSink("retried", target), transform=transform)
    assert target.fired(fault) == 1, "the injected task failure did not fire"
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []
    assert {tuple(r) for r in target.committed_rows()} == {("id", *ODD_NAMES)}


@pytest.mark.integration
def test_cdc_on_connect_routes_a_keys_creates_and_deletes_to_one_transaction(
    connect_server: SparkConnectServer, tmp_path: Path, postgres_server: Any
) -> None:
    # Issue 17 under Connect: creates in one file, their deletes in another, one batch of two
    # partitions, no repartition. The sink routes by key in the Connect server's worker.
    import json

    from twophase.connectors.jdbc import postgres_sink

    source = tmp_path / "in"
    source.mkdir()
    changes = [{"id": k, "op": "c", "seq": 1} for k in range(60)]
    later = [{"id": k, "op": "d", "seq": 2} for k in range(50)]
    for name, rows in (("a", changes), ("b", later)):
        (source / f"{name}.json").write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = f"connect_cdc_{uuid.uuid4().hex[:8]}"
    sink = postgres_sink(
        "connect_cdc",
        table=table,
        dsn=postgres_server.dsn,
        protocol="coordinated",
        mode="cdc",
        key_columns=["id"],
        cdc_op_column="op",
        order_column="seq",
        create_table=True,
    )

    def start(spark: Any) -> Any:
        # Two small files are two partitions (tests/integration/jdbc/test_postgres_keyed.py checks
        # it in classic mode; the Connect server plans file scans the same way).
        df = spark.readStream.schema("id long, op string, seq long").json(str(source))
        return (
            twophase.write_stream(df, sink, checkpoint_location=str(tmp_path / "chk"))
            .trigger(availableNow=True)
            .start()
        )

    run_to_end(connect_server, start)
    assert sorted(table_ids(postgres_server, table)) == list(range(50, 60))


def test_a_skipped_replay_of_a_stateful_query_on_connect_commits_its_state(
    connect_server: SparkConnectServer, tmp_path: Path
) -> None:
    # The server dies after the sink recorded batch 1 committed and before Spark's commits/1: the
    # restart replays batch 1, which the sink skips without writing. The query keeps state (a
    # count by key), whose stores must still commit, or Spark 4.2+ fails the restart with
    # STATE_STORE_COMMIT_VALIDATION_FAILED (issue 53). One restart must finish the query.
    write_input(tmp_path / "in", 3)
    target = FakeTarget(tmp_path / "target")

    def counted(df: Any) -> Any:
        from pyspark.sql import functions as sf

        return df.groupBy((sf.col("id") % 5).alias("key")).count()

    _crash(
        connect_server,
        tmp_path,
        FakeSink("stateful", target),
        "recorded_committed",
        transform=counted,
        output_mode="update",
    )
    assert sorted({r["key"] for r in target.committed_rows()}) == [0, 1, 2, 3, 4]
    committed = len(target.committed())
    _run(
        connect_server,
        tmp_path,
        FakeSink("stateful", target),
        transform=counted,
        output_mode="update",
    )
    final = {r["key"]: r["count"] for r in target.committed_rows()}
    assert final == {k: 12 for k in range(5)}, final  # 60 ids (3 batches of 20), 12 a key
    assert len(target.committed()) > committed, "batch 2 was not written after the replay"

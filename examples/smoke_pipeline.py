"""Smoke pipeline: Kafka -> Spark Structured Streaming -> PostgreSQL, at least once, no twophase.

What it does: produces JSON order events to a new topic of the Kafka broker ``--bootstrap-servers``
names, and runs a streaming query that reads them with Spark's Kafka source and writes each
micro-batch to a new table of the PostgreSQL server ``--dsn`` names, from ``foreachBatch``,
without twophase. In the checkout, servers not named come from ``$TWOPHASE_KAFKA_BOOTSTRAP`` /
``$TWOPHASE_PG_DSN``, else are throwaway local ones. It then stops the query, produces more
events, restarts the query from the same checkpoint and shows that it resumes where it stopped.
Everything it started is stopped at the end, also on errors and Ctrl-C.

Assumptions: servers the example may create a topic and a table in (new names every run); or, for
throwaway ones, the checkout's development tools (``twophase_dev``) on a machine prepared by
``scripts/setup.sh`` (Java 17+, Maven, PostgreSQL binaries, the project's virtualenv): nothing
else needs to run, all ports are picked free on 127.0.0.1. Spark's Kafka connector: see
``_spark.py``.

Guarantees, and their limits: this is the *at-least-once* baseline. ``foreachBatch`` replays a
batch after a crash that came after the batch was written but before Spark recorded it as
committed. This pipeline survives that only because its write is idempotent (rows are keyed by
Kafka partition and offset, and inserted with ``ON CONFLICT DO NOTHING``). Targets and writes
without such a key -- appends, Kafka topics, aggregates -- need twophase's exactly-once sinks:
``examples/demo/orders_pipeline.py`` is the same kind of pipeline with them, and
``bash scripts/demo.sh`` kills it while it runs.

Run it: ``.venv/bin/python examples/smoke_pipeline.py`` in the checkout (``--help`` for the sizes).
Elsewhere, after ``pip install 'twophase[all]'`` (or the wheel), with ``_spark.py`` beside this
file: ``python smoke_pipeline.py --bootstrap-servers HOST:PORT --dsn DSN``, or with ``spark-submit
--packages org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark version>`` (``_2.12`` for PySpark
3.5) in place of ``python``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from _spark import servers, spark_session
from confluent_kafka import Producer


def produce(bootstrap: str, topic: str, first_id: int, count: int) -> None:
    """Send ``count`` order events with ids ``first_id ..``; fail if any is not acknowledged."""
    # Idempotence: a retried send is not written twice, so the topic holds each event once.
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failures: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for order_id in range(first_id, first_id + count):
        event = {"order_id": order_id, "amount_cents": (order_id * 37) % 10_000}
        producer.produce(
            topic,
            key=str(order_id).encode(),
            value=json.dumps(event).encode(),
            on_delivery=on_delivery,
        )
        producer.poll(0)
    remaining = producer.flush(60)
    if remaining or failures:
        raise RuntimeError(f"{remaining} events unsent, {len(failures)} failed: {failures[:3]}")


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the input topic (brokers may refuse to create topics on first use)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions)])[topic].result(timeout=60)


def create_table(dsn: str, table: str) -> None:
    """Create the target table; its key makes replayed batches harmless."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                f"""CREATE TABLE {table} (
                    kafka_partition integer NOT NULL,
                    kafka_offset bigint NOT NULL,
                    order_id bigint NOT NULL,
                    amount_cents integer NOT NULL,
                    batch_id bigint NOT NULL,
                    PRIMARY KEY (kafka_partition, kafka_offset))"""
            )
    finally:
        conn.close()


def make_batch_writer(dsn: str, table: str, batches: list[tuple[int, int]]) -> Any:
    """Return the ``foreachBatch`` function: one PostgreSQL transaction per micro-batch."""
    import psycopg2
    from psycopg2.extras import execute_values

    def write_batch(batch_df: Any, batch_id: int) -> None:
        # Runs on the driver once per micro-batch (again for a replayed batch). The batch is small
        # here, so it is collected; a real sink writes from the executors (what twophase does).
        rows = [
            (r.partition, r.offset, r.order_id, r.amount_cents, batch_id)
            for r in batch_df.select("partition", "offset", "order_id", "amount_cents").collect()
        ]
        conn = psycopg2.connect(dsn)
        try:
            with conn, conn.cursor() as cur:  # commits on success, rolls back on error
                execute_values(
                    cur,
                    f"INSERT INTO {table} (kafka_partition, kafka_offset, order_id, amount_cents,"
                    " batch_id) VALUES %s ON CONFLICT DO NOTHING",
                    rows,
                )
        finally:
            conn.close()
        batches.append((batch_id, len(rows)))

    return write_batch


def run_query(
    spark: Any, bootstrap: str, topic: str, checkpoint: Path, writer: Any, rate: int
) -> None:
    """Process everything available now, in batches of at most ``rate`` records, then stop."""
    from pyspark.sql import functions as sf

    schema = "order_id BIGINT, amount_cents INT"
    events = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        # A new checkpoint starts at the beginning of the topic; a restart resumes from the
        # offsets recorded in the checkpoint, whatever this says.
        .option("startingOffsets", "earliest")
        # Several small batches instead of one big one, to show batch ids advancing.
        .option("maxOffsetsPerTrigger", rate)
        # Fail loudly if records were deleted before being read, instead of silently skipping.
        .option("failOnDataLoss", "true")
        .load()
        .select(
            "partition",
            "offset",
            sf.from_json(sf.col("value").cast("string"), schema).alias("event"),
        )
        .select("partition", "offset", "event.order_id", "event.amount_cents")
    )
    query = (
        events.writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    error = query.exception()
    if error is not None:
        raise RuntimeError(f"streaming query failed: {error}")


def count_rows(dsn: str, table: str) -> tuple[int, int, int]:
    """Return (rows, distinct order ids, distinct batches) in the target table."""
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT count(*), count(DISTINCT order_id), count(DISTINCT batch_id) FROM {table}"
            )
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def main(argv: list[str] | None = None) -> int:
    """Run the pipeline; return 0 if every event landed exactly once in the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1000, help="events in each of the two waves")
    parser.add_argument("--partitions", type=int, default=3, help="partitions of the topic")
    parser.add_argument("--batch-size", type=int, default=250, help="maxOffsetsPerTrigger")
    parser.add_argument("--bootstrap-servers", help="use this Kafka broker")
    parser.add_argument("--dsn", help="use this PostgreSQL server (a superuser's DSN)")
    args = parser.parse_args(argv)
    if args.events < 1 or args.partitions < 1 or args.batch_size < 1:
        parser.error("--events, --partitions and --batch-size must be positive")

    work = Path(tempfile.mkdtemp(prefix="twophase-smoke-pipeline-"))
    started = time.monotonic()
    print(f"Logs and checkpoint under {work}")
    run = uuid.uuid4().hex[:8]
    topic, table = f"orders-{run}", f"smoke_orders_{run}"  # new every run: servers may be reused
    with servers(args.bootstrap_servers, args.dsn, work / "logs") as (bootstrap, dsn):
        print(f"Kafka {bootstrap}, PostgreSQL {dsn}")
        create_topic(bootstrap, topic, args.partitions)
        create_table(dsn, table)
        spark = spark_session("twophase-smoke-pipeline", kafka=True)
        try:
            batches: list[tuple[int, int]] = []
            writer = make_batch_writer(dsn, table, batches)
            checkpoint = work / "checkpoint"
            for wave in (1, 2):
                produce(bootstrap, topic, (wave - 1) * args.events, args.events)
                before = len(batches)
                run_query(spark, bootstrap, topic, checkpoint, writer, args.batch_size)
                for batch_id, size in batches[before:]:
                    print(f"  wave {wave}: batch {batch_id} wrote {size} rows")
        finally:
            spark.stop()
        rows, distinct_ids, distinct_batches = count_rows(dsn, table)
    expected = 2 * args.events
    print(
        f"Table {table}: {rows} rows, {distinct_ids} distinct orders, {distinct_batches} batches "
        f"(expected {expected} orders) in {time.monotonic() - started:.1f} s"
    )
    if rows != expected or distinct_ids != expected:
        print("MISMATCH: some events are missing or duplicated", file=sys.stderr)
        return 1
    print("OK: every event is in the table exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())

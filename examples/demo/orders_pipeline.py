"""Orders pipeline: Kafka -> Spark -> PostgreSQL and Kafka, exactly once (the flagship example).

What it does: reads JSON order events from a Kafka topic with Spark's Kafka source, parses them,
enriches them in Python (VAT by country, a size class), and runs three streaming queries over the
same events in one Spark driver:

* ``totals``: per-customer running totals (a keyed, stateful aggregation) upserted into the
  PostgreSQL table ``<schema>.customer_totals`` by :func:`twophase.connectors.jdbc.postgres_sink`
  with the coordinated protocol (``PREPARE TRANSACTION`` on the executors, ``COMMIT PREPARED``
  from the driver);
* ``enriched``: every enriched event published to a Kafka topic by
  :class:`twophase.connectors.kafka.KafkaSink` (one Kafka transaction per partition, with a marker);
* ``naive`` (unless ``--no-naive``): the same enriched events appended to
  ``<schema>.order_events_naive`` by a plain ``foreachBatch`` function, one ``INSERT`` transaction
  per partition, no twophase -- the baseline the other two are compared with.

Each query runs until the input present at its start is consumed (``availableNow``), then the
driver exits 0. ``examples/demo/crash_demo.py`` (``bash scripts/demo.sh``) runs this driver as a
subprocess, SIGKILLs it at random points and restarts it from its checkpoints; ``--check`` runs it
once, uninterrupted, on a small generated input and verifies the result.

Assumptions: a Kafka broker (``--bootstrap-servers``) holding the input topic, a PostgreSQL server
(``--dsn``) with ``max_prepared_transactions > 0`` holding the two tables (``--check`` creates the
topics, the tables and the input; in the checkout, where its development tools ``twophase_dev``
are, it starts throwaway servers when neither the options nor ``$TWOPHASE_KAFKA_BOOTSTRAP`` /
``$TWOPHASE_PG_DSN`` name any); Spark's Kafka connector (see ``_spark.py``). The
pipeline is deterministic per micro-batch: a replayed batch reads the same Kafka offsets and the
same aggregation state, so it computes the same rows (the Kafka sink's marker protocol relies on
it for the partitions it already committed).

Guarantees, and their limits:

* ``customer_totals`` holds, for every customer, the totals of exactly the events processed so
  far: each batch's upserts become visible all at once or not at all, a batch is never applied
  twice, whatever process dies when;
* a ``read_committed`` consumer of the output topic sees every enriched event exactly once
  (partitions of one batch may appear one after the other);
* the naive table gets every event *at least* once: a batch replayed after a crash, or a task
  retried after its partition committed, inserts its rows again. Its duplicates are the point.

Run the crash demo with ``bash scripts/demo.sh``; this driver alone with
``.venv/bin/python examples/demo/orders_pipeline.py --check``. Outside the checkout, after ``pip
install 'twophase[all]'`` (or the wheel), with ``_spark.py`` in the folder above this file's:
``python orders_pipeline.py --check --bootstrap-servers HOST:PORT --dsn DSN``; or with
``spark-submit --master 'local[2,4]' --packages
org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark version>`` (``_2.12`` for PySpark 3.5) in
place of ``python``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The examples' shared helper, examples/_spark.py, one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _spark import servers, spark_session

import twophase
import twophase.errors
from twophase.connectors.jdbc import postgres_sink
from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError, TwoPhaseError

#: Value-added tax by country, in percent: the enrichment step's reference data.
VAT_PERCENT = {"DE": 19, "ES": 21, "FR": 20, "IT": 22, "NL": 21, "PL": 23}
#: Orders of at least this amount are "large".
LARGE_CENTS = 20_000
#: JSON fields of an input event (what the producer writes).
EVENT_SCHEMA = (
    "event_id BIGINT, order_id BIGINT, customer_id STRING, country STRING, "
    "amount_cents BIGINT, ts_ms BIGINT"
)
#: Columns after enrichment (the schema of the Python step's output).
ENRICHED_SCHEMA = (
    "event_id long, order_id long, customer_id string, country string, amount_cents long, "
    "vat_cents long, size string"
)
#: Lines the driver prints for the naive query (the twophase sinks log their own metrics line).
NAIVE_LINE = "naive batch={batch} rows={rows}"


# ------------------------------------------------------------------------------------ the input


def generate_events(count: int, customers: int, seed: int) -> list[dict[str, Any]]:
    """Return ``count`` order events for ``customers`` customers, the same for the same seed."""
    rng = random.Random(seed)
    countries = sorted(VAT_PERCENT)
    home = {c: rng.choice(countries) for c in range(customers)}
    events = []
    for event_id in range(count):
        customer = rng.randrange(customers)
        events.append(
            {
                "event_id": event_id,
                "order_id": 100_000 + event_id,
                "customer_id": f"c{customer:04d}",
                "country": home[customer],
                "amount_cents": rng.randrange(100, 50_000),
                "ts_ms": 1_700_000_000_000 + event_id * 250,
            }
        )
    return events


def expected_totals(events: Sequence[dict[str, Any]]) -> dict[str, tuple[int, int, int, int]]:
    """Return customer id -> (orders, total_cents, vat_cents, last_event_id) after ``events``."""
    totals: dict[str, tuple[int, int, int, int]] = {}
    for e in events:
        orders, total, vat, last = totals.get(e["customer_id"], (0, 0, 0, -1))
        vat_cents = e["amount_cents"] * VAT_PERCENT[e["country"]] // 100
        totals[e["customer_id"]] = (
            orders + 1,
            total + e["amount_cents"],
            vat + vat_cents,
            max(last, e["event_id"]),
        )
    return totals


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    """Create the topics (name -> partitions) that do not exist yet."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(t, num_partitions=p) for t, p in topics.items() if t not in existing]
    for name, future in admin.create_topics(new, operation_timeout=30).items():
        future.result(timeout=60)  # raises KafkaException with the broker's reason
        _wait_for_leaders(admin, name)


def _wait_for_leaders(admin: Any, topic: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        meta = admin.list_topics(topic, timeout=5).topics.get(topic)
        if meta and meta.error is None and all(p.leader >= 0 for p in meta.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} has no leader for every partition after {timeout} s")


_quiet_kafka_log = logging.getLogger("orders_pipeline.librdkafka")
_quiet_kafka_log.setLevel(logging.ERROR)


def produce_events(bootstrap: str, topic: str, events: Sequence[dict[str, Any]]) -> None:
    """Write the events to ``topic``, keyed by customer; fail if any is not acknowledged."""
    from confluent_kafka import Producer

    # Idempotence: a send retried by the client is not written twice, so the topic holds each
    # event exactly once -- the "records in" every sink is compared with.
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            # librdkafka's own log lines go to Python logging; its warnings about a broker that
            # is still starting ("Coordinator load in progress: retrying") are retried anyway.
            "logger": _quiet_kafka_log,
        }
    )
    failed: list[str] = []
    for e in events:
        producer.produce(
            topic,
            key=e["customer_id"].encode(),
            value=json.dumps(e).encode(),
            on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
        )
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"could not write the input events: {failed[:3]}")


def create_tables(dsn: str, schema: str) -> None:
    """Create ``schema`` with the two target tables (the totals table needs its primary key)."""
    import psycopg2
    from psycopg2 import sql

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        conn.autocommit = True
        s = sql.Identifier(schema)
        cur.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(s))
        # Upsert mode needs a unique index on exactly key_columns: ON CONFLICT uses it.
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.customer_totals (customer_id text PRIMARY KEY, "
                "orders bigint NOT NULL, total_cents bigint NOT NULL, vat_cents bigint NOT NULL, "
                "last_event_id bigint NOT NULL)"
            ).format(s)
        )
        # No key on purpose: what a plain append table looks like.
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {}.order_events_naive (event_id bigint, "
                "order_id bigint, customer_id text, amount_cents bigint, vat_cents bigint, "
                "batch_id bigint)"
            ).format(s)
        )


# ------------------------------------------------------------------------------------ the pipeline


@dataclass
class PipelineConfig:
    """Where the pipeline reads and writes."""

    bootstrap: str
    dsn: str
    topic: str
    out_topic: str
    schema: str
    checkpoints: Path
    batch_size: int = 250
    naive: bool = True
    #: Test hook: the first Python worker that finds this file claims it and SIGKILLs itself.
    kill_worker_file: str | None = None
    #: The twophase sinks, by query name, once started (for ``twophase.batch_metrics``).
    sinks: dict[str, Any] = field(default_factory=dict)


def enrich_batches(
    batches: Iterator[Any], kill_worker_file: str | None, query: str = ""
) -> Iterator[Any]:
    """Enrich events (the Python ``mapInArrow`` step): VAT by country and a size class.

    Runs on the executors. ``kill_worker_file`` is the crash demo's hook: when that file exists,
    the first worker to rename it away SIGKILLs itself mid-task, which Spark sees as a failed task
    and retries (the rename is atomic, so exactly one worker dies however many race for it).
    """
    import pyarrow as pa

    for batch in batches:
        if kill_worker_file and os.path.exists(kill_worker_file):
            claimed = f"{kill_worker_file}.claimed"
            with contextlib.suppress(OSError):  # another worker won the race
                os.rename(kill_worker_file, claimed)
                Path(claimed).write_text(json.dumps({"pid": os.getpid(), "query": query}))
                os.kill(os.getpid(), signal.SIGKILL)
        amounts = batch.column("amount_cents").to_pylist()
        countries = batch.column("country").to_pylist()
        vat = [a * VAT_PERCENT.get(c, 0) // 100 for a, c in zip(amounts, countries, strict=True)]
        size = ["large" if a >= LARGE_CENTS else "small" for a in amounts]
        yield pa.RecordBatch.from_arrays(
            [
                batch.column("event_id"),
                batch.column("order_id"),
                batch.column("customer_id"),
                batch.column("country"),
                batch.column("amount_cents"),
                pa.array(vat, pa.int64()),
                pa.array(size, pa.string()),
            ],
            names=[
                "event_id",
                "order_id",
                "customer_id",
                "country",
                "amount_cents",
                "vat_cents",
                "size",
            ],
        )


def enriched_events(spark: Any, cfg: PipelineConfig, query: str) -> Any:
    """Kafka source -> parsed events -> enriched events (a streaming DataFrame)."""
    from pyspark.sql import functions as f

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", cfg.bootstrap)
        .option("subscribe", cfg.topic)
        # A new checkpoint starts at the beginning of the topic; a restart resumes from the
        # offsets recorded in its checkpoint, whatever this says.
        .option("startingOffsets", "earliest")
        # Several small micro-batches instead of one: more batches to crash in. A replayed batch
        # reads exactly the offsets recorded for it, so it is deterministic.
        .option("maxOffsetsPerTrigger", cfg.batch_size)
        # Stop loudly if input was deleted before being read, instead of silently skipping it.
        .option("failOnDataLoss", "true")
        .load()
    )
    events = raw.select(f.from_json(f.col("value").cast("string"), EVENT_SCHEMA).alias("e")).select(
        "e.*"
    )
    # A value that is not an event (not JSON, or without an id) cannot be attributed: drop it.
    events = events.where(f.col("event_id").isNotNull() & f.col("customer_id").isNotNull())
    kill_file = cfg.kill_worker_file
    return events.mapInArrow(lambda it: enrich_batches(it, kill_file, query), ENRICHED_SCHEMA)


def start_totals(spark: Any, cfg: PipelineConfig) -> Any:
    """Per-customer running totals -> PostgreSQL upsert, the coordinated protocol."""
    from pyspark.sql import functions as f

    totals = (
        enriched_events(spark, cfg, "totals")
        .groupBy("customer_id")
        .agg(
            f.count("*").alias("orders"),
            f.sum("amount_cents").alias("total_cents"),
            f.sum("vat_cents").alias("vat_cents"),
            f.max("event_id").alias("last_event_id"),
        )
    )
    sink = postgres_sink(
        "orders_totals",  # stable: part of every transaction id and of the checkpoint log
        table=(cfg.schema, "customer_totals"),
        dsn=cfg.dsn,
        mode="upsert",  # a customer's row is replaced by its newest totals
        key_columns=["customer_id"],  # the table's primary key
        # Pinned, not "auto": a server reconfigured between two runs must not switch protocols
        # under the same checkpoint; fails at once if the server cannot prepare.
        protocol="coordinated",
        lock_timeout=10,  # a key is in one partition (groupBy), so no lock should ever wait long
    )
    cfg.sinks["totals"] = sink
    return (
        twophase.write_stream(
            totals,  # groupBy already put each customer in exactly one partition
            sink,
            checkpoint_location=str(cfg.checkpoints / "totals"),
            query_name="totals",
            trigger={"availableNow": True},  # consume what is there, then stop
        )
        # Each batch emits the customers it changed, with their new running totals.
        .outputMode("update")
        .start()
    )


def start_enriched(spark: Any, cfg: PipelineConfig) -> Any:
    """Every enriched event -> Kafka, through KafkaSink."""
    sink = KafkaSink(
        "orders_enriched",
        bootstrap_servers=cfg.bootstrap,
        topic=cfg.out_topic,
        # One control topic per output, named after it: markers of other runs never mix in.
        control_topic=f"{cfg.out_topic}-twophase-markers",
    )
    cfg.sinks["enriched"] = sink
    records = enriched_events(spark, cfg, "enriched").selectExpr(
        "customer_id AS key",  # a customer's events stay in one output partition, in order
        "to_json(struct(*)) AS value",
    )
    return twophase.write_stream(
        records,
        sink,
        checkpoint_location=str(cfg.checkpoints / "enriched"),
        query_name="enriched",
        trigger={"availableNow": True},
    ).start()


def naive_writer(dsn: str, schema: str, spark: Any) -> Any:
    """Return the baseline's ``foreachBatch`` function: plain INSERTs, a commit per partition."""
    counter = spark.sparkContext.accumulator(0)
    table = f'"{schema}".order_events_naive'

    def insert_partition(rows: Iterator[Any], batch_id: int) -> None:
        import psycopg2
        from psycopg2.extras import execute_values

        values = [
            (r.event_id, r.order_id, r.customer_id, r.amount_cents, r.vat_cents, batch_id)
            for r in rows
        ]
        if not values:
            return
        # One transaction per partition, as Spark's own JDBC writer does.
        with contextlib.closing(psycopg2.connect(dsn)) as conn, conn, conn.cursor() as cur:
            execute_values(
                cur,
                f"INSERT INTO {table} (event_id, order_id, customer_id, amount_cents,"
                " vat_cents, batch_id) VALUES %s",
                values,
            )
        counter.add(len(values))

    def write_batch(batch_df: Any, batch_id: int) -> None:
        before = counter.value
        batch_df.foreachPartition(lambda rows: insert_partition(rows, batch_id))
        print(NAIVE_LINE.format(batch=batch_id, rows=counter.value - before), flush=True)

    return write_batch


def start_naive(spark: Any, cfg: PipelineConfig) -> Any:
    """Append the same enriched events to PostgreSQL by a plain foreachBatch (at-least-once)."""
    return (
        enriched_events(spark, cfg, "naive")
        .writeStream.foreachBatch(naive_writer(cfg.dsn, cfg.schema, spark))
        .option("checkpointLocation", str(cfg.checkpoints / "naive"))
        .queryName("naive")
        .trigger(availableNow=True)
        .start()
    )


def query_error(name: str, exc: BaseException) -> Exception:
    """Return the error that failed query ``name``: the twophase one it carries, if any.

    A failed query reports PySpark's ``StreamingQueryException``; ``find_error`` takes the
    twophase error back out of it, by class, so that ``ConfigurationError``, ``DataError``... can
    be handled by class.
    """
    found = twophase.errors.find_error(exc)
    if found is not None:
        return found
    return RuntimeError(f"query {name} failed: {exc}")


def run_pipeline(cfg: PipelineConfig) -> None:
    """Start the queries in one Spark driver and wait until each has consumed its input."""
    # local[2,4]: two cores, and a failed task is tried up to 4 times (a lost Python worker is a
    # task failure Spark retries; plain local[2] would fail the query at the first one).
    spark = spark_session(
        "orders-pipeline",
        kafka=True,
        master="local[2,4]",
        # The partitions of the totals' state, so the totals sink's transactions per batch (fixed
        # in the checkpoint at the first run): Spark's default, 200, is for big data, and would
        # prepare 200 PostgreSQL transactions a batch.
        conf={"spark.sql.shuffle.partitions": "2"},
    )
    try:
        queries = [start_totals(spark, cfg), start_enriched(spark, cfg)]
        if cfg.naive:
            queries.append(start_naive(spark, cfg))
        print(f"driver pid={os.getpid()} started {len(queries)} queries", flush=True)
        while True:
            active = any(q.isActive for q in queries)  # before exception(): no failure slips by
            for q in queries:
                if q.exception() is not None:
                    raise query_error(q.name, q.exception())
            if not active:
                break
            time.sleep(0.5)
        print("driver finished: every query consumed its input", flush=True)
    finally:
        for q in spark.streams.active:
            q.stop()
        spark.stop()


# ------------------------------------------------------------------------------------ checking


@dataclass
class SinkResult:
    """What one sink holds, compared with the input."""

    name: str
    records_out: int
    duplicates: int
    lost: int
    detail: str

    @property
    def exact(self) -> bool:
        """Every input record is there exactly once."""
        return self.duplicates == 0 and self.lost == 0


def check_totals(dsn: str, schema: str, events: Sequence[dict[str, Any]]) -> SinkResult:
    """Compare ``customer_totals`` row by row with the totals computed from the input."""
    import psycopg2

    expected = expected_totals(events)
    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(
            f'SELECT customer_id, orders, total_cents, vat_cents, last_event_id FROM "{schema}"'
            ".customer_totals"
        )
        got = {r[0]: (int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in cur.fetchall()}
    counted = sum(v[0] for v in got.values())
    duplicates = lost = wrong = 0
    for customer in expected.keys() | got.keys():
        want, have = expected.get(customer, (0, 0, 0, -1)), got.get(customer, (0, 0, 0, -1))
        duplicates += max(0, have[0] - want[0])
        lost += max(0, want[0] - have[0])
        wrong += have != want
    detail = f"{len(got)} customer rows, {len(got) - wrong} equal to the expected totals"
    if wrong and not (duplicates or lost):
        lost = wrong  # right counts, wrong sums: some events were replaced by others
    return SinkResult("totals", counted, duplicates, lost, detail)


def read_topic(
    bootstrap: str, topic: str, isolation: str = "read_committed", field_name: str = "event_id"
) -> dict[int, int]:
    """Read ``topic`` to its end: ``field_name`` of each JSON record -> copies.

    ``isolation="read_committed"`` is what exactly-once is promised to: records of committed
    transactions only. ``"read_uncommitted"`` (Kafka's default) also returns the records of
    aborted transactions -- those of failed or killed attempts.
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"orders-check-{uuid.uuid4().hex}",  # never commits: any unique name
            "isolation.level": isolation,
            "enable.partition.eof": True,  # tells when a partition is read to its end
            "enable.auto.commit": False,
        }
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        copies: dict[int, int] = {}
        done: set[int] = set()
        while len(done) < len(partitions):
            msg = consumer.poll(10.0)
            if msg is None:
                raise RuntimeError(f"no record nor end of {topic} within 10 s")
            if msg.error():
                if msg.error().code() != KafkaError._PARTITION_EOF:
                    raise RuntimeError(msg.error().str())
                done.add(msg.partition())
                continue
            key = json.loads(msg.value())[field_name]
            copies[key] = copies.get(key, 0) + 1
        return copies
    finally:
        consumer.close()


def check_enriched(bootstrap: str, topic: str, events: Sequence[dict[str, Any]]) -> SinkResult:
    """Count every input event's copies in the output topic (read_committed)."""
    copies = read_topic(bootstrap, topic)
    ids = {e["event_id"] for e in events}
    duplicates = sum(n - 1 for n in copies.values() if n > 1) + sum(
        n for i, n in copies.items() if i not in ids
    )
    lost = len(ids - copies.keys())
    return SinkResult("enriched", sum(copies.values()), duplicates, lost, f"topic {topic}")


def check_naive(dsn: str, schema: str, events: Sequence[dict[str, Any]]) -> SinkResult:
    """Count every input event's rows in the naive table."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(f'SELECT count(*), count(DISTINCT event_id) FROM "{schema}".order_events_naive')
        rows, distinct = (int(v) for v in cur.fetchone())
    return SinkResult(
        "naive", rows, rows - distinct, len(events) - distinct, f"{distinct} distinct events"
    )


# ------------------------------------------------------------------------------------ servers


def check_prepared_transactions(dsn: str) -> None:
    """Fail early, with what to do, if the server cannot run the coordinated protocol."""
    import psycopg2

    with (
        contextlib.closing(psycopg2.connect(dsn, connect_timeout=10)) as conn,
        conn.cursor() as cur,
    ):
        cur.execute("SHOW max_prepared_transactions")
        value = int(cur.fetchone()[0])
    if value == 0:
        raise ConfigurationError(
            "this PostgreSQL server has max_prepared_transactions=0, the totals sink pins protocol "
            "A (coordinated); set it above 0 and restart the server, or use another server",
            setting="max_prepared_transactions",
        )


# ------------------------------------------------------------------------------------ command line


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap-servers", help="Kafka broker (default: see --check)")
    parser.add_argument("--dsn", help="PostgreSQL server, superuser or owner of --schema")
    parser.add_argument("--topic", help="input topic (JSON order events)")
    parser.add_argument("--out-topic", help="output topic of the Kafka sink")
    parser.add_argument("--schema", help="PostgreSQL schema holding the two tables")
    parser.add_argument("--checkpoints", type=Path, help="directory of the queries' checkpoints")
    parser.add_argument("--batch-size", type=int, default=250, help="maxOffsetsPerTrigger")
    parser.add_argument("--no-naive", dest="naive", action="store_false", help="no baseline query")
    parser.add_argument("--kill-worker-file", help=argparse.SUPPRESS)  # the crash demo's hook
    parser.add_argument(
        "--check",
        action="store_true",
        help="create topics, tables and a small input, run once, verify (servers: the options, "
        "else $TWOPHASE_KAFKA_BOOTSTRAP / $TWOPHASE_PG_DSN, else throwaway local ones)",
    )
    parser.add_argument("--events", type=int, default=600, help="--check: events to generate")
    return parser


def _check(args: argparse.Namespace) -> int:
    run = uuid.uuid4().hex[:8]
    work = Path(tempfile.mkdtemp(prefix="twophase-orders-"))
    events = generate_events(args.events, customers=20, seed=1)
    with servers(args.bootstrap_servers, args.dsn, work / "logs") as (bootstrap, dsn):
        check_prepared_transactions(dsn)
        cfg = PipelineConfig(
            bootstrap=bootstrap,
            dsn=dsn,
            topic=f"orders-{run}",
            out_topic=f"orders-enriched-{run}",
            schema=f"orders_{run}",
            checkpoints=work / "checkpoints",
            batch_size=args.batch_size,
            naive=args.naive,
        )
        create_topics(bootstrap, {cfg.topic: 3, cfg.out_topic: 3})
        create_tables(dsn, cfg.schema)
        produce_events(bootstrap, cfg.topic, events)
        run_pipeline(cfg)
        results = [
            check_totals(dsn, cfg.schema, events),
            check_enriched(bootstrap, cfg.out_topic, events),
        ]
        if args.naive:
            results.append(check_naive(dsn, cfg.schema, events))
    for name, sink in cfg.sinks.items():  # this driver's metrics of each twophase sink
        history = twophase.batch_metrics(sink)
        print(
            f"{name:>9}: {len(history)} batches, {sum(m.rows for m in history)} rows written, "
            f"{sum(m.transactions for m in history)} transactions"
        )
    for r in results:
        print(
            f"{r.name:>9}: {r.records_out} of {len(events)} records out, {r.duplicates} "
            f"duplicates, {r.lost} lost ({r.detail})"
        )
    bad = [r.name for r in results if r.name != "naive" and not r.exact]
    print("FAILED: not exactly once: " + ", ".join(bad) if bad else "OK: exactly once")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    """Run the driver (or ``--check``); return the process exit status."""
    args = _parser().parse_args(argv)
    if args.batch_size < 1 or args.events < 1:
        _parser().error("--batch-size and --events must be positive")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # One line per batch and sink (twophase sink=... outcome=... skipped=... recovered_...):
    # what the crash demo reads to show recoveries.
    metrics = logging.getLogger("twophase.metrics")
    metrics.setLevel(logging.INFO)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(message)s"))
    metrics.addHandler(handler)
    metrics.propagate = False
    try:
        if args.check:
            return _check(args)
        missing = [
            o
            for o in ("bootstrap_servers", "dsn", "topic", "out_topic", "schema", "checkpoints")
            if getattr(args, o) is None
        ]
        if missing:
            _parser().error(
                "without --check, pass " + ", ".join("--" + m.replace("_", "-") for m in missing)
            )
        check_prepared_transactions(args.dsn)
        run_pipeline(
            PipelineConfig(
                bootstrap=args.bootstrap_servers,
                dsn=args.dsn,
                topic=args.topic,
                out_topic=args.out_topic,
                schema=args.schema,
                checkpoints=args.checkpoints,
                batch_size=args.batch_size,
                naive=args.naive,
                kill_worker_file=args.kill_worker_file,
            )
        )
        return 0
    except ConfigurationError as exc:  # nothing was written: fix the setting and rerun
        print(f"configuration problem: {exc}", file=sys.stderr)
        return 2
    except TwoPhaseError as exc:  # e.g. the target stayed down: rerun, recovery finishes the batch
        print(f"a sink failed, restart from the checkpoints to finish: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:  # a query failed (its exception says why)
        print(str(exc), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

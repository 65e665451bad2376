"""Debezium change events from Kafka applied to PostgreSQL, exactly once, with the CDC mode.

What it does: writes a seeded stream of change events for a ``customers`` table to a Kafka topic,
in Debezium's format -- a snapshot (``op`` ``r``), then creates (``c``), updates (``u``) and
deletes (``d``, each followed by a tombstone, as Debezium emits by default), every event with
``before``, ``after``, ``source`` (whose ``lsn`` is the position in the source database's log) and
``ts_ms``. A Structured Streaming query reads the topic with Spark's Kafka source, flattens each
event to ``(id, name, email, lsn, source_ts_ms, op)``, and applies it to a PostgreSQL table with
:func:`twophase.connectors.jdbc.postgres_sink` in ``mode="cdc"``. It runs twice: the snapshot and
half of the changes, then -- restarted from the same checkpoint -- the rest. After each run the
table is compared row by row with the state obtained by applying the same events one by one.

Assumptions:

* the events are Debezium's JSON (``key.converter`` / ``value.converter`` JsonConverter), with or
  without the ``schema``/``payload`` envelope (``schemas.enable``): both are read;
* every ``c``/``r``/``u`` event carries the full row in ``after`` (Debezium does), a ``d`` event
  the key in ``before``; the topic is keyed by the primary key, as Debezium keys it, so the changes
  of one row are in one Kafka partition, in log order;
* a Kafka broker and a PostgreSQL server: ``--bootstrap-servers`` / ``--dsn``; else, in the
  checkout (its development tools, ``twophase_dev``, set up by ``scripts/setup.sh``), the ones
  ``$TWOPHASE_KAFKA_BOOTSTRAP`` / ``$TWOPHASE_PG_DSN`` name, or throwaway local ones;
* Spark's Kafka connector: see ``_spark.py``.

Guarantees, and their limits:

* every change is applied exactly once, in ``lsn`` order per row, across restarts: the table ends
  up equal to the source table. Within a micro-batch the connector keeps the change with the
  highest ``lsn`` of each key (a ``d`` deletes the row), which is the same result as applying them
  one by one because each event carries the whole row. The sink routes all changes of a key to
  one transaction itself (no ``repartition`` needed): a create in one Spark partition and its
  delete in another can never both survive;
* with ``max_prepared_transactions > 0`` (the coordinated protocol) each micro-batch is applied
  all at once or not at all; on a server without prepared transactions (the markers protocol)
  partition by partition;
* tombstones (a key with a null value) only tell Kafka's log compaction to forget the key: they
  are skipped. A truncate event (``op`` ``t``) has no key and cannot be applied row by row: it
  fails the batch with a ``DataError`` naming the ``op`` column before anything of the batch is
  written; schema changes are not handled (the table is created once, up front).

Run: ``.venv/bin/python examples/kafka_debezium_cdc.py`` in the checkout (``--help`` for the
sizes). Elsewhere, after ``pip install 'twophase[all]'`` (or the wheel), with ``_spark.py`` beside
this file: ``python kafka_debezium_cdc.py --bootstrap-servers HOST:PORT --dsn DSN``, or with
``spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<PySpark version>`` (``_2.12``
for PySpark 3.5) in place of ``python``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import random
import sys
import tempfile
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from _spark import servers, spark_session

import twophase
from twophase.connectors.jdbc import postgres_sink
from twophase.errors import ConfigurationError, DataError, NondeterministicBatchError, TwoPhaseError

#: The Debezium payload (value.converter JsonConverter); the row images are this table's columns.
ROW = "struct<id: bigint, name: string, email: string>"
PAYLOAD = (
    f"before {ROW}, after {ROW}, op string, ts_ms bigint, source struct<lsn: bigint, ts_ms: bigint>"
)
#: With schemas.enable=true, Debezium wraps the payload in {"schema": ..., "payload": ...}.
VALUE_SCHEMA = f"{PAYLOAD}, payload struct<{PAYLOAD}>"
Event = tuple[int, dict[str, Any] | None]


def debezium_events(customers: int, changes: int, seed: int) -> list[Event]:
    """Return (key id, value or None for a tombstone) in log order: a snapshot, then changes."""
    rng = random.Random(seed)
    lsn, ts = 1_000, 1_700_000_000_000
    rows: dict[int, dict[str, Any]] = {}
    out: list[Event] = []

    def event(op: str, before: Any, after: Any) -> dict[str, Any]:
        nonlocal lsn, ts
        lsn, ts = lsn + rng.randrange(8, 80), ts + rng.randrange(1, 500)
        return {
            "before": before,
            "after": after,
            "source": {
                "version": "2.7.0.Final",
                "connector": "postgresql",
                "name": "shop",
                "db": "shop",
                "schema": "public",
                "table": "customers",
                "snapshot": "true" if op == "r" else "false",
                "lsn": lsn,
                "ts_ms": ts,
            },
            "op": op,
            "ts_ms": ts + 5,  # when Debezium processed it
        }

    for i in range(1, customers + 1):
        rows[i] = {"id": i, "name": f"customer {i}", "email": f"c{i}@example.com"}
        out.append((i, event("r", None, dict(rows[i]))))
    next_id = customers + 1
    for n in range(changes):
        roll = rng.random()
        if roll < 0.2 or not rows:
            key = next_id if rng.random() < 0.8 else rng.randrange(1, next_id)  # new, or re-created
            next_id = max(next_id, key + 1)
            if key in rows:
                continue
            rows[key] = {"id": key, "name": f"customer {key}", "email": f"c{key}@example.com"}
            out.append((key, event("c", None, dict(rows[key]))))
        elif roll < 0.8:
            key = rng.choice(sorted(rows))
            before = dict(rows[key])
            rows[key]["email"] = f"c{key}.v{n}@example.org"
            if rng.random() < 0.3:
                rows[key]["name"] = f"customer {key} (renamed {n})"
            out.append((key, event("u", before, dict(rows[key]))))
        else:
            key = rng.choice(sorted(rows))
            out.append((key, event("d", rows.pop(key), None)))
            out.append((key, None))  # the tombstone Debezium sends after a delete
    return out


def apply_one_by_one(events: Sequence[Event]) -> dict[int, tuple[Any, ...]]:
    """Return the table the events describe: id -> (name, email, lsn), applied in order."""
    table: dict[int, tuple[Any, ...]] = {}
    for key, value in events:
        if value is None:
            continue
        if value["op"] == "d":
            table.pop(key, None)
        else:
            a = value["after"]
            table[key] = (a["name"], a["email"], value["source"]["lsn"])
    return table


def produce(bootstrap: str, topic: str, events: Sequence[Event]) -> None:
    """Write the events as Debezium does: JSON key ``{"id": ...}``, JSON value or a tombstone."""
    from confluent_kafka import Producer

    # Idempotence: a client retry does not write an event twice (the topic is the "source log").
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failed: list[str] = []
    for key, value in events:
        producer.produce(
            topic,
            key=json.dumps({"id": key}).encode(),
            value=None if value is None else json.dumps(value).encode(),
            on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
        )
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"could not write the change events: {failed[:3]}")


def changes(spark: Any, bootstrap: str, topic: str) -> Any:
    """Kafka topic of Debezium events -> one row per change: key, after-image, lsn, op."""
    from pyspark.sql import functions as f

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")  # a new checkpoint applies the whole log
        .option("maxOffsetsPerTrigger", 40)  # small batches: several micro-batches to restart in
        .option("failOnDataLoss", "true")  # a compacted-away change must stop the query, loudly
        .load()
    )
    events = (
        raw.where(f.col("value").isNotNull())  # tombstones: only for Kafka's log compaction
        .select(f.from_json(f.col("value").cast("string"), VALUE_SCHEMA).alias("v"))
        .select(
            # schemas.enable=true nests everything under "payload"
            *(
                f.coalesce(f.col(f"v.payload.{c}"), f.col(f"v.{c}")).alias(c)
                for c in ("before", "after", "op", "source")
            )
        )
    )
    return events.select(
        f.coalesce(f.col("after.id"), f.col("before.id")).alias("id"),
        f.col("after.name").alias("name"),  # NULL for a delete: only the key matters then
        f.col("after.email").alias("email"),
        f.col("source.lsn").alias("lsn"),
        f.col("source.ts_ms").alias("source_ts_ms"),
        f.col("op"),
    )


def run_once(spark: Any, bootstrap: str, topic: str, dsn: str, table: str, checkpoint: Path) -> Any:
    """Apply every change in the topic now, then stop; return the sink (for its metrics)."""
    sink = postgres_sink(
        "customers_cdc",  # stable: part of every transaction id and of the checkpoint log
        table=table,
        dsn=dsn,
        mode="cdc",
        key_columns=["id"],  # the table's primary key
        cdc_op_column="op",  # c / r / u / d; not a column of the table
        order_column="lsn",  # several changes of one row in a batch: the latest in the log wins
        # "auto": coordinated where the server can prepare, markers elsewhere; pin it in production.
        protocol="auto",
    )
    query = twophase.write_stream(
        changes(spark, bootstrap, topic),  # the sink routes all changes of a row together
        sink,
        checkpoint_location=str(checkpoint),
        trigger={"availableNow": True},
    ).start()
    try:
        twophase.await_termination(query)
    finally:
        query.stop()
    for m in twophase.batch_metrics(sink):
        print(f"  batch {m.batch_id}: {m.outcome}, {m.rows} changes")
    return sink


def compare(dsn: str, table: str, expected: dict[int, tuple[Any, ...]]) -> list[str]:
    """Compare the table row by row with ``expected``; return the differences."""
    import psycopg2

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(f"SELECT id, name, email, lsn FROM {table}")
        got = {r[0]: tuple(r[1:]) for r in cur.fetchall()}
    problems = []
    for key in sorted(expected.keys() | got.keys()):
        if got.get(key) != expected.get(key):
            problems.append(
                f"id {key}: table has {got.get(key)}, the source has {expected.get(key)}"
            )
    return problems


def main(argv: list[str] | None = None) -> int:
    """Run the example; return 0 if the table equals the source after each run."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="Kafka broker (default: see the docstring)")
    parser.add_argument("--dsn", help="PostgreSQL server (default: see the docstring)")
    parser.add_argument("--customers", type=int, default=30, help="rows in the snapshot")
    parser.add_argument("--changes", type=int, default=150, help="changes after the snapshot")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument(
        "--truncate", action="store_true", help="end with a truncate event (shows the error case)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("twophase.connectors.jdbc").setLevel(logging.INFO)  # the protocol choice

    import psycopg2
    from confluent_kafka.admin import AdminClient, NewTopic

    run = uuid.uuid4().hex[:8]
    topic, table = f"shop.public.customers-{run}", f"customers_{run}"
    events = debezium_events(args.customers, args.changes, args.seed)
    if args.truncate:  # Debezium's truncate event: no key, no row images
        events.append((0, {"before": None, "after": None, "op": "t", "source": {"lsn": 10**9}}))
    half = len(events) // 2
    spark = None
    try:
        with servers(args.bootstrap_servers, args.dsn) as (bootstrap, dsn):
            admin = AdminClient({"bootstrap.servers": bootstrap})
            # Several partitions: the changes of one key stay in one, in order (keyed records).
            admin.create_topics([NewTopic(topic, num_partitions=3)])[topic].result(timeout=60)
            with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
                conn.autocommit = True
                # The key must be the primary key (or a unique index): ON CONFLICT uses it;
                # order_column must be a column of the table.
                cur.execute(
                    f"CREATE TABLE {table} (id bigint PRIMARY KEY, name text NOT NULL, email text,"
                    " lsn bigint NOT NULL, source_ts_ms bigint)"
                )
            spark = spark_session("debezium-cdc-example", kafka=True)
            checkpoint = Path(tempfile.mkdtemp(prefix="twophase-cdc-")) / "checkpoint"
            parts = (
                ("the snapshot and the first changes", events[:half]),
                ("the rest", events[half:]),
            )
            applied: list[Event] = []
            for label, part in parts:
                produce(bootstrap, topic, part)
                applied.extend(part)
                print(
                    f"{label}: {len(part)} events, applied by a query started from the checkpoint"
                )
                run_once(spark, bootstrap, topic, dsn, table, checkpoint)
                expected = apply_one_by_one(applied)
                problems = compare(dsn, table, expected)
                if problems:
                    print("the table differs from the source:\n  " + "\n  ".join(problems[:10]))
                    return 1
                print(f"  {table} equals the source row by row ({len(expected)} rows)")
    except DataError as exc:  # e.g. a truncate ('t'): nothing of that batch was applied
        print(f"a change cannot be applied: {exc}", file=sys.stderr)
        print("fix the event or the table, then rerun: the query resumes at that batch")
        return 3
    except NondeterministicBatchError as exc:  # markers only; the Kafka source is deterministic
        print(f"replayed batch differs: {exc}", file=sys.stderr)
        return 4
    except ConfigurationError as exc:  # table, key or privilege problem: nothing was written
        print(f"configuration problem: {exc}", file=sys.stderr)
        return 2
    except TwoPhaseError as exc:  # e.g. PostgreSQL down: rerun, recovery finishes the batch
        print(f"the sink failed, rerun to resume from the checkpoint: {exc}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
    print("OK: every change applied exactly once, in log order")
    return 0


if __name__ == "__main__":
    sys.exit(main())

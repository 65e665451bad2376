"""Apply Debezium-style change events to a PostgreSQL table, exactly once.

What it does: writes Debezium-shaped change events (``op``, ``before``, ``after``,
``source.lsn``) as JSON-lines files, one file per micro-batch, and runs a Structured Streaming
query that flattens them to ``(id, name, email, lsn, op)`` and applies them to ``customers`` with
``mode="cdc"``: ``c`` (create), ``r`` (snapshot read) and ``u`` (update) upsert the row, ``d``
(delete) removes the key. Within a micro-batch the changes of one key are applied in ``lsn``
order, so the table ends up as if every event had been applied one by one.

Assumptions: a PostgreSQL server at ``--dsn`` (the table, ``customers`` or ``--table``, is created
there if missing); without ``--dsn``, a throwaway one started by the checkout's development tools
(``twophase_dev``, set up by ``scripts/setup.sh``). The
events come from files here; ``examples/kafka_debezium_cdc.py`` reads them from Kafka, as Debezium
writes them. Events carry full row images (Debezium's ``after``), as Debezium emits them.

Guarantees: exactly once per event, across restarts (the checkpoint holds the file offsets, the
sink's coordinator log holds the commit decisions). The sink routes all changes of one key to
one partition itself, whatever the input's partitioning; events with an unknown ``op`` (e.g.
``t``, truncate) fail the batch with a ``DataError`` naming the ``op`` column, and nothing of that
batch is applied (the coordinated protocol).

Run: ``.venv/bin/python examples/jdbc_cdc.py`` in the checkout. Elsewhere, ``pip install
'twophase[all]'`` (or the wheel), put ``_spark.py`` beside this file, and run ``python jdbc_cdc.py
--dsn DSN`` or ``spark-submit jdbc_cdc.py --dsn DSN``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _spark import require_dev_tools, spark_session

import twophase
from twophase.connectors.jdbc import postgres_sink
from twophase.errors import ConfigurationError, DataError, RetriableError, TwoPhaseError

EVENTS = [
    # batch 0: a snapshot of two customers
    [
        {"op": "r", "after": {"id": 1, "name": "Ada", "email": "ada@example.com"}, "lsn": 10},
        {"op": "r", "after": {"id": 2, "name": "Bob", "email": "bob@example.com"}, "lsn": 11},
    ],
    # batch 1: out of order on purpose: lsn decides, not arrival order
    [
        {"op": "u", "after": {"id": 1, "name": "Ada L.", "email": "ada@lovelace.org"}, "lsn": 21},
        {"op": "c", "after": {"id": 3, "name": "Cy", "email": "cy@example.com"}, "lsn": 20},
        {"op": "u", "after": {"id": 1, "name": "Ada", "email": "ada@old.example"}, "lsn": 20},
        {"op": "d", "before": {"id": 2}, "after": None, "lsn": 22},
    ],
    # batch 2: a key created and deleted in the same batch leaves nothing
    [
        {"op": "c", "after": {"id": 4, "name": "Dee", "email": "dee@example.com"}, "lsn": 30},
        {"op": "d", "before": {"id": 4}, "after": None, "lsn": 31},
    ],
]
EXPECTED = [(1, "Ada L.", "ada@lovelace.org", 21), (3, "Cy", "cy@example.com", 20)]


def write_events(source: Path) -> None:
    source.mkdir(parents=True, exist_ok=True)
    for batch, events in enumerate(EVENTS):
        path = source / f"changes-{batch:04d}.json"
        path.write_text("".join(json.dumps(e) + "\n" for e in events))
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))


def flatten(events: Any) -> Any:
    """Debezium envelope -> one row per change: the key, the after-image, lsn, op."""
    from pyspark.sql import functions as f

    return events.select(
        f.coalesce(f.col("after.id"), f.col("before.id")).alias("id"),
        f.col("after.name").alias("name"),
        f.col("after.email").alias("email"),
        f.col("lsn"),
        f.col("op"),
    )


@contextlib.contextmanager
def database(dsn: str | None) -> Iterator[str]:
    if dsn:
        yield dsn
        return
    require_dev_tools("a throwaway PostgreSQL server", instead="--dsn")
    from twophase_dev import PostgresServer

    with PostgresServer() as pg:
        yield pg.dsn


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dsn", help="use this PostgreSQL server instead of a throwaway one")
    parser.add_argument("--table", default="customers", help="target table (default: customers)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    import psycopg2

    work = Path(tempfile.mkdtemp(prefix="twophase-cdc-example-"))
    try:
        with database(args.dsn) as dsn:
            with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
                conn.autocommit = True
                # The key must be the primary key (or a unique index): ON CONFLICT uses it.
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {args.table} "
                    "(id bigint PRIMARY KEY, name text NOT NULL, email text, lsn bigint)"
                )
            write_events(work / "in")
            spark = spark_session("jdbc-cdc-example", kafka=False)
            try:
                schema = (
                    "op string, lsn long, before struct<id: long>, "
                    "after struct<id: long, name: string, email: string>"
                )
                changes = (
                    spark.readStream.schema(schema)
                    .option("maxFilesPerTrigger", 1)  # one file per micro-batch
                    .json(str(work / "in"))
                )
                sink = postgres_sink(
                    "customers_cdc",
                    table=args.table,
                    dsn=dsn,
                    mode="cdc",
                    key_columns=["id"],
                    cdc_op_column="op",  # c / r / u / d; not stored in the table
                    order_column="lsn",  # changes of one key in one batch: highest lsn wins
                )
                query = twophase.write_stream(
                    flatten(changes),  # no repartition needed: the sink routes rows by key
                    sink,
                    checkpoint_location=str(work / "checkpoint"),
                    trigger={"availableNow": True},
                ).start()
                twophase.await_termination(query)
            finally:
                spark.stop()
            with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
                cur.execute(f"SELECT id, name, email, lsn FROM {args.table} ORDER BY id")
                rows = cur.fetchall()
    except ConfigurationError as exc:
        print(f"configuration problem: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:
        print(f"bad change event: {exc}", file=sys.stderr)
        return 3
    except RetriableError as exc:
        print(f"PostgreSQL unavailable, rerun to resume: {exc}", file=sys.stderr)
        return 4
    except TwoPhaseError as exc:
        print(f"the sink failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.table}:", rows)
    if rows != EXPECTED:
        print(f"expected {EXPECTED}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Exactly-once upserts from a Spark stream into PostgreSQL, surviving a restart.

What it does: connects to PostgreSQL (``--dsn``, else a throwaway cluster), writes order updates as
Parquet files (one file per micro-batch), and runs a Structured Streaming query that upserts them
into ``orders`` with :func:`twophase.connectors.jdbc.postgres_sink`. It stops the query, adds
files, restarts it from the same checkpoint, and checks that every order holds its latest version
exactly once.

Assumptions: a PostgreSQL server at ``--dsn`` (the table, ``orders`` or ``--table``, is created
there if missing, and left behind); without ``--dsn``, the throwaway cluster is started by the
checkout's development tools (``twophase_dev``: a machine prepared by ``scripts/setup.sh``).

Guarantees, and their limits:

* with ``max_prepared_transactions > 0`` (the default here) the sink uses the coordinated
  protocol: each micro-batch becomes visible all at once or not at all, whatever fails and when;
* with ``--no-prepared`` the server cannot prepare and the sink uses the markers protocol:
  partitions commit one by one with a marker row, replays skip committed partitions, nothing is
  duplicated; a reader may see part of a batch for a moment;
* the rows of one order may sit in any partition: the sink routes every row of a key to one
  partition itself (``key_by``), so the highest ``version`` wins whatever the partitioning.

Run: ``.venv/bin/python examples/jdbc_upsert.py`` in the checkout (about a minute, most of it Spark
start-up). Elsewhere, after ``pip install 'twophase[all]'`` (or the wheel), with ``_spark.py``
beside this file: ``python jdbc_upsert.py --dsn DSN``, or ``spark-submit jdbc_upsert.py --dsn DSN``.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from _spark import require_dev_tools, spark_session

import twophase
from twophase.connectors.jdbc import postgres_sink
from twophase.errors import (
    CommitFailedError,
    ConfigurationError,
    DataError,
    NondeterministicBatchError,
    RetriableError,
    TwoPhaseError,
)

ORDERS = 200  # distinct order ids; every file updates each of them once


def write_updates(source: Path, first: int, count: int) -> None:
    """One Parquet file per micro-batch: version ``batch`` of every order."""
    source.mkdir(parents=True, exist_ok=True)
    for batch in range(first, first + count):
        ids = list(range(ORDERS))
        table = pa.table(
            {
                "order_id": pa.array(ids, pa.int64()),
                "status": [("new", "paid", "shipped", "delivered")[batch % 4]] * ORDERS,
                "amount_cents": pa.array([i * 10 + batch for i in ids], pa.int64()),
                "version": pa.array([batch] * ORDERS, pa.int64()),
            }
        )
        path = source / f"updates-{batch:04d}.parquet"
        pq.write_table(table, path)
        # File sources order files by modification time: make it follow the batch number.
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))


def run_query(spark: Any, source: Path, checkpoint: Path, dsn: str, table: str) -> None:
    """Run the query over every file present, one file per micro-batch, then stop."""
    sink = postgres_sink(
        "orders_upsert",  # stable name: part of every transaction id and of the checkpoint log
        table=table,
        dsn=dsn,
        mode="upsert",
        key_columns=["order_id"],  # the table's primary key (ON CONFLICT uses it)
        order_column="version",  # within a batch, the highest version of an order wins
        create_table=True,  # first run: create the table from the stream's schema
        lock_timeout=10,  # never wait long for a row lock
    )
    updates = (
        spark.readStream.schema("order_id long, status string, amount_cents long, version long")
        .option("maxFilesPerTrigger", 1)  # one file per micro-batch, for the demo
        .parquet(str(source))
    )
    query = twophase.write_stream(
        updates.repartition(4),  # any partitioning: the sink routes each order to one partition
        sink,
        checkpoint_location=str(checkpoint),  # the coordinator log lives with the checkpoint
        trigger={"availableNow": True},  # process what is there, then stop
    ).start()
    try:
        twophase.await_termination(query)
    finally:
        if query.isActive:
            query.stop()
    for metrics in twophase.batch_metrics(sink):
        print(f"  batch {metrics.batch_id}: {metrics.outcome}, {metrics.rows} rows")


def check(dsn: str, table: str, expected_version: int) -> None:
    import psycopg2

    with contextlib.closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*), count(DISTINCT order_id), min(version), max(version) FROM "
            + table  # the name comes from the command line, as a trusted setting
        )
        count, distinct, low, high = cur.fetchone()
    print(f"  {table}: {count} rows, {distinct} distinct, versions {low}..{high}")
    if (count, distinct, low, high) != (ORDERS, ORDERS, expected_version, expected_version):
        raise SystemExit("unexpected table contents: not exactly once")


@contextlib.contextmanager
def database(args: argparse.Namespace) -> Iterator[str]:
    if args.dsn:
        yield args.dsn
        return
    require_dev_tools("a throwaway PostgreSQL server", instead="--dsn")
    from twophase_dev import PostgresServer

    with PostgresServer(max_prepared_transactions=64 if args.prepared else 0) as pg:
        yield pg.dsn


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--dsn", help="use this PostgreSQL server instead of a throwaway one")
    parser.add_argument("--table", default="orders", help="target table (default: orders)")
    parser.add_argument(
        "--no-prepared",
        dest="prepared",
        action="store_false",
        help="throwaway server with max_prepared_transactions=0 (the markers protocol)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("twophase.connectors.jdbc").setLevel(logging.INFO)  # the protocol choice

    work = Path(tempfile.mkdtemp(prefix="twophase-jdbc-example-"))  # input and checkpoint
    try:
        with database(args) as dsn:
            spark = spark_session("jdbc-upsert-example", kafka=False)
            try:
                write_updates(work / "in", 0, 3)
                print("first run (3 batches):")
                run_query(spark, work / "in", work / "checkpoint", dsn, args.table)
                check(dsn, args.table, 2)
                write_updates(work / "in", 3, 2)
                print("restart from the checkpoint (2 new batches):")
                run_query(spark, work / "in", work / "checkpoint", dsn, args.table)
                check(dsn, args.table, 4)
            finally:
                spark.stop()
    except ConfigurationError as exc:  # fix the setting or the table, then rerun
        print(f"configuration problem: {exc}", file=sys.stderr)
        return 2
    except DataError as exc:  # a row the table refuses: nothing of that batch is visible
        print(f"bad input row: {exc}", file=sys.stderr)
        return 3
    except (RetriableError, CommitFailedError) as exc:  # server down: rerun, recovery finishes
        print(f"PostgreSQL unavailable, rerun to finish: {exc}", file=sys.stderr)
        return 4
    except NondeterministicBatchError as exc:  # markers: the replay differs; make it deterministic
        print(f"non-deterministic replay: {exc}", file=sys.stderr)
        return 5
    except TwoPhaseError as exc:  # e.g. FatalError: a decided transaction was rolled back by hand
        print(f"the sink failed: {exc}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("done: every order holds its latest version exactly once")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ``bad_rows="dead_letter"`` costs the JDBC sinks: a clean batch, and one bad row in many.

Issue 52's targets: a clean batch with ``bad_rows="dead_letter"`` within 2 % of the same batch with
``bad_rows="fail"`` (today's sink), and a batch of 500,000 rows with one bad row within 2x of the
clean batch. The same rows (an id, a bigint, 40 characters of text) go through
``LocalRunner(sink).run_batch`` into a fresh table (a primary key, ``payload NOT NULL``), one
partition of record batches of 10,000 rows (Spark's ``maxRecordsPerBatch``), protocol
``coordinated`` (``PREPARE``/``XA PREPARE`` and the commit included). The variants alternate
within each repetition (the table emptied before each run); the ratios are of medians. Needs the
servers: ``TWOPHASE_PG_DSN`` and/or ``TWOPHASE_MARIADB_URL`` (``twophase_dev up``)::

    eval "$(.venv/bin/python -m twophase_dev env)"
    .venv/bin/python benchmarks/bench_dead_letters.py --rows 500000 --runs 5

``--spark`` measures the clean batch through a Spark query instead (``local[2]``, two partitions):
a pipeline also reads Spark's rows, which the sink's writes overlap or not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

from twophase.connectors.jdbc import mariadb_sink, postgres_sink
from twophase.testing import LocalRunner


def _batches(rows: int, bad: int | None, chunk: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, rows, chunk):
        n = min(chunk, rows - start)
        payload = [f"payload-{i:08d}-abcdefghijklmnopqrstuv" for i in range(start, start + n)]
        if bad is not None and start <= bad < start + n:
            payload[bad - start] = None  # type: ignore[call-overload]
        out.append(
            pa.record_batch(
                {
                    "id": pa.array(range(start, start + n), pa.int64()),
                    "v": pa.array(range(n), pa.int64()),
                    "payload": pa.array(payload, pa.string()),
                }
            )
        )
    return out


class Database:
    """One server: its table, its sink, and a way to empty both tables."""

    def __init__(self, name: str, sql: Callable[[str], None], make: Callable[..., Any]) -> None:
        self.name = name
        self.sql = sql
        self.make = make
        self.table = f"bench_dl_{uuid.uuid4().hex[:8]}"


def postgres(dsn: str) -> Database:
    import psycopg2

    def sql(statement: str) -> None:
        conn = psycopg2.connect(dsn)
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(statement)
        conn.close()

    db = Database("PostgreSQL", sql, lambda name, **o: postgres_sink(name, dsn=dsn, **o))
    sql(f"CREATE TABLE {db.table} (id bigint PRIMARY KEY, v bigint, payload text NOT NULL)")
    return db


def mariadb(url: str) -> Database:
    from twophase_dev import attach_mariadb

    server = attach_mariadb(url)

    def sql(statement: str) -> None:
        conn = server.connect(autocommit=True)
        with conn.cursor() as cur:
            cur.execute(statement)
        conn.close()

    db = Database("MariaDB", sql, lambda name, **o: mariadb_sink(name, url=url, **o))
    sql(
        f"CREATE TABLE {db.table} (id BIGINT PRIMARY KEY, v BIGINT, payload TEXT NOT NULL) "
        "ENGINE=InnoDB"
    )
    return db


#: The variants of :func:`measure`: (bad_rows, the bad row's position or None). The first two are
#: the same sink twice: their ratio is this machine's noise, the floor below which no cost shows.
VARIANTS = {
    "clean, bad_rows='fail'": ("fail", None),
    "clean, bad_rows='fail', again": ("fail", None),
    "clean, bad_rows='dead_letter'": ("dead_letter", None),
    "one bad row, bad_rows='dead_letter'": ("dead_letter", -1),
}


def measure(
    db: Database, rows: int, runs: int, chunk: int, write_rows: int | None = None
) -> dict[str, list[float]]:
    """Return each variant's seconds per repetition.

    The variants run side by side in each repetition, in an order rotated from one repetition to
    the next (the first run after another pays for it: a server's checkpoint, a cold cache).
    ``write_rows`` overrides the dead-letter sinks' ``write_batch_rows``.
    """
    bad_at = rows // 2 + 17
    data = {
        key: _batches(rows, None if bad is None else bad_at, chunk)
        for key, (_mode, bad) in VARIANTS.items()
    }
    times: dict[str, list[float]] = {key: [] for key in VARIANTS}
    runners = {}
    for key, (mode, _bad) in VARIANTS.items():
        sink = db.make("bench_dl", table=db.table, protocol="coordinated", bad_rows=mode)
        if write_rows is not None and mode == "dead_letter":
            sink.write_batch_rows = write_rows
        runners[key] = LocalRunner(sink)  # each opens at its first batch (the warm-up)
    db.sql(f"DROP TABLE IF EXISTS {db.table}_dead_letters")
    keys = list(VARIANTS)
    for run in range(runs + 1):  # the first repetition warms up and is not counted
        for key in keys[run % len(keys) :] + keys[: run % len(keys)]:
            bad = VARIANTS[key][1]
            db.sql(f"TRUNCATE TABLE {db.table}")
            if run:
                db.sql(f"TRUNCATE TABLE {db.table}_dead_letters")
            start = time.perf_counter()
            metrics = runners[key].run_batch(run, [data[key]])
            elapsed = time.perf_counter() - start
            assert metrics.rows == rows - (bad is not None), metrics.log_line()
            if run:
                times[key].append(elapsed)
    return times


def measure_spark(db: Database, rows: int, runs: int, work: Path) -> dict[str, list[float]]:
    """The clean variants through a Spark query (``availableNow``), alternating; seconds each.

    The query reads ``rows`` rows of Parquet in two files (two partitions, Spark's record batches
    of 10,000 rows) and writes them with ``twophase.write_stream``: what a pipeline pays, where
    reading Spark's rows and writing them overlap or not.
    """
    import twophase
    from twophase_dev import spark_session

    spark = spark_session("bench-dead-letters", kafka=False, log_level="ERROR")
    source = work / "input"
    spark.createDataFrame(
        pa.Table.from_batches(_batches(rows, None, 10_000)).to_pandas()
    ).repartition(2).write.mode("overwrite").parquet(str(source))
    schema = spark.read.parquet(str(source)).schema
    variants = ("fail", "dead_letter")
    times: dict[str, list[float]] = {v: [] for v in variants}
    sinks = {
        v: db.make("bench_dl_spark", table=db.table, protocol="coordinated", bad_rows=v)
        for v in variants
    }
    for run in range(runs + 1):  # the first repetition warms up and is not counted
        for mode in variants:
            db.sql(f"TRUNCATE TABLE {db.table}")
            df = spark.readStream.schema(schema).parquet(str(source))
            checkpoint = str(work / f"chk-{mode}-{run}")
            start = time.perf_counter()
            query = twophase.write_stream(
                df, sinks[mode], checkpoint_location=checkpoint, trigger={"availableNow": True}
            ).start()
            query.awaitTermination()
            elapsed = time.perf_counter() - start
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))
            if run:
                times[mode].append(elapsed)
    return times


def _quartiles(ratios: list[float]) -> str:
    q1, _median, q3 = statistics.quantiles(ratios, n=4)
    return f"{q1:.3f}-{q3:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=10_000, help="rows per record batch")
    parser.add_argument(
        "--spark", action="store_true", help="clean batches through a Spark query instead"
    )
    parser.add_argument(
        "--write-rows", type=int, default=None, help="the dead-letter sinks' write_batch_rows"
    )
    args = parser.parse_args()
    databases = []
    if os.environ.get("TWOPHASE_PG_DSN"):
        databases.append(postgres(os.environ["TWOPHASE_PG_DSN"]))
    if os.environ.get("TWOPHASE_MARIADB_URL"):
        databases.append(mariadb(os.environ["TWOPHASE_MARIADB_URL"]))
    if not databases:
        raise SystemExit("set TWOPHASE_PG_DSN and/or TWOPHASE_MARIADB_URL (twophase_dev env)")
    print(
        f"{args.rows:,} rows, 1 partition, record batches of {args.chunk:,}; medians of "
        f"{args.runs}; load average {os.getloadavg()[0]:.1f}"
    )
    clean, fail, bad = (
        "clean, bad_rows='dead_letter'",
        "clean, bad_rows='fail'",
        "one bad row, bad_rows='dead_letter'",
    )
    if args.spark:
        for db in databases:
            with tempfile.TemporaryDirectory(prefix="bench-dl-") as work:
                try:
                    spark_times = measure_spark(db, args.rows, args.runs, Path(work))
                finally:
                    db.sql(f"DROP TABLE IF EXISTS {db.table}")
            for key, values in spark_times.items():
                seconds = statistics.median(values)
                print(f"{db.name:10s} Spark query, clean, bad_rows={key!r:14s} {seconds:7.3f} s")
            cost = statistics.median(
                c / f for c, f in zip(spark_times["dead_letter"], spark_times["fail"], strict=True)
            )
            print(f"{db.name:10s} Spark query, clean, dead_letter / fail: {cost:.3f}x (<= 1.02)")
        print(f"load average at the end {os.getloadavg()[0]:.1f}")
        return
    for db in databases:
        try:
            times = measure(db, args.rows, args.runs, args.chunk, args.write_rows)
        finally:
            db.sql(f"DROP TABLE IF EXISTS {db.table}")
            db.sql(f"DROP TABLE IF EXISTS {db.table}_dead_letters")
        for key, values in times.items():
            seconds = statistics.median(values)
            print(f"{db.name:10s} {key:38s} {seconds:7.3f} s  {args.rows / seconds:>10,.0f} rows/s")
        # Ratios of the runs of one repetition (run side by side), then their median.
        again = "clean, bad_rows='fail', again"
        floor = [a / f for a, f in zip(times[again], times[fail], strict=True)]
        cost = [c / f for c, f in zip(times[clean], times[fail], strict=True)]
        one = statistics.median(b / c for b, c in zip(times[bad], times[clean], strict=True))
        print(
            f"{db.name:10s} clean batch, fail again / fail:     {statistics.median(floor):.3f}x "
            f"(the noise: quartiles {_quartiles(floor)})"
        )
        print(
            f"{db.name:10s} clean batch, dead_letter / fail:    {statistics.median(cost):.3f}x "
            f"(<= 1.02; quartiles {_quartiles(cost)})"
        )
        print(f"{db.name:10s} one bad row / clean (dead_letter): {one:.3f}x (<= 2)")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

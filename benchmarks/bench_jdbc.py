"""Throughput of the PostgreSQL connector beside raw COPY on the same server.

What is measured (rows/s, median of ``--repeat`` runs, 1M rows by default):

* ``raw COPY``            -- the rows pre-rendered as CSV in memory, one ``COPY ... FROM STDIN``
  in one transaction with psycopg2: the server's ingest speed, the ceiling for any client.
* ``raw COPY + merge``    -- the same into a temporary table, then one
  ``INSERT ... ON CONFLICT DO UPDATE`` (every key already present): the ceiling for upsert.
* ``connector append``    -- the connector's hooks driven by the real coordinator
  (:class:`twophase.testing.LocalRunner`, no Spark): Arrow record batches of 10,000 rows in
  ``--partitions`` partitions, encoded by the connector, COPY, PREPARE, decision, COMMIT PREPARED
  (protocol A) or COPY + marker + COMMIT (protocol B).
* ``connector upsert``    -- the same with ``mode="upsert"`` (staging table + merge), every key
  already present.
* ``spark append``        -- optional (``--spark``): a Structured Streaming query, one micro-batch
  of the same rows from Parquet, through ``foreachBatch`` and ``mapInArrow`` (Spark overhead
  included: planning, Parquet decode, Arrow conversion, Python workers).

Everything is single-threaded on the client side except the Spark run, so the ratios compare like
with like. The server is a throwaway cluster started here (``twophase_dev.PostgresServer``), made
durable (fsync, synchronous_commit and full_page_writes on) unless ``--fast-server``; pass
``--dsn`` to use your own server instead.

Run::

    .venv/bin/python benchmarks/bench_jdbc.py            # ~2 minutes
    .venv/bin/python benchmarks/bench_jdbc.py --rows 200000 --repeat 1 --spark

Not part of the test suite.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import logging
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import psycopg2
import pyarrow as pa
import pyarrow.csv as pacsv

from twophase.connectors.jdbc import postgres_sink
from twophase.testing import LocalRunner

BATCH_ROWS = 10_000  # Spark's default spark.sql.execution.arrow.maxRecordsPerBatch
DDL = "(id bigint PRIMARY KEY, name text, amount double precision, created timestamptz, ok boolean)"


def make_table(rows: int) -> pa.Table:
    rng = np.random.default_rng(42)
    ids = np.arange(rows, dtype=np.int64)
    names = pa.array([f"customer-{i:08d}-{i % 97:02d}" for i in range(rows)])
    start = np.datetime64("2024-01-01T00:00:00", "us").astype(np.int64)
    created = start + rng.integers(0, 365 * 86_400_000_000, rows)
    return pa.table(
        {
            "id": pa.array(ids),
            "name": names,
            "amount": pa.array(rng.random(rows) * 1000),
            "created": pa.array(created, pa.timestamp("us", tz="UTC")),
            "ok": pa.array(rng.random(rows) < 0.5),
        }
    )


def timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


class Bench:
    def __init__(self, dsn: str, table: pa.Table, partitions: int, repeat: int) -> None:
        self.dsn = dsn
        self.table = table
        self.rows = table.num_rows
        self.partitions = partitions
        self.repeat = repeat
        self.results: dict[str, float] = {}
        sink = pa.BufferOutputStream()
        pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False))
        self.csv = sink.getvalue().to_pybytes()

    def sql(self, *statements: str) -> None:
        conn = psycopg2.connect(self.dsn)
        conn.autocommit = True
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
        conn.close()

    def reset(self, name: str, *, filled: bool) -> None:
        self.sql(f"DROP TABLE IF EXISTS {name}", f"CREATE TABLE {name} {DDL}")
        if filled:
            self.raw_copy(name)
        self.sql(f"VACUUM ANALYZE {name}", "CHECKPOINT")

    def count(self, name: str) -> int:
        conn = psycopg2.connect(self.dsn)
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {name}")
            (n,) = cur.fetchone()
        conn.close()
        return int(n)

    def measure(self, label: str, prepare: Callable[[], None], run: Callable[[], None]) -> None:
        seconds = []
        for _ in range(self.repeat):
            prepare()
            seconds.append(timed(run))
        median = statistics.median(seconds)
        self.results[label] = self.rows / median
        runs = ", ".join(f"{s:.2f}" for s in seconds)
        print(f"  {label:<22} {self.rows / median:>12,.0f} rows/s   (runs: {runs} s)", flush=True)

    # ----------------------------------------------------------------- raw
    def raw_copy(self, name: str) -> None:
        conn = psycopg2.connect(self.dsn)
        with conn.cursor() as cur:
            cur.copy_expert(f"COPY {name} FROM STDIN WITH (FORMAT csv)", pa.BufferReader(self.csv))
        conn.commit()
        conn.close()

    def raw_copy_merge(self, name: str) -> None:
        conn = psycopg2.connect(self.dsn)
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE TEMP TABLE stage ON COMMIT DROP AS SELECT * FROM {name} WITH NO DATA"
            )
            cur.copy_expert("COPY stage FROM STDIN WITH (FORMAT csv)", pa.BufferReader(self.csv))
            cur.execute(
                f"INSERT INTO {name} SELECT * FROM stage ON CONFLICT (id) DO UPDATE SET "
                "name = EXCLUDED.name, amount = EXCLUDED.amount, created = EXCLUDED.created, "
                "ok = EXCLUDED.ok"
            )
        conn.commit()
        conn.close()

    # ----------------------------------------------------------- connector
    def parts(self) -> list[list[pa.RecordBatch]]:
        size = -(-self.rows // self.partitions)
        out = []
        for p in range(self.partitions):
            chunk = self.table.slice(p * size, size)
            out.append(chunk.to_batches(max_chunksize=BATCH_ROWS))
        return out

    def connector(self, name: str, protocol: str, mode: str) -> Callable[[], None]:
        keys = ["id"] if mode == "upsert" else []
        parts = self.parts()

        def run() -> None:
            sink = postgres_sink(
                "bench", table=name, dsn=self.dsn, protocol=protocol, mode=mode, key_columns=keys
            )
            runner = LocalRunner(sink)
            try:
                metrics = runner.run_batch(0, parts)
            finally:
                runner.close()
            assert metrics.rows == self.rows, metrics

        return run

    # --------------------------------------------------------------- spark
    def spark_append(self, name: str, protocol: str) -> Callable[[], None]:
        import pyarrow.parquet as pq

        import twophase
        from twophase_dev import spark_session

        spark = spark_session("bench-jdbc")
        spark.conf.set("spark.sql.shuffle.partitions", str(self.partitions))
        work = Path(tempfile.mkdtemp(prefix="bench-jdbc-"))
        pq.write_table(self.table, work / "in.parquet")
        schema = "id long, name string, amount double, created timestamp, ok boolean"
        runs = [0]

        def run() -> None:
            runs[0] += 1
            df = spark.readStream.schema(schema).parquet(str(work))
            sink = postgres_sink("bench", table=name, dsn=self.dsn, protocol=protocol)
            query = twophase.write_stream(
                df.repartition(self.partitions),
                sink,
                checkpoint_location=str(work / f"chk{runs[0]}"),
                trigger={"availableNow": True},
            ).start()
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()))

        # Warm up the JVM and the Python workers once, outside the measurement.
        self.reset(name, filled=False)
        run()
        return run


@contextlib.contextmanager
def server(args: argparse.Namespace) -> Iterator[tuple[str, str]]:
    if args.dsn:
        conn = psycopg2.connect(args.dsn)
        with conn.cursor() as cur:
            cur.execute("SHOW max_prepared_transactions")
            (mpt,) = cur.fetchone()
        conn.close()
        yield args.dsn, "coordinated" if int(mpt) > 0 else "markers"
        return
    from twophase_dev import PostgresServer

    durable = (
        {}
        if args.fast_server
        else {
            "fsync": "on",
            "synchronous_commit": "on",
            "full_page_writes": "on",
        }
    )
    settings = {"max_wal_size": "'4GB'", "shared_buffers": "'512MB'", **durable}
    mpt = 0 if args.protocol == "markers" else 64
    with PostgresServer(max_prepared_transactions=mpt, settings=settings) as pg:
        yield pg.dsn, args.protocol


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--protocol", choices=["coordinated", "markers"], default="coordinated")
    parser.add_argument("--dsn", help="use this server instead of starting one")
    parser.add_argument("--fast-server", action="store_true", help="fsync off (not durable)")
    parser.add_argument("--spark", action="store_true", help="also measure through Spark")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    print(f"generating {args.rows:,} rows ...", flush=True)
    data = make_table(args.rows)
    with server(args) as (dsn, protocol):
        bench = Bench(dsn, data, args.partitions, args.repeat)
        print(
            f"PostgreSQL at {dsn.rsplit('@', 1)[-1]}, protocol {protocol}, "
            f"{args.partitions} partitions, median of {args.repeat}, {dt.date.today()}",
            flush=True,
        )
        name = "bench_target"
        bench.measure(
            "raw COPY", lambda: bench.reset(name, filled=False), lambda: bench.raw_copy(name)
        )
        bench.measure(
            "connector append",
            lambda: bench.reset(name, filled=False),
            bench.connector(name, protocol, "append"),
        )
        assert bench.count(name) == args.rows
        bench.measure(
            "raw COPY + merge",
            lambda: bench.reset(name, filled=True),
            lambda: bench.raw_copy_merge(name),
        )
        bench.measure(
            "connector upsert",
            lambda: bench.reset(name, filled=True),
            bench.connector(name, protocol, "upsert"),
        )
        assert bench.count(name) == args.rows
        if args.spark:
            run = bench.spark_append(name, protocol)
            bench.measure("spark append", lambda: bench.reset(name, filled=False), run)
            assert bench.count(name) == args.rows
        r = bench.results
        ratios = [
            ("append: connector / raw COPY", "connector append", "raw COPY"),
            ("upsert: connector / raw COPY + merge", "connector upsert", "raw COPY + merge"),
            ("append: spark / raw COPY", "spark append", "raw COPY"),
        ]
        print()
        for label, mine, raw in ratios:
            if mine in r:
                print(f"  {label:<38} = {r[mine] / r[raw]:.2f}")
        bench.sql(f"DROP TABLE IF EXISTS {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

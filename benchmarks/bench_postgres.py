"""Comparison "postgres": the JDBC sink against Spark's JDBC writer and raw COPY.

Two row shapes: **narrow** (``id bigint`` primary key, ``n integer``, ``s text`` of 64 characters)
and **wide** (20 columns: the key, 4 ``integer``, 4 ``bigint``, 4 ``double precision``, 4 ``text``
of 24 characters, a ``timestamptz``, a ``boolean``, a ``date``).

Through Spark: a streaming query reads the rows from Parquet (one micro-batch,
``trigger(availableNow=True)``; 2 input files, so 2 Spark tasks and 2 connections or
transactions for every writer) and writes them with

* ``twophase coordinated`` / ``twophase markers`` -- ``postgres_sink(protocol="coordinated" |
  "markers")``,
  ``mode="append"`` or ``mode="upsert"`` (``key_columns=["id"]``);
* ``spark jdbc`` -- ``foreachBatch`` calling ``df.write.jdbc`` with the PostgreSQL JDBC driver from
  Maven Central, tuned as a user would (``batchsize=10000``, ``reWriteBatchedInserts=true``). For
  upsert, its usual pattern: ``df.write.jdbc`` into an unlogged staging table, then one
  ``INSERT ... SELECT ... ON CONFLICT (id) DO UPDATE`` and ``TRUNCATE`` of the staging table on the
  driver.

Without Spark, one client process: ``raw COPY`` (the rows pre-rendered as CSV, one ``COPY ... FROM
STDIN`` on one connection: the server's ingest speed, the ceiling of any client), ``raw COPY +
merge`` (the same into a temporary table, then one ``INSERT ... ON CONFLICT``), and the connector
driven by the real coordinator (``twophase.testing.LocalRunner``: the same rows in 4 partitions
written one after the other, Arrow record batches of 10,000 rows, as Spark would hand them over).

Upsert runs start from a table holding every key (so every row is an update), append runs from
an empty table; before every run the table is rebuilt, vacuumed and a checkpoint taken. The server
is durable (fsync on). Rows/s = rows / wall time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
from bench_common import Comparison, Env, await_query, fmt_rate, log

NAME = "postgres"
TITLE = "PostgreSQL: JDBC sink vs Spark's JDBC writer and raw COPY"
INPUT_FILES = 2
LOCAL_PARTITIONS = 4
ARROW_BATCH = 10_000
GOAL_SPARK = 1.0
GOAL_COPY = 0.9

SHAPES: dict[str, dict[str, Any]] = {
    "narrow": {
        "ddl": "id bigint PRIMARY KEY, n integer, s text",
        "select": [
            "id",
            "CAST(id % 1000003 AS INT) AS n",
            "sha2(CAST(id AS STRING), 256) AS s",
        ],
    },
    "wide": {
        "ddl": ", ".join(
            ["id bigint PRIMARY KEY"]
            + [f"i{k} integer" for k in range(4)]
            + [f"b{k} bigint" for k in range(4)]
            + [f"d{k} double precision" for k in range(4)]
            + [f"s{k} text" for k in range(4)]
            + ["ts timestamptz", "flag boolean", "day date"]
        ),
        "select": ["id"]
        + [f"CAST((id * {k + 3}) % 2147483647 AS INT) AS i{k}" for k in range(4)]
        + [f"id * {k + 7} AS b{k}" for k in range(4)]
        + [f"CAST(id AS DOUBLE) / {k + 3} AS d{k}" for k in range(4)]
        + [f"substring(sha2(CAST(id + {k} AS STRING), 256), 1, 24) AS s{k}" for k in range(4)]
        + [
            "timestamp_seconds(1700000000 + id) AS ts",
            "id % 2 = 0 AS flag",
            "date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS day",
        ],
    },
}

PROTOCOLS = ("coordinated", "markers")
THROUGH_SPARK = ("twophase coordinated", "twophase markers", "spark jdbc")
LOCAL = ("raw COPY", "twophase coordinated (no Spark)", "twophase markers (no Spark)")


class Table:
    """One target table of one shape, rebuilt before every run."""

    def __init__(self, env: Env, shape: str, source: Path) -> None:
        self.env = env
        self.shape = shape
        self.name = f"bench_{shape}"
        self.ddl = SHAPES[shape]["ddl"]
        self.arrow = pq.read_table(str(source))
        # Timestamps as the connector receives them from Spark (UTC, microseconds).
        self.arrow = self.arrow.cast(
            pa.schema(
                [
                    pa.field(f.name, pa.timestamp("us", tz="UTC"))
                    if pa.types.is_timestamp(f.type)
                    else f
                    for f in self.arrow.schema
                ]
            )
        )
        self.rows = self.arrow.num_rows
        sink = pa.BufferOutputStream()
        pacsv.write_csv(self.arrow, sink, pacsv.WriteOptions(include_header=False))
        self.csv = sink.getvalue()
        self.columns = [f.name for f in self.arrow.schema]

    def reset(self, *, filled: bool) -> None:
        self.env.sql(f"DROP TABLE IF EXISTS {self.name}", f"CREATE TABLE {self.name} ({self.ddl})")
        if filled:
            self.copy(self.name)
        self.env.sql(f"VACUUM ANALYZE {self.name}", "CHECKPOINT")

    def count(self) -> int:
        return int(self.env.sql(f"SELECT count(*) FROM {self.name}", fetch=True)[0][0])

    def copy(self, into: str, conn: Any = None) -> None:
        own = conn is None
        conn = conn or self.env.pg.connect()
        with conn.cursor() as cur:
            cur.copy_expert(
                f"COPY {into} ({', '.join(self.columns)}) FROM STDIN WITH (FORMAT csv)",
                pa.BufferReader(self.csv),
            )
        if own:
            conn.commit()
            conn.close()

    def merge_sql(self, source: str) -> str:
        cols = ", ".join(self.columns)
        sets = ", ".join(f"{c} = EXCLUDED.{c}" for c in self.columns if c != "id")
        return (
            f"INSERT INTO {self.name} ({cols}) SELECT {cols} FROM {source} "
            f"ON CONFLICT (id) DO UPDATE SET {sets}"
        )

    # -- without Spark
    def raw_copy(self, mode: str) -> None:
        conn = self.env.pg.connect()
        if mode == "append":
            self.copy(self.name, conn)
        else:
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE TEMP TABLE stage ON COMMIT DROP AS SELECT * FROM {self.name} "
                    "WITH NO DATA"
                )
            self.copy("stage", conn)
            with conn.cursor() as cur:
                cur.execute(self.merge_sql("stage"))
        conn.commit()
        conn.close()

    def local_runner(self, protocol: str, mode: str) -> None:
        from twophase.connectors.jdbc import postgres_sink
        from twophase.testing import LocalRunner

        size = -(-self.rows // LOCAL_PARTITIONS)
        parts = [
            self.arrow.slice(p * size, size).to_batches(max_chunksize=ARROW_BATCH)
            for p in range(LOCAL_PARTITIONS)
        ]
        sink = postgres_sink(
            "bench-local",
            table=self.name,
            dsn=self.env.pg.dsn,
            protocol=protocol,
            mode=mode,
            key_columns=["id"] if mode == "upsert" else [],
        )
        runner = LocalRunner(sink, fsync=True)
        try:
            metrics = runner.run_batch(0, parts)
        finally:
            runner.close()
        if metrics.rows != self.rows:
            raise RuntimeError(f"LocalRunner wrote {metrics.rows} of {self.rows} rows")

    # -- through Spark
    def spark_run(self, writer_name: str, mode: str, source: Path) -> None:
        env = self.env
        spark = env.spark
        schema = spark.read.parquet(str(source)).schema
        df = spark.readStream.schema(schema).parquet(str(source))
        if writer_name == "spark jdbc":
            fn = self._jdbc_append if mode == "append" else self._jdbc_upsert
            writer = df.writeStream.foreachBatch(fn).option("checkpointLocation", env.checkpoint())
            await_query(writer.trigger(availableNow=True).start())
            return
        import twophase
        from twophase.connectors.jdbc import postgres_sink

        sink = postgres_sink(
            "bench-spark",
            table=self.name,
            dsn=env.pg.dsn,
            protocol=writer_name.split()[-1],
            mode=mode,
            key_columns=["id"] if mode == "upsert" else [],
        )
        query = twophase.write_stream(
            df, sink, checkpoint_location=env.checkpoint(), trigger={"availableNow": True}
        ).start()
        await_query(query)

    def _jdbc_write(self, df: Any, table: str) -> None:
        df.write.jdbc(
            f"{self.env.pg.jdbc_url}?reWriteBatchedInserts=true",
            table,
            mode="append",
            properties={
                "user": "postgres",
                "driver": "org.postgresql.Driver",
                "batchsize": "10000",
            },
        )

    def _jdbc_append(self, df: Any, batch_id: int) -> None:
        self._jdbc_write(df, self.name)

    def _jdbc_upsert(self, df: Any, batch_id: int) -> None:
        stage = f"{self.name}_stage"
        self.env.sql(
            f"CREATE UNLOGGED TABLE IF NOT EXISTS {stage} (LIKE {self.name})", f"TRUNCATE {stage}"
        )
        self._jdbc_write(df, stage)
        conn = self.env.pg.connect()
        with conn.cursor() as cur:
            cur.execute(self.merge_sql(stage))
            cur.execute(f"TRUNCATE {stage}")
        conn.commit()
        conn.close()


def make_input(spark: Any, shape: str, rows: int, path: Path) -> None:
    (
        spark.range(rows, numPartitions=INPUT_FILES)
        .selectExpr(*SHAPES[shape]["select"])
        .write.mode("overwrite")
        .parquet(str(path))
    )


def _timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run(env: Env, quick: bool) -> Comparison:
    logging.getLogger("twophase").setLevel(logging.WARNING)
    rows = {"narrow": 20_000, "wide": 10_000} if quick else {"narrow": 500_000, "wide": 200_000}
    reps = env.reps if quick else max(env.reps, 3)
    cmp = Comparison(NAME, TITLE, quick)
    cmp.params = {
        "rows": rows,
        "repetitions": reps,
        "spark_tasks": INPUT_FILES,
        "local_partitions": LOCAL_PARTITIONS,
        "jdbc_options": "batchsize=10000, reWriteBatchedInserts=true",
        "shapes": {k: v["ddl"] for k, v in SHAPES.items()},
        "server": "durable: fsync, synchronous_commit, full_page_writes on",
    }
    spark = env.spark
    for shape in SHAPES:
        source = env.work / f"pg-input-{shape}"
        make_input(spark, shape, rows[shape], source)
        table = Table(env, shape, source)
        if not quick:  # warm-up: JIT, Python workers, connection pools (not measured)
            warm = env.work / f"pg-warm-{shape}"
            make_input(spark, shape, 20_000, warm)
            for writer_name in THROUGH_SPARK:
                for mode in ("append", "upsert"):
                    table.reset(filled=False)
                    table.spark_run(writer_name, mode, warm)
        for mode in ("append", "upsert"):
            runs: dict[str, Callable[[], None]] = {}
            for writer_name in THROUGH_SPARK:
                runs[writer_name] = partial(table.spark_run, writer_name, mode, source)
            runs["raw COPY" if mode == "append" else "raw COPY + merge"] = partial(
                table.raw_copy, mode
            )
            for protocol in PROTOCOLS:
                runs[f"twophase {protocol} (no Spark)"] = partial(
                    table.local_runner, protocol, mode
                )
            names = list(runs)
            rates: dict[str, list[float]] = {n: [] for n in names}
            for rep in range(reps):
                order = names[rep % len(names) :] + names[: rep % len(names)]
                for name in order:
                    table.reset(filled=mode == "upsert")
                    seconds = _timed(runs[name])
                    if table.count() != table.rows:
                        raise RuntimeError(f"{name} {mode}: {table.count()} rows, not {table.rows}")
                    rates[name].append(table.rows / seconds)
                    log(
                        f"  postgres {shape:<6} {mode:<6} {name:<31} rep {rep + 1}: "
                        f"{seconds:6.2f} s {fmt_rate(table.rows / seconds)}"
                    )
            group = f"{shape} {mode}"
            entries = {n: cmp.measure(group, n, "rows/s", rates[n]) for n in names}
            for protocol in PROTOCOLS:
                cmp.ratio(
                    f"{group}: twophase {protocol} / spark jdbc",
                    entries[f"twophase {protocol}"],
                    entries["spark jdbc"],
                    goal=GOAL_SPARK,
                )
            raw = "raw COPY" if mode == "append" else "raw COPY + merge"
            for protocol in PROTOCOLS:
                cmp.ratio(
                    f"{group}: twophase {protocol} (no Spark) / {raw}",
                    entries[f"twophase {protocol} (no Spark)"],
                    entries[raw],
                    goal=GOAL_COPY if mode == "append" else None,
                )
            for protocol in PROTOCOLS:
                cmp.ratio(
                    f"{group}: twophase {protocol} through Spark / {raw}",
                    entries[f"twophase {protocol}"],
                    entries[raw],
                    goal=None,
                )
        env.sql(f"DROP TABLE IF EXISTS {table.name}", f"DROP TABLE IF EXISTS {table.name}_stage")
    cmp.notes.append(
        "The 0.9x goal against raw COPY is checked like for like: the connector driven by the "
        "coordinator in one process (LocalRunner, no Spark) against one COPY on one connection. "
        "Through Spark the same rows also pay Spark's own work (Parquet decode, Arrow conversion, "
        "Python workers) on the same 2 cores; that ratio is shown without a goal."
    )
    return cmp

"""What the JDBC comparisons share ("postgres", "mariadb"): row shapes, the table and the loop.

Two row shapes: **narrow** (a ``bigint`` primary key ``id``, an integer ``n``, a 64-character
text ``s``) and **wide** (20 columns: the key, 4 integers, 4 bigints, 4 doubles, 4 texts of 24
characters, a timestamp, a boolean, a date). Each dialect names the SQL types of these kinds.

Through Spark: a streaming query reads the rows from Parquet (one micro-batch,
``trigger(availableNow=True)``; 2 input files, so 2 Spark tasks and 2 connections or
transactions for every writer) and writes them with the sink (``protocol="coordinated"`` and
``"markers"``, ``mode="append"`` or ``"upsert"`` on ``id``) or with Spark's JDBC writer in
``foreachBatch`` tuned as a user would (for upsert: a staging table, then one merge statement on
the driver). Without Spark, one client process: the server's raw bulk path on one connection
(the ceiling of any client) and the connector driven by the real coordinator
(``twophase.testing.LocalRunner``: the same rows in 4 partitions written one after the other,
Arrow record batches of 10,000 rows, as Spark would hand them over).

Upsert runs start from a table holding every key (so every row is an update), append runs from
an empty table. Rows/s = rows / wall time; after every run the table's row count is checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq
from bench_common import Comparison, Env, await_query, fmt_rate, log

INPUT_FILES = 2
LOCAL_PARTITIONS = 4
ARROW_BATCH = 10_000
GOAL_SPARK = 1.0
GOAL_RAW = 0.9
PROTOCOLS = ("coordinated", "markers")
SPARK_JDBC = "spark jdbc"
THROUGH_SPARK = ("twophase coordinated", "twophase markers", SPARK_JDBC)

#: Column name -> kind (the dialect's table maps each kind to a SQL type), per shape.
SHAPES: dict[str, dict[str, str]] = {
    "narrow": {"id": "key", "n": "int", "s": "text64"},
    "wide": {
        "id": "key",
        **{f"i{k}": "int" for k in range(4)},
        **{f"b{k}": "bigint" for k in range(4)},
        **{f"d{k}": "double" for k in range(4)},
        **{f"s{k}": "text24" for k in range(4)},
        "ts": "timestamp",
        "flag": "bool",
        "day": "date",
    },
}

#: Spark SQL producing each shape from ``spark.range``.
SELECTS: dict[str, list[str]] = {
    "narrow": ["id", "CAST(id % 1000003 AS INT) AS n", "sha2(CAST(id AS STRING), 256) AS s"],
    "wide": ["id"]
    + [f"CAST((id * {k + 3}) % 2147483647 AS INT) AS i{k}" for k in range(4)]
    + [f"id * {k + 7} AS b{k}" for k in range(4)]
    + [f"CAST(id AS DOUBLE) / {k + 3} AS d{k}" for k in range(4)]
    + [f"substring(sha2(CAST(id + {k} AS STRING), 256), 1, 24) AS s{k}" for k in range(4)]
    + [
        "timestamp_seconds(1700000000 + id) AS ts",
        "id % 2 = 0 AS flag",
        "date_add(DATE'2024-01-01', CAST(id % 365 AS INT)) AS day",
    ],
}


class JdbcTable:
    """One target table of one shape in one database, rebuilt before every run.

    A dialect's subclass sets the class attributes and implements the database-specific methods
    (``reset``, ``count``, ``raw``, ``make_sink``, ``jdbc_write``, ``merge``).
    """

    #: Comparison name (``postgres``), used in log lines.
    label = ""
    #: Kind -> SQL type.
    types: ClassVar[dict[str, str]] = {}
    #: Names of the raw bulk path without and with the merge, as they appear in the report.
    raw_names = ("raw", "raw + merge")

    def __init__(self, env: Env, shape: str, source: Path) -> None:
        self.env = env
        self.shape = shape
        self.name = f"bench_{shape}"
        self.stage = f"{self.name}_stage"
        self.ddl = self.ddl_of(shape)
        arrow = pq.read_table(str(source))
        # Timestamps as the connector receives them from Spark (UTC, microseconds).
        self.arrow = arrow.cast(
            pa.schema(
                [
                    pa.field(f.name, pa.timestamp("us", tz="UTC"))
                    if pa.types.is_timestamp(f.type)
                    else f
                    for f in arrow.schema
                ]
            )
        )
        self.rows = self.arrow.num_rows
        self.columns = [f.name for f in self.arrow.schema]

    @classmethod
    def ddl_of(cls, shape: str) -> str:
        """The column definitions of ``shape`` in this dialect."""
        return ", ".join(f"{column} {cls.types[kind]}" for column, kind in SHAPES[shape].items())

    # -- database-specific
    def reset(self, *, filled: bool) -> None:
        """Rebuild the table, empty or with every row."""
        raise NotImplementedError

    def count(self) -> int:
        """Rows in the table."""
        raise NotImplementedError

    def raw_connect(self) -> Any:
        """A DB-API connection for the raw bulk path (autocommit off)."""
        raise NotImplementedError

    def bulk_load(self, conn: Any, into: str) -> None:
        """Load every row with the server's bulk path into ``into``."""
        raise NotImplementedError

    def temp_stage_sql(self) -> str:
        """Create the raw upsert's temporary table ``stage``, shaped like the table, empty."""
        raise NotImplementedError

    def merge_sql(self, source: str) -> str:
        """Upsert every row of ``source`` into the table."""
        raise NotImplementedError

    def sink(self, name: str, **options: Any) -> Any:
        """The twophase sink of this dialect writing to the table, with ``options``."""
        raise NotImplementedError

    def jdbc_write(self, df: Any, table: str) -> None:
        """Spark's JDBC writer, tuned as a user would, appending ``df`` to ``table``."""
        raise NotImplementedError

    def merge(self) -> None:
        """On the driver: merge the staging table into the table and empty the staging table."""
        raise NotImplementedError

    def create_stage(self) -> None:
        """Create the (empty) staging table of Spark's JDBC upsert if needed."""
        raise NotImplementedError

    def drop(self) -> None:
        """Drop the table and the staging table."""
        raise NotImplementedError

    # -- the same for every dialect
    def raw(self, mode: str) -> None:
        """The raw bulk path on one connection (into a temporary table and merged for upsert)."""
        conn = self.raw_connect()
        if mode == "append":
            self.bulk_load(conn, self.name)
        else:
            with conn.cursor() as cur:
                cur.execute(self.temp_stage_sql())
            self.bulk_load(conn, "stage")
            with conn.cursor() as cur:
                cur.execute(self.merge_sql("stage"))
        conn.commit()
        conn.close()

    def make_sink(self, name: str, protocol: str, mode: str) -> Any:
        return self.sink(
            name, protocol=protocol, mode=mode, key_columns=["id"] if mode == "upsert" else []
        )

    def local_runner(self, protocol: str, mode: str) -> None:
        from twophase.testing import LocalRunner

        size = -(-self.rows // LOCAL_PARTITIONS)
        parts = [
            self.arrow.slice(p * size, size).to_batches(max_chunksize=ARROW_BATCH)
            for p in range(LOCAL_PARTITIONS)
        ]
        runner = LocalRunner(self.make_sink("bench-local", protocol, mode), fsync=True)
        try:
            metrics = runner.run_batch(0, parts)
        finally:
            runner.close()
        if metrics.rows != self.rows:
            raise RuntimeError(f"LocalRunner wrote {metrics.rows} of {self.rows} rows")

    def spark_run(self, writer_name: str, mode: str, source: Path) -> None:
        env = self.env
        spark = env.spark
        schema = spark.read.parquet(str(source)).schema
        df = spark.readStream.schema(schema).parquet(str(source))
        if writer_name == SPARK_JDBC:
            fn = self._jdbc_append if mode == "append" else self._jdbc_upsert
            writer = df.writeStream.foreachBatch(fn).option("checkpointLocation", env.checkpoint())
            await_query(writer.trigger(availableNow=True).start())
            return
        import twophase

        sink = self.make_sink("bench-spark", writer_name.split()[-1], mode)
        query = twophase.write_stream(
            df, sink, checkpoint_location=env.checkpoint(), trigger={"availableNow": True}
        ).start()
        await_query(query)

    def _jdbc_append(self, df: Any, batch_id: int) -> None:
        self.jdbc_write(df, self.name)

    def _jdbc_upsert(self, df: Any, batch_id: int) -> None:
        self.create_stage()
        self.jdbc_write(df, self.stage)
        self.merge()


def make_input(spark: Any, shape: str, rows: int, path: Path) -> None:
    (
        spark.range(rows, numPartitions=INPUT_FILES)
        .selectExpr(*SELECTS[shape])
        .write.mode("overwrite")
        .parquet(str(path))
    )


def _timed(fn: Callable[[], None]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run_comparison(
    env: Env,
    cmp: Comparison,
    table_class: type[JdbcTable],
    rows: dict[str, int],
    reps: int,
    *,
    warm_up: bool,
) -> None:
    """Measure every writer on every shape and mode; record the ratios against their goals."""
    spark = env.spark
    label = table_class.label
    for shape in SHAPES:
        source = env.work / f"{label}-input-{shape}"
        make_input(spark, shape, rows[shape], source)
        table = table_class(env, shape, source)
        if warm_up:  # JIT, Python workers, connection pools (not measured)
            warm = env.work / f"{label}-warm-{shape}"
            make_input(spark, shape, 20_000, warm)
            for writer_name in THROUGH_SPARK:
                for mode in ("append", "upsert"):
                    table.reset(filled=False)
                    table.spark_run(writer_name, mode, warm)
        for mode in ("append", "upsert"):
            raw = table.raw_names[0] if mode == "append" else table.raw_names[1]
            runs: dict[str, Callable[[], None]] = {}
            for writer_name in THROUGH_SPARK:
                runs[writer_name] = partial(table.spark_run, writer_name, mode, source)
            runs[raw] = partial(table.raw, mode)
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
                        f"  {label} {shape:<6} {mode:<6} {name:<31} rep {rep + 1}: "
                        f"{seconds:6.2f} s {fmt_rate(table.rows / seconds)}"
                    )
            group = f"{shape} {mode}"
            entries = {n: cmp.measure(group, n, "rows/s", rates[n]) for n in names}
            for protocol in PROTOCOLS:
                cmp.ratio(
                    f"{group}: twophase {protocol} / {SPARK_JDBC}",
                    entries[f"twophase {protocol}"],
                    entries[SPARK_JDBC],
                    goal=GOAL_SPARK,
                )
            for protocol in PROTOCOLS:
                cmp.ratio(
                    f"{group}: twophase {protocol} (no Spark) / {raw}",
                    entries[f"twophase {protocol} (no Spark)"],
                    entries[raw],
                    goal=GOAL_RAW if mode == "append" else None,
                )
            for protocol in PROTOCOLS:
                cmp.ratio(
                    f"{group}: twophase {protocol} through Spark / {raw}",
                    entries[f"twophase {protocol}"],
                    entries[raw],
                    goal=None,
                )
        table.drop()
    cmp.notes.append(
        f"The {GOAL_RAW}x goal against the raw bulk path is checked like for like: the connector "
        "driven by the coordinator in one process (LocalRunner, no Spark) against one bulk load "
        "on one connection. Through Spark the same rows also pay Spark's own work (Parquet "
        "decode, Arrow conversion, Python workers) on the same 2 cores; that ratio is shown "
        "without a goal."
    )

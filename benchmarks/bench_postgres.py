"""Comparison "postgres": the JDBC sink against Spark's JDBC writer and raw COPY.

Shapes, writers and the loop are those of every JDBC comparison (``bench_jdbc``). PostgreSQL's
parts:

* ``spark jdbc`` -- ``df.write.jdbc`` with the PostgreSQL JDBC driver from Maven Central
  (``batchsize=10000``, ``reWriteBatchedInserts=true``); for upsert into an unlogged staging
  table, then one ``INSERT ... SELECT ... ON CONFLICT (id) DO UPDATE`` and ``TRUNCATE`` of the
  staging table on the driver.
* ``raw COPY`` -- the rows pre-rendered as CSV, one ``COPY ... FROM STDIN`` on one connection;
  ``raw COPY + merge`` the same into a temporary table, then one ``INSERT ... ON CONFLICT``.

Before every run the table is rebuilt, vacuumed and a checkpoint taken. The server is durable
(fsync on).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.csv as pacsv
from bench_common import Comparison, Env
from bench_jdbc import INPUT_FILES, LOCAL_PARTITIONS, SHAPES, JdbcTable, run_comparison

NAME = "postgres"
TITLE = "PostgreSQL: JDBC sink vs Spark's JDBC writer and raw COPY"


class PostgresTable(JdbcTable):
    """A table in the durable PostgreSQL server."""

    label = NAME
    types: ClassVar[dict[str, str]] = {
        "key": "bigint PRIMARY KEY",
        "int": "integer",
        "bigint": "bigint",
        "double": "double precision",
        "text64": "text",
        "text24": "text",
        "timestamp": "timestamptz",
        "bool": "boolean",
        "date": "date",
    }
    raw_names = ("raw COPY", "raw COPY + merge")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        sink = pa.BufferOutputStream()
        pacsv.write_csv(self.arrow, sink, pacsv.WriteOptions(include_header=False))
        self.csv = sink.getvalue()

    def reset(self, *, filled: bool) -> None:
        self.env.sql(f"DROP TABLE IF EXISTS {self.name}", f"CREATE TABLE {self.name} ({self.ddl})")
        if filled:
            self.copy(self.name)
        self.env.sql(f"VACUUM ANALYZE {self.name}", "CHECKPOINT")

    def count(self) -> int:
        return int(self.env.sql(f"SELECT count(*) FROM {self.name}", fetch=True)[0][0])

    def drop(self) -> None:
        self.env.sql(f"DROP TABLE IF EXISTS {self.name}", f"DROP TABLE IF EXISTS {self.stage}")

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

    def raw_connect(self) -> Any:
        return self.env.pg.connect()

    def bulk_load(self, conn: Any, into: str) -> None:
        self.copy(into, conn)

    def temp_stage_sql(self) -> str:
        return f"CREATE TEMP TABLE stage ON COMMIT DROP AS SELECT * FROM {self.name} WITH NO DATA"

    def sink(self, name: str, **options: Any) -> Any:
        from twophase.connectors.jdbc import postgres_sink

        return postgres_sink(name, table=self.name, dsn=self.env.pg.dsn, **options)

    def jdbc_write(self, df: Any, table: str) -> None:
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

    def create_stage(self) -> None:
        self.env.sql(
            f"CREATE UNLOGGED TABLE IF NOT EXISTS {self.stage} (LIKE {self.name})",
            f"TRUNCATE {self.stage}",
        )

    def merge(self) -> None:
        conn = self.env.pg.connect()
        with conn.cursor() as cur:
            cur.execute(self.merge_sql(self.stage))
            cur.execute(f"TRUNCATE {self.stage}")
        conn.commit()
        conn.close()


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
        "shapes": {s: PostgresTable.ddl_of(s) for s in SHAPES},
        "server": "durable: fsync, synchronous_commit, full_page_writes on",
    }
    run_comparison(env, cmp, PostgresTable, rows, reps, warm_up=not quick)
    return cmp

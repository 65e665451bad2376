"""Comparison "mariadb": the MariaDB sink against Spark's JDBC writer and raw LOAD DATA.

Shapes, writers and the loop are those of every JDBC comparison (``bench_jdbc``). MariaDB's
parts:

* ``spark jdbc`` -- ``df.write.jdbc`` with MariaDB Connector/J 3.5 from Maven Central, tuned as a
  user would: ``batchsize=10000`` and bulk statements for every batch (``useBulkStmts=true``;
  Connector/J 3 removed ``rewriteBatchedStatements``, whose work its bulk protocol does). The URL
  uses the ``jdbc:mysql:`` scheme with ``permitMysqlScheme`` so that Spark picks its MySQL dialect
  (back-quoted identifiers); under ``jdbc:mariadb:`` Spark's generic dialect double-quotes column
  names, which MariaDB refuses. For upsert: into an InnoDB staging table, then one
  ``INSERT ... SELECT ... ON DUPLICATE KEY UPDATE`` and ``TRUNCATE`` on the driver.
* ``raw LOAD DATA`` -- the rows pre-rendered as CSV in a file, one ``LOAD DATA LOCAL INFILE`` on
  one PyMySQL connection; ``raw LOAD DATA + merge`` the same into a temporary table, then one
  ``INSERT ... SELECT ... ON DUPLICATE KEY UPDATE``.

The server is durable (``innodb_flush_log_at_trx_commit=1``, ``sync_binlog=1``, binary log on,
doublewrite on): every commit and XA PREPARE reaches the disk, as in production.
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
from bench_common import Comparison, Env
from bench_jdbc import INPUT_FILES, LOCAL_PARTITIONS, SHAPES, JdbcTable, run_comparison

NAME = "mariadb"
TITLE = "MariaDB: JDBC sink vs Spark's JDBC writer (Connector/J) and raw LOAD DATA"
JDBC_OPTIONS = "batchsize=10000, useBulkStmts=true"


class MariaDBTable(JdbcTable):
    """An InnoDB table in the durable MariaDB server."""

    label = NAME
    types: ClassVar[dict[str, str]] = {
        "key": "BIGINT PRIMARY KEY",
        "int": "INT",
        "bigint": "BIGINT",
        "double": "DOUBLE",
        "text64": "VARCHAR(64)",
        "text24": "VARCHAR(24)",
        "timestamp": "DATETIME(6)",
        "bool": "BOOLEAN",
        "date": "DATE",
    }
    raw_names = ("raw LOAD DATA", "raw LOAD DATA + merge")

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        # The raw path's file: UTC wall-clock timestamps for DATETIME, booleans as 0/1.
        columns = []
        for column in self.arrow.columns:
            if pa.types.is_timestamp(column.type):
                column = column.cast(pa.timestamp("us"))
            elif pa.types.is_boolean(column.type):
                column = pc.cast(column, pa.int8())
            columns.append(column)
        self.csv_path = self.env.work / f"{NAME}-{self.shape}.csv"
        pacsv.write_csv(
            pa.table(columns, names=self.columns),
            str(self.csv_path),
            pacsv.WriteOptions(include_header=False),
        )

    def sql(self, *statements: str, fetch: bool = False) -> Any:
        return self.env.maria_sql(*statements, fetch=fetch)

    def reset(self, *, filled: bool) -> None:
        self.sql(
            f"DROP TABLE IF EXISTS {self.name}",
            f"CREATE TABLE {self.name} ({self.ddl}) ENGINE=InnoDB",
        )
        if filled:
            conn = self._connect()
            self._load(conn, self.name)
            conn.commit()
            conn.close()

    def count(self) -> int:
        return int(self.sql(f"SELECT count(*) FROM {self.name}", fetch=True)[0][0])

    def drop(self) -> None:
        self.sql(f"DROP TABLE IF EXISTS {self.name}", f"DROP TABLE IF EXISTS {self.stage}")

    def _connect(self) -> Any:
        return self.env.maria.connect(local_infile=True)

    def _load(self, conn: Any, into: str) -> None:
        with conn.cursor() as cur:
            cur.execute(
                f"LOAD DATA LOCAL INFILE %s INTO TABLE {into} CHARACTER SET utf8mb4 "
                "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' LINES TERMINATED BY '\\n' "
                f"({', '.join(self.columns)})",
                (str(self.csv_path),),
            )
            cur.execute("SHOW COUNT(*) WARNINGS")
            warnings = int(cur.fetchone()[0])
        if warnings:
            raise RuntimeError(f"raw LOAD DATA into {into}: {warnings} warnings")

    def merge_sql(self, source: str) -> str:
        cols = ", ".join(self.columns)
        sets = ", ".join(f"{c} = VALUES({c})" for c in self.columns if c != "id")
        return (
            f"INSERT INTO {self.name} ({cols}) SELECT {cols} FROM {source} "
            f"ON DUPLICATE KEY UPDATE {sets}"
        )

    def raw_connect(self) -> Any:
        return self._connect()

    def bulk_load(self, conn: Any, into: str) -> None:
        self._load(conn, into)

    def temp_stage_sql(self) -> str:
        return f"CREATE TEMPORARY TABLE stage LIKE {self.name}"

    def sink(self, name: str, **options: Any) -> Any:
        from twophase.connectors.jdbc import mariadb_sink

        return mariadb_sink(name, table=self.name, url=self.env.maria.password_url, **options)

    def jdbc_write(self, df: Any, table: str) -> None:
        url = self.env.maria.jdbc_url.replace("jdbc:mariadb:", "jdbc:mysql:", 1)
        df.write.jdbc(
            f"{url}?permitMysqlScheme&useBulkStmts=true",
            table,
            mode="append",
            properties={
                "user": "twophase",
                "password": "twophase",
                "driver": "org.mariadb.jdbc.Driver",
                "batchsize": "10000",
            },
        )

    def create_stage(self) -> None:
        self.sql(
            f"CREATE TABLE IF NOT EXISTS {self.stage} LIKE {self.name}", f"TRUNCATE {self.stage}"
        )

    def merge(self) -> None:
        self.sql(self.merge_sql(self.stage), f"TRUNCATE {self.stage}")


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
        "jdbc_options": JDBC_OPTIONS,
        "shapes": {s: MariaDBTable.ddl_of(s) for s in SHAPES},
        "server": "durable: innodb_flush_log_at_trx_commit=1, sync_binlog=1, binary log on",
    }
    run_comparison(env, cmp, MariaDBTable, rows, reps, warm_up=not quick)
    return cmp

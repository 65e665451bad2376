"""End to end: a Spark Structured Streaming query writing into MariaDB, both protocols."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jdbc_support import mariadb_sql
from test_postgres_spark import ODD_NAMES, with_odd_names, write_files

import twophase
from tests.spark.helpers import run_to_end
from twophase.connectors.jdbc import mariadb_sink
from twophase.testing import assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.spark]


@pytest.fixture
def table(mariadb_server: Any) -> Iterator[str]:
    name = f"spark_{uuid.uuid4().hex[:12]}"
    yield name
    mariadb_server.rollback_prepared("tp:")
    conn = mariadb_server.connect(autocommit=True)
    with conn.cursor() as cur:
        cur.execute(f"SET STATEMENT lock_wait_timeout = 5 FOR DROP TABLE IF EXISTS `{name}`")
    conn.close()


_sql = mariadb_sql


def run(spark: Any, source: Path, checkpoint: Path, sink: Any, transform: Any) -> None:
    df = (
        spark.readStream.schema("id long, payload string, tags array<string>")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
    )
    run_to_end(transform(df), sink, checkpoint)


@pytest.mark.parametrize("protocol", ["coordinated", "markers"])
def test_streaming_query_writes_exactly_once_and_resumes_from_its_checkpoint(
    spark: Any, mariadb_server: Any, table: str, tmp_path: Path, protocol: str
) -> None:
    def sink() -> Any:
        return mariadb_sink(
            "maria_e2e",
            table=table,
            url=mariadb_server.password_url,
            protocol=protocol,
            create_table=True,
        )

    expected = write_files(tmp_path / "in", 0, 2)
    first = sink()
    run(spark, tmp_path / "in", tmp_path / "chk", first, with_odd_names)
    ids = [int(r[0]) for r in _sql(mariadb_server, f"SELECT id FROM `{table}`")]
    assert_exactly_once(ids, expected)
    assert [m.outcome for m in twophase.batch_metrics(first)] == ["committed", "committed"]
    assert [x for x in mariadb_server.prepared_xids() if x.startswith("tp:")] == []
    expected += write_files(tmp_path / "in", 2, 1)
    run(spark, tmp_path / "in", tmp_path / "chk", sink(), with_odd_names)
    ids = [int(r[0]) for r in _sql(mariadb_server, f"SELECT id FROM `{table}`")]
    assert_exactly_once(ids, expected)
    tags = _sql(mariadb_server, f"SELECT tags FROM `{table}` WHERE id = 1")
    assert json.loads(tags[0][0]) == ["t1"]
    odd = ", ".join("`" + name.replace("`", "``") + "`" for name in ODD_NAMES)
    assert _sql(mariadb_server, f"SELECT {odd} FROM `{table}` WHERE id = 2001") == [("p2001",) * 4]


def test_streaming_cdc_in_spark_keeps_a_keys_changes_together(
    spark: Any, mariadb_server: Any, table: str, tmp_path: Path
) -> None:
    """Creates in one partition, deletes of the same keys in another: the sink groups by key."""
    write_files(tmp_path / "in", 0, 1, rows=20)
    sink = mariadb_sink(
        "maria_cdc",
        table=table,
        url=mariadb_server.password_url,
        mode="cdc",
        key_columns=["id"],
        create_table=True,
    )

    def changes(df: Any) -> Any:
        from pyspark.sql import functions as f

        creates = df.withColumn("op", f.lit("c"))
        deletes = df.where(f.col("id") % 2 == 0).withColumn("op", f.lit("d"))
        # union keeps each side in partitions of its own, in this order
        return creates.union(deletes)

    run(spark, tmp_path / "in", tmp_path / "chk", sink, changes)
    ids = sorted(int(r[0]) for r in _sql(mariadb_server, f"SELECT id FROM `{table}`"))
    assert ids == [i for i in range(20) if i % 2 == 1]

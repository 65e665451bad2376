"""End to end: a Spark Structured Streaming query writing into PostgreSQL, both protocols."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from jdbc_support import PgTarget

import twophase
from tests.spark.helpers import run_to_end
from twophase.testing import assert_exactly_once

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def write_files(source: Path, first: int, count: int, rows: int = 50) -> list[int]:
    """One Parquet file per micro-batch (maxFilesPerTrigger=1), with increasing mtimes."""
    source.mkdir(parents=True, exist_ok=True)
    written: list[int] = []
    for batch in range(first, first + count):
        ids = [batch * 1000 + i for i in range(rows)]
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "payload": [f"p{i}" for i in ids],
                "tags": pa.array([[f"t{i % 3}"] for i in ids], pa.list_(pa.string())),
            }
        )
        path = source / f"part-{batch:04d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))
        written += ids
    return written


#: Column names Spark allows that SQL text reads otherwise (a struct's field, a syntax error...):
#: written as they are, into columns of the same names (``create_table=True``).
ODD_NAMES = ("dot.ted", "back`tick", "with space", "ünï")


def with_odd_names(df: Any) -> Any:
    """Add a copy of ``payload`` under each of :data:`ODD_NAMES`, then repartition in 3."""
    from pyspark.sql import functions as sf

    return df.select("*", *[sf.col("payload").alias(name) for name in ODD_NAMES]).repartition(3)


def run(spark: Any, source: Path, checkpoint: Path, sink: Any, transform: Any = None) -> None:
    df = (
        spark.readStream.schema("id long, payload string, tags array<string>")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(source))
    )
    if transform is not None:
        df = transform(df)
    run_to_end(df, sink, checkpoint)


def test_streaming_query_writes_exactly_once_and_resumes_from_its_checkpoint(
    spark: Any, pg: PgTarget, table: str, tmp_path: Path
) -> None:
    expected = write_files(tmp_path / "in", 0, 2)
    sink = pg.sink("spark_e2e", table, create_table=True)
    run(spark, tmp_path / "in", tmp_path / "chk", sink, with_odd_names)
    assert_exactly_once(pg.ids(table), expected)
    assert [m.outcome for m in twophase.batch_metrics(sink)] == ["committed", "committed"]
    assert pg.prepared() == []
    expected += write_files(tmp_path / "in", 2, 1)
    sink = pg.sink("spark_e2e", table)  # a restart of the application
    run(spark, tmp_path / "in", tmp_path / "chk", sink, with_odd_names)
    assert_exactly_once(pg.ids(table), expected)
    tags = pg.sql(f'SELECT tags FROM "{table}" WHERE id = 1')
    assert tags == [(["t1"],)]
    odd = ", ".join('"' + name.replace('"', '""') + '"' for name in ODD_NAMES)
    assert pg.sql(f'SELECT {odd} FROM "{table}" WHERE id = 2001') == [("p2001",) * 4]


def test_streaming_upsert_repartitioned_by_key(
    spark: Any, pg: PgTarget, table: str, tmp_path: Path
) -> None:
    write_files(tmp_path / "in", 0, 2, rows=20)
    sink = pg.sink("spark_upsert", table, mode="upsert", key_columns=["id"], create_table=True)

    def by_key(df: Any) -> Any:
        from pyspark.sql import functions as f

        # Both batches write ids 0..19 (modulo 1000): the second updates the first.
        return df.withColumn("id", f.col("id") % 1000).repartition(2, "id")

    run(spark, tmp_path / "in", tmp_path / "chk", sink, by_key)
    rows = pg.rows(table)
    assert [r[0] for r in rows] == list(range(20))
    assert all(r[1] == f"p{1000 + r[0]}" for r in rows), rows[:3]

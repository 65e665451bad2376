"""``key_by`` on a real DataFrame: a batch of many splits is coalesced, then routed, in order."""

from __future__ import annotations

from typing import Any

import pytest

from twophase._spark._classic import SparkBatchExecution

pytestmark = pytest.mark.spark


def _routed(spark: Any, *, coalesce: bool) -> tuple[SparkBatchExecution, str]:
    # 32 splits of 10 consecutive ids: the batch's order is id order; 5 keys over 4 transactions.
    df = spark.range(0, 320, numPartitions=32).selectExpr("id", "id % 5 AS k")
    execution = SparkBatchExecution(df, 0)
    execution.route_after_coalescing = coalesce
    execution.key_by(("k",), 4)
    return execution, str(execution.df._jdf.queryExecution().executedPlan().toString())


def test_many_splits_are_coalesced_to_the_transactions_before_the_shuffle(spark: Any) -> None:
    execution, plan = _routed(spark, coalesce=True)
    # One shuffle map task per transaction, not per split: Spark's optimizer would drop a
    # coalesce followed by a repartition (CollapseRepartition) unless something sits between.
    assert "Coalesce 4" in plan
    from pyspark.sql import functions as sf

    # JVM only (no Python worker): each row with its partition, partitions and rows in order.
    rows = execution.df.withColumn("p", sf.spark_partition_id()).collect()
    partitions: list[list[tuple[int, int]]] = [[] for _ in range(4)]
    for row in rows:
        partitions[row.p].append((row.k, row.id))
    where: dict[int, int] = {}
    for index, rows in enumerate(partitions):
        for key, _id in rows:
            assert where.setdefault(key, index) == index  # every row of a key in one partition
        for key in {k for k, _ in rows}:
            ids = [i for k, i in rows if k == key]
            assert ids == sorted(ids)  # in the batch's order
    assert sorted(i for rows in partitions for _, i in rows) == list(range(320))


def test_without_coalescing_the_shuffle_reads_every_split(spark: Any) -> None:
    execution, plan = _routed(spark, coalesce=False)
    assert "Coalesce" not in plan  # the control: the map side runs one task per split
    assert execution.num_partitions() == 4

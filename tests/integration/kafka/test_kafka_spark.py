"""End to end in Spark: Kafka source -> twophase KafkaSink -> read_committed consumer.

A streaming query reads a real topic with Spark's Kafka source and writes it
through ``KafkaSink`` (``foreachBatch``, Arrow data path, executors in Python
workers with their producer pool). It runs in several micro-batches, stops,
and is restarted from its checkpoint with more input: a ``read_committed``
consumer of the target topic must see every source record exactly once, keys
and values intact.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka_support import kafka_stream

import twophase
from tests.spark.helpers import run_to_end
from twophase.connectors.kafka import KafkaSink
from twophase.testing import assert_exactly_once
from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def produce(bootstrap: str, topic: str, ids: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in ids:
        producer.produce(topic, value=f"{i}".encode(), key=f"k{i}".encode())
    assert producer.flush(30) == 0


def run_query(spark: Any, bootstrap: str, source: str, sink: KafkaSink, checkpoint: Path) -> None:
    events = (
        kafka_stream(spark, bootstrap, source, maxOffsetsPerTrigger=120).selectExpr(
            "CAST(key AS STRING) AS key", "value"
        )  # value stays binary
    )
    run_to_end(events, sink, checkpoint, timeout=240)


def test_spark_query_writes_exactly_once_across_a_restart(
    spark: Any,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Any]],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source, target = make_topic(2, prefix="spark-src"), make_topic(3, prefix="spark-dst")
    checkpoint = tmp_path / "checkpoint"
    sink = KafkaSink(
        "spark-e2e",
        bootstrap_servers=bootstrap,
        topic=target,
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
    )
    produce(bootstrap, source, range(300))
    run_query(spark, bootstrap, source, sink, checkpoint)
    first = read_topic(target)
    assert_exactly_once([int(r.value) for r in first], range(300))
    assert twophase.batch_metrics(sink), "no metrics recorded"
    assert len(twophase.batch_metrics(sink)) >= 3, "expected several micro-batches"

    produce(bootstrap, source, range(300, 450))
    restarted = KafkaSink(
        "spark-e2e", bootstrap_servers=bootstrap, topic=target, control_topic=sink.control_topic
    )
    run_query(spark, bootstrap, source, restarted, checkpoint)
    records = read_topic(target)
    assert_exactly_once([int(r.value) for r in records], range(450))
    assert all(r.key == b"k" + r.value for r in records)

"""Poison rows through Spark: the stream keeps running, good and bad records each land once.

A streaming query reads a real topic with Spark's Kafka source and writes it through
``KafkaSink(bad_rows="dead_letter")`` with ``twophase.write_stream``. Every tenth record is
too large for the target topic's ``max.message.bytes`` and every tenth (offset by five) has
a null topic: both are set aside in the dead-letter topic, in the same transactions as the
good records, and a second run from the checkpoint adds only the new records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka_support import kafka_stream

from tests.spark.helpers import run_to_end
from twophase.connectors.kafka import KafkaSink
from twophase.connectors.kafka._dead_letters import decode
from twophase.testing import assert_exactly_once
from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]


def produce(bootstrap: str, topic: str, ids: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in ids:
        producer.produce(topic, value=f"{i}".encode(), key=f"{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def run(spark: Any, bootstrap: str, source: str, target: str, sink: KafkaSink, chk: Path) -> None:
    events = (
        kafka_stream(spark, bootstrap, source)
        .selectExpr("CAST(key AS STRING) AS key", "CAST(CAST(value AS STRING) AS INT) AS id")
        .selectExpr(
            "key",
            "CASE WHEN id % 10 = 0 THEN repeat('x', 30000) ELSE CAST(id AS STRING) END AS value",
            f"CASE WHEN id % 10 = 5 THEN NULL ELSE '{target}' END AS topic",
        )
    )
    run_to_end(events, sink, chk, timeout=180)


def test_poison_rows_are_dead_lettered_exactly_once_and_the_stream_goes_on(
    spark: Any,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Any]],
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    source = make_topic(2, prefix="spark-dl-src")
    target = make_topic(3, prefix="spark-dl-dst", config={"max.message.bytes": "20000"})
    dead = make_topic(1, prefix="spark-dl-dlq")
    sink = KafkaSink(
        "spark-dl",
        bootstrap_servers=bootstrap,
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
        producer_config={"batch.size": 16000},
        bad_rows="dead_letter",
        dead_letter_topic=dead,
    )
    produce(bootstrap, source, range(40))
    run(spark, bootstrap, source, target, sink, tmp_path / "chk")
    produce(bootstrap, source, range(40, 60))
    run(spark, bootstrap, source, target, sink, tmp_path / "chk")

    good = [i for i in range(60) if i % 10 not in (0, 5)]
    assert_exactly_once([int(r.key) for r in read_topic(target)], good)
    letters = [decode(r.value) for r in read_topic(dead)]
    assert_exactly_once(
        [int(d.values()["key"]) for d in letters], [i for i in range(60) if i % 10 in (0, 5)]
    )
    classes = {int(d.values()["key"]) % 10: (d.error_class, d.column) for d in letters}
    assert classes == {0: ("too_large", "value"), 5: ("invalid_value", "topic")}
    assert {d.sink for d in letters} == {"spark-dl"}

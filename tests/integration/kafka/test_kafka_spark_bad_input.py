"""Bad input through Spark: the query stops with the named error; fixed and restarted, exactly once.

A streaming query reads a real topic with Spark's Kafka source and writes it through
``KafkaSink``. A schema error (an ``int`` value) stops it on the driver before anything is
written; a row error (a topic column naming a topic that does not exist) stops it in the
executors' Python workers, within seconds, every attempt of every task failing on the same
missing topic. Either way a ``read_committed`` consumer sees nothing; once the cause is fixed
the query restarts from its checkpoint, replays the batch and every record lands exactly once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from kafka_support import kafka_stream
from pyspark.errors import StreamingQueryException

import twophase
from twophase.connectors.kafka import KafkaSink
from twophase.errors import ConfigurationError
from twophase.testing import assert_exactly_once
from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.timeout(300)]

ReadTopic = Callable[..., list[Any]]


def produce(bootstrap: str, topic: str, ids: range) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in ids:
        producer.produce(topic, value=f"{i}".encode(), key=f"{i}".encode(), partition=i % 2)
    assert producer.flush(30) == 0


def start(
    spark: Any, bootstrap: str, source: str, sink: KafkaSink, checkpoint: Path, *exprs: str
) -> Any:
    events = kafka_stream(spark, bootstrap, source).selectExpr(*exprs)
    return twophase.write_stream(
        events, sink, checkpoint_location=str(checkpoint), trigger={"availableNow": True}
    ).start()


def run_to_failure(query: Any) -> ConfigurationError:
    """Run the query until it fails; return the twophase error, taken back out by class."""
    try:
        with pytest.raises(ConfigurationError) as info:
            twophase.await_termination(query, 120)
    finally:
        query.stop()
    assert isinstance(info.value.__cause__, StreamingQueryException)
    return info.value


def run_to_end(query: Any) -> None:
    try:
        assert query.awaitTermination(120), "the query did not finish in time"
    finally:
        query.stop()
    assert query.exception() is None, query.exception()


@pytest.fixture
def source(kafka_broker: KafkaBroker, make_topic: Callable[..., str]) -> str:
    topic = make_topic(2, prefix="spark-bad-src")
    produce(kafka_broker.bootstrap_servers, topic, range(40))
    return topic


def test_a_wrong_column_type_stops_the_query_before_writing_then_the_fix_resumes_it(
    spark: Any,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: ReadTopic,
    source: str,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    target = make_topic(3, prefix="spark-bad-dst")
    sink = KafkaSink(
        "spark-bad-type",
        bootstrap_servers=bootstrap,
        topic=target,
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
    )
    checkpoint = tmp_path / "checkpoint"
    key = "CAST(key AS STRING) AS key"
    query = start(
        spark,
        bootstrap,
        source,
        sink,
        checkpoint,
        key,
        "CAST(CAST(value AS STRING) AS INT) AS value",
    )
    error = run_to_failure(query)
    assert (error.sink, error.batch_id, error.column) == ("spark-bad-type", 0, "value")
    assert "column 'value' has type int32" in error.message
    assert not error.restartable
    assert read_topic(target) == []

    fixed = KafkaSink(
        "spark-bad-type",
        bootstrap_servers=bootstrap,
        topic=target,
        control_topic=sink.control_topic,
    )
    run_to_end(start(spark, bootstrap, source, fixed, checkpoint, key, "value"))
    assert_exactly_once([int(r.key) for r in read_topic(target)], range(40))


def test_an_unknown_topic_stops_the_query_within_seconds_then_creating_it_resumes_it(
    spark: Any,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: ReadTopic,
    source: str,
    tmp_path: Path,
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    target = make_topic(3, prefix="spark-bad-dst")
    missing = f"spark-bad-missing-{uuid.uuid4().hex[:8]}"
    sink = KafkaSink(
        "spark-bad-topic", bootstrap_servers=bootstrap, control_topic=f"ctl-{uuid.uuid4().hex[:12]}"
    )
    checkpoint = tmp_path / "checkpoint"
    exprs = (
        "CAST(key AS STRING) AS key",
        "value",
        f"IF(CAST(CAST(key AS STRING) AS INT) % 5 = 0, '{missing}', '{target}') AS topic",
    )
    started = time.monotonic()
    error = run_to_failure(start(spark, bootstrap, source, sink, checkpoint, *exprs))
    elapsed = time.monotonic() - started
    # Raised in a task: the partition is named too.
    assert (error.sink, error.batch_id, error.column) == ("spark-bad-topic", 0, "topic")
    assert error.partition_id is not None
    assert f"names topic '{missing}'" in error.message
    assert "does not exist" in error.message
    # Every attempt of every task failed at once: nowhere near librdkafka's 30 s wait. Both
    # source partitions hold rows for the missing topic: no partition committed.
    assert elapsed < 40, f"the query took {elapsed:.0f} s to fail"
    assert read_topic(target) == []

    kafka_broker.create_topic(missing, partitions=1)  # the fix
    restarted = KafkaSink(
        "spark-bad-topic", bootstrap_servers=bootstrap, control_topic=sink.control_topic
    )
    run_to_end(start(spark, bootstrap, source, restarted, checkpoint, *exprs))
    to_missing = [int(r.key) for r in read_topic(missing)]
    to_target = [int(r.key) for r in read_topic(target)]
    assert_exactly_once(to_missing, range(0, 40, 5))
    assert_exactly_once(to_target, [i for i in range(40) if i % 5])

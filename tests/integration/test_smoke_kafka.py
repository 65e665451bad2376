"""Smoke test: the local Kafka broker really gives transactional read-committed semantics."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient

from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _produce_in_transaction(
    producer: Producer, topic: str, values: list[str], commit: bool
) -> None:
    producer.begin_transaction()
    for i, value in enumerate(values):
        producer.produce(topic, key=str(i).encode(), value=value.encode(), partition=i % 2)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def _read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[str]:
    """Read every partition of ``topic`` up to its end (last stable offset for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"smoke-{uuid.uuid4().hex}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    values: list[str] = []
    at_end: set[int] = set()
    try:
        consumer.subscribe([topic])
        for _ in range(600):  # bounded: at most ~60 s of polling
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            error = msg.error()
            if error is not None:
                assert error.code() == KafkaError._PARTITION_EOF, error
                partition = msg.partition()
                assert partition is not None
                at_end.add(partition)
                if len(at_end) == partitions:
                    break
                continue
            value = msg.value()
            assert value is not None
            values.append(value.decode())
        else:
            pytest.fail(f"{isolation} consumer did not reach the end of {topic}")
    finally:
        consumer.close()
    return sorted(values)


def test_committed_transactions_are_visible_and_aborted_ones_are_not(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(2, prefix="smoke-txn")
    producer = Producer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "transactional.id": f"smoke-{uuid.uuid4().hex}",
            "enable.idempotence": True,
        }
    )
    producer.init_transactions(60)
    committed_first = [f"committed-{i}" for i in range(5)]
    aborted = [f"aborted-{i}" for i in range(5)]
    committed_last = [f"committed-{i}" for i in range(5, 10)]
    _produce_in_transaction(producer, topic, committed_first, commit=True)
    _produce_in_transaction(producer, topic, aborted, commit=False)
    _produce_in_transaction(producer, topic, committed_last, commit=True)

    read_committed = _read_all(kafka_broker.bootstrap_servers, topic, 2, "read_committed")
    read_uncommitted = _read_all(kafka_broker.bootstrap_servers, topic, 2, "read_uncommitted")

    assert read_committed == sorted(committed_first + committed_last)
    # The aborted records are in the log: a reader that ignores transactions sees them, so the
    # assertion above would fail if the broker did not honour the abort.
    assert read_uncommitted == sorted(committed_first + aborted + committed_last)


def test_topics_are_not_created_implicitly(kafka_broker: KafkaBroker) -> None:
    if not kafka_broker.managed:
        pytest.skip("an external broker may allow auto-creation")
    name = f"never-created-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": kafka_broker.bootstrap_servers})
    error = admin.list_topics(name, timeout=10).topics[name].error
    assert error is not None
    assert error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

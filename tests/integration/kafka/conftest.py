"""Fixtures of the Kafka connector's integration tests (real broker from ``kafka_broker``).

- ``kafka_sink``: ``make(name="k", *, topic=..., partitions=3, open_it=False, **kwargs)`` builds
  a ``KafkaSink`` writing to a fresh topic, with its own control topic and short timeouts;
  ``open_it`` runs ``open()`` (creating the control topic) as the coordinator would.
- ``read_topic``: ``read(topic, isolation="read_committed") -> list[Record]`` reads every
  partition from the beginning to its end (the last stable offset for ``read_committed``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from twophase import SinkContext
from twophase.connectors.kafka import KafkaSink, _pool
from twophase_dev import KafkaBroker


@dataclass(frozen=True)
class Record:
    """One record as a consumer saw it."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Record]:
    """Read every partition of ``topic`` up to its end; fail after 30 s."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        partitions = sorted(meta.partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        out: list[Record] = []
        at_end: set[int] = set()
        deadline = time.monotonic() + 30
        while len(at_end) < len(partitions):
            assert time.monotonic() < deadline, f"{isolation} reader stalled on {topic}"
            for msg in consumer.consume(500, 0.1):
                err = msg.error()
                if err is not None:
                    assert err.code() == KafkaError._PARTITION_EOF, err
                    at_end.add(msg.partition())
                    continue
                out.append(
                    Record(
                        msg.topic(),
                        msg.partition(),
                        msg.offset(),
                        msg.key(),
                        msg.value(),
                        tuple(msg.headers() or ()),
                    )
                )
        return out
    finally:
        consumer.close()


@pytest.fixture
def read_topic(kafka_broker: KafkaBroker) -> Callable[..., list[Record]]:
    def read(topic: str, isolation: str = "read_committed") -> list[Record]:
        return read_all(kafka_broker.bootstrap_servers, topic, isolation)

    return read


@pytest.fixture
def kafka_sink(
    kafka_broker: KafkaBroker, make_topic: Callable[..., str]
) -> Iterator[Callable[..., KafkaSink]]:
    def make(
        name: str = "k",
        *,
        topic: str | None = None,
        partitions: int = 3,
        open_it: bool = False,
        **kwargs: Any,
    ) -> KafkaSink:
        kwargs.setdefault("control_topic", f"ctl-{uuid.uuid4().hex[:12]}")
        kwargs.setdefault("operation_timeout", 15.0)
        sink = KafkaSink(
            name,
            bootstrap_servers=kafka_broker.bootstrap_servers,
            topic=topic if topic is not None else make_topic(partitions, prefix="kt"),
            **kwargs,
        )
        if open_it:  # what the coordinator does first: creates the control topic
            query = uuid.uuid4().hex
            sink.open(SinkContext(name, f"{name}.{query[:16]}", query, uuid.uuid4().hex, ""))
        return sink

    yield make
    _pool.clear()

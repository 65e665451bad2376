"""``twophase abort-in-doubt`` against the real broker: fence the slots of a lost checkpoint."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from twophase._cli import main
from twophase.connectors.kafka import KafkaSink
from twophase_dev import KafkaBroker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _offsets(bootstrap: str, topic: str, isolation: Any) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = {TopicPartition(topic, 0): OffsetSpec.latest()}
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=15)
    (future,) = futures.values()
    return int(future.result().offset)


def test_abort_in_doubt_fences_the_slot_holding_an_open_transaction(
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = make_topic(1, prefix="cli")
    control = f"ctl-{uuid.uuid4().hex[:12]}"
    identity = "lost.0123456789abcdef"
    sink = KafkaSink("lost", bootstrap_servers=bootstrap, topic=topic, control_topic=control)
    # A task of the lost query died with its transaction open on slot 0.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": sink.transactional_id(identity, 0)}
    )
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"never committed")
    producer.flush(15)
    stable = _offsets(bootstrap, topic, IsolationLevel.READ_COMMITTED)
    high = _offsets(bootstrap, topic, IsolationLevel.READ_UNCOMMITTED)
    assert stable < high, "the open transaction should hold the last stable offset back"
    target = [
        "--target",
        "twophase.connectors.kafka:KafkaSink",
        "-o",
        f"bootstrap_servers={bootstrap}",
        "-o",
        f"topic={topic}",
        "-o",
        f"control_topic={control}",
    ]
    assert main(["abort-in-doubt", "--identity", identity, "--slots", "1", *target]) == 2
    assert sink.transactional_id(identity, 0) in capsys.readouterr().out
    assert main(["abort-in-doubt", "--identity", identity, "--slots", "1", *target, "--yes"]) == 0
    stable = _offsets(bootstrap, topic, IsolationLevel.READ_COMMITTED)
    high = _offsets(bootstrap, topic, IsolationLevel.READ_UNCOMMITTED)
    assert stable == high, "the fenced transaction is still open"

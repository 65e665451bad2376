"""Helpers shared by the Kafka connector's integration tests (imported by name).

A module of its own, not ``conftest``: several test folders have a ``conftest.py``, so
``from conftest import ...`` could pick another folder's.

- :func:`read_all` / :class:`Record`: read a topic to its end, as a consumer sees it;
- :class:`SecuredBroker`: a broker with SASL/PLAIN and ACLs (the ``secured_broker`` fixture),
  where ``User:alice`` (:data:`SASL_USER`, :data:`SASL_PASSWORD`) may do only what was granted.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from twophase.connectors.kafka import KafkaSink
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


def kafka_stream(spark: Any, bootstrap: str, topic: str, **options: Any) -> Any:
    """A streaming DataFrame of ``topic`` from its earliest offsets (Spark's Kafka source)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


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


#: The one SASL/PLAIN user of the secured broker, and its password.
SASL_USER = "alice"
SASL_PASSWORD = "alice-Pa55-w0rd-7Qx"


@dataclass(frozen=True)
class SecuredBroker:
    """A broker with SASL/PLAIN and ACLs; ``User:alice`` may do only what was granted."""

    broker: KafkaBroker
    #: The SASL_PLAINTEXT listener, for ``User:alice``.
    sasl_bootstrap: str

    @property
    def admin_bootstrap(self) -> str:
        """The PLAINTEXT listener: principal ``ANONYMOUS``, a super user."""
        return self.broker.bootstrap_servers

    def client_config(self, password: str = SASL_PASSWORD) -> dict[str, Any]:
        """Producer settings of ``User:alice`` (with another ``password`` to fail)."""
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": SASL_USER,
            "sasl.password": password,
        }

    def create_topic(self, partitions: int = 1, *, prefix: str = "sec") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        self.broker.create_topic(name, partitions=partitions)
        return name

    def grant(
        self,
        resource: ResourceType,
        name: str,
        *operations: AclOperation,
        pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    ) -> None:
        """Allow ``User:alice`` the operations on the resource."""
        admin = AdminClient({"bootstrap.servers": self.admin_bootstrap})
        bindings = [
            AclBinding(
                resource, name, pattern, f"User:{SASL_USER}", "*", op, AclPermissionType.ALLOW
            )
            for op in operations
        ]
        for future in admin.create_acls(bindings).values():
            future.result(timeout=30)

    def grant_sink(
        self, sink: KafkaSink, *topics: str, withhold: tuple[str, AclOperation] | None = None
    ) -> None:
        """Grant what ``docs/kafka.md`` lists for a sink (but ``withhold``: topic, operation).

        Wait for the last one with :meth:`wait_allowed` on the last of ``topics``.
        """
        wanted: list[tuple[ResourceType, str, AclOperation, ResourcePatternType]] = []
        for op in (
            AclOperation.WRITE,
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.CREATE,
            AclOperation.DESCRIBE_CONFIGS,
        ):
            wanted.append((ResourceType.TOPIC, sink.control_topic, op, ResourcePatternType.LITERAL))
        prefix = sink.options.transactional_id_prefix
        for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
            wanted.append((ResourceType.TRANSACTIONAL_ID, prefix, op, ResourcePatternType.PREFIXED))
        wanted.append(
            (
                ResourceType.BROKER,
                "kafka-cluster",
                AclOperation.DESCRIBE_CONFIGS,
                ResourcePatternType.LITERAL,
            )
        )
        # The topics last: once the last ACL is in force, all are (they apply in order).
        for topic in topics:
            for op in (AclOperation.WRITE, AclOperation.DESCRIBE):
                wanted.append((ResourceType.TOPIC, topic, op, ResourcePatternType.LITERAL))
        for resource, name, op, pattern in wanted:
            if withhold != (name, op):
                self.grant(resource, name, op, pattern=pattern)

    def wait_allowed(self, topic: str, *operations: AclOperation, timeout: float = 15.0) -> None:
        """Wait until ``User:alice`` may do ``operations`` on the topic (ACLs apply later)."""
        client = AdminClient(self.client_config())
        wanted = set(operations or (AclOperation.DESCRIBE,))
        deadline = time.monotonic() + timeout
        while True:
            future = client.describe_topics(
                TopicCollection([topic]), include_authorized_operations=True, request_timeout=5
            )[topic]
            try:
                if wanted <= set(future.result().authorized_operations or ()):
                    return
            except KafkaException:
                pass  # not describable yet
            assert time.monotonic() < deadline, f"{topic}: {wanted} never granted"
            time.sleep(0.1)


def unstable_partitions(bootstrap: str, topics: Sequence[str]) -> list[str]:
    """Partitions of ``topics`` whose last stable offset is below the high watermark."""
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    metadata = admin.list_topics(timeout=30)
    request = {
        TopicPartition(t, p): OffsetSpec.latest()
        for t in topics
        if t in metadata.topics
        for p in metadata.topics[t].partitions
    }
    assert request, f"none of {topics} exists"

    def offsets(level: Any) -> dict[tuple[str, int], int]:
        futures = admin.list_offsets(request, isolation_level=level, request_timeout=30)
        return {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}

    stable = offsets(IsolationLevel.READ_COMMITTED)
    high = offsets(IsolationLevel.READ_UNCOMMITTED)
    return [
        f"{t}[{p}]: last stable offset {stable[(t, p)]} < high watermark {high[(t, p)]}"
        for (t, p) in sorted(high)
        if stable[(t, p)] < high[(t, p)]
    ]


def secured_config(port: int, controller_port: int, sasl_port: int) -> dict[str, str]:
    loopback = "127.0.0.1"
    return {
        "listeners": f"PLAINTEXT://{loopback}:{port},SASL_PLAINTEXT://{loopback}:{sasl_port},"
        f"CONTROLLER://{loopback}:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://{loopback}:{port},"
        f"SASL_PLAINTEXT://{loopback}:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,"
        "CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{SASL_USER}="{SASL_PASSWORD}";'
        ),
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The broker, the controller and the tests' admin connect over PLAINTEXT.
        "super.users": "User:ANONYMOUS",
    }

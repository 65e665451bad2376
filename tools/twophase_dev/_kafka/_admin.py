"""Talking to running Kafka brokers as their administrator: serving, topics, leaders, replicas.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from twophase_dev._errors import DevInfraError
from twophase_dev._host._wait import wait_until

__all__ = [
    "broker_ids",
    "create_topic",
    "has_broker",
    "java_string_hash",
    "partition_leaders",
    "under_replicated",
]


def has_broker(bootstrap_servers: str) -> bool:
    """Tell whether the broker at ``bootstrap_servers`` answers a metadata request naming itself."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=2.0)
    except Exception:
        return False
    return len(metadata.brokers) >= 1


def create_topic(
    bootstrap_servers: str,
    name: str,
    partitions: int,
    config: Mapping[str, str],
    timeout: float,
    replication_factor: int = 1,
) -> None:
    """Create topic ``name`` and wait until its partitions have leaders (see ``KafkaBroker``)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics(
        [
            NewTopic(
                name,
                num_partitions=partitions,
                replication_factor=replication_factor,
                config=dict(config),
            )
        ],
        operation_timeout=timeout,
    )
    try:
        futures[name].result(timeout=timeout)
    except Exception as exc:
        raise DevInfraError(f"could not create topic {name!r}: {exc}") from exc

    def has_leaders() -> bool:
        topic = admin.list_topics(name, timeout=5.0).topics.get(name)
        return (
            topic is not None
            and topic.error is None
            and len(topic.partitions) == partitions
            and all(p.leader >= 0 for p in topic.partitions.values())
        )

    if not wait_until(has_leaders, timeout=timeout):
        raise DevInfraError(f"topic {name!r} has no leader for every partition after {timeout} s")


def _metadata(bootstrap_servers: str, timeout: float = 5.0) -> Any:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})
    return admin.list_topics(timeout=timeout)


def broker_ids(bootstrap_servers: str) -> set[int]:
    """Return the ids of the brokers the cluster's metadata lists (registered and not fenced)."""
    return set(_metadata(bootstrap_servers).brokers)


def partition_leaders(bootstrap_servers: str, topic: str) -> dict[int, int]:
    """Return each partition of ``topic`` and the id of its leader (-1: none now).

    Raises
    ------
    DevInfraError
        If the topic does not exist.
    """
    found = _metadata(bootstrap_servers).topics.get(topic)
    if found is None or found.error is not None:
        raise DevInfraError(f"topic {topic!r} is not in the cluster's metadata")
    return {p.id: p.leader for p in found.partitions.values()}


def under_replicated(
    bootstrap_servers: str, topics: Sequence[str] | None, brokers: int
) -> list[str]:
    """Say what is not fully replicated: missing brokers, partitions without a leader or full ISR.

    Parameters
    ----------
    bootstrap_servers : str
        Where to ask.
    topics : sequence of str or None
        The topics to look at; every topic (the internal ones included) when ``None``.
    brokers : int
        How many brokers the cluster must list.

    Returns
    -------
    list of str
        One line per problem; empty when every replica is in sync.
    """
    metadata = _metadata(bootstrap_servers)
    problems = []
    if len(metadata.brokers) < brokers:
        problems.append(f"brokers {sorted(metadata.brokers)} of {brokers}")
    for name in topics if topics is not None else sorted(metadata.topics):
        topic = metadata.topics.get(name)
        if topic is None or topic.error is not None:
            problems.append(f"{name}: not in the metadata")
            continue
        for p in topic.partitions.values():
            if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas):
                problems.append(f"{name}[{p.id}]: leader {p.leader}, isr {p.isrs} of {p.replicas}")
    return problems


def java_string_hash(text: str) -> int:
    """Return Java's ``String.hashCode()`` of ``text`` (a signed 32-bit int over UTF-16 units).

    Kafka places a ``transactional.id`` on partition ``abs(hashCode) % partitions`` of
    ``__transaction_state``, whose leader is the id's transaction coordinator.
    """
    units = text.encode("utf-16-be")
    value = 0
    for i in range(0, len(units), 2):
        value = (value * 31 + int.from_bytes(units[i : i + 2], "big")) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value

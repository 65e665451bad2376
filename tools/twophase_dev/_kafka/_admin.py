"""Talking to a running Kafka broker as its administrator: is it serving, make a topic.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

from collections.abc import Mapping

from twophase_dev._errors import DevInfraError
from twophase_dev._host._wait import wait_until

__all__ = ["create_topic", "has_broker"]


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
) -> None:
    """Create topic ``name`` and wait until its partitions have leaders (see ``KafkaBroker``)."""
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=dict(config))],
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

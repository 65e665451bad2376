"""Driver-side checks against the cluster: settings, broker limits and the control topic."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, TopicCollection
from confluent_kafka.admin import AdminClient

from twophase.errors import ConfigurationError

from ._compat import AclOperation, ConfigResource, NewTopic, ResourceType
from ._contact import connect
from ._dead_letters import ensure_dead_letter_topic
from ._errors import KafkaErrorContext, kafka_error_of, map_kafka_error
from ._fencing import build_producer, transactional_id
from ._options import KafkaOptions
from ._row_errors import topic_limits

__all__ = [
    "CONTROL_TOPIC_CONFIG",
    "broker_max_transaction_timeout",
    "check_cluster",
    "check_topic_exists",
    "describe_topic",
    "ensure_control_topic",
    "require_operations",
]

_log = logging.getLogger("twophase.connectors.kafka")

#: Configuration of a control topic the sink creates. Compaction keeps every
#: marker that is not tombstoned (no time- or size-based deletion ever removes a
#: marker a replay still needs); small segments let compaction catch up; tombstones
#: of finished batches need not outlive an hour (only this sink reads the topic).
CONTROL_TOPIC_CONFIG: Mapping[str, str] = {
    "cleanup.policy": "compact",
    "segment.ms": "3600000",
    "min.cleanable.dirty.ratio": "0.1",
    "delete.retention.ms": "3600000",
}

_DENIED = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.POLICY_VIOLATION,
    }
)


def check_cluster(options: KafkaOptions, identity: str) -> None:
    """Check the settings against the cluster and create the control topic (``open``).

    Parameters
    ----------
    options
        The sink's settings.
    identity
        The sink identity token.

    Raises
    ------
    ConfigurationError
        When ``transaction.timeout.ms`` exceeds the brokers'
        ``transaction.max.timeout.ms``, librdkafka refuses the producer
        settings, the brokers refuse the credentials, the default topic does
        not exist or may not be written, or the control topic is missing and
        cannot be created (or is not compacted, or may not be written and
        read).
    RetriableError
        When no broker answers within ``operation_timeout`` (naming
        ``bootstrap.servers``).
    """
    sink, timeout = options.sink, options.operation_timeout
    admin, brokers = connect(options)
    limit = broker_max_transaction_timeout(admin, brokers, sink=sink, timeout=timeout)
    if limit is not None and options.transaction_timeout_ms > limit:
        raise ConfigurationError(
            f"transaction.timeout.ms={options.transaction_timeout_ms} exceeds the brokers' "
            f"transaction.max.timeout.ms={limit}; lower transaction_timeout_ms",
            sink=sink,
            setting="transaction_timeout_ms",
        )
    # librdkafka checks the producer settings when a producer is built;
    # build one now so that a typo fails here, not inside a task.
    build_producer(options, transactional_id(options, identity, -1)).close()
    ensure_control_topic(
        admin,
        options.control_topic,
        sink=sink,
        create=options.create_control_topic,
        partitions=options.control_topic_partitions,
        replication_factor=options.control_topic_replication_factor,
        timeout=timeout,
    )
    control = describe_topic(admin, options.control_topic, sink=sink, timeout=timeout)
    if control is not None:  # None: created a moment ago, not described yet
        require_operations(
            control,
            (AclOperation.WRITE, AclOperation.READ),
            sink=sink,
            setting="control_topic",
            why="every transaction writes a marker there, and replays read them",
        )
    if options.dead_letter_topic is not None:
        dead = describe_topic(admin, options.dead_letter_topic, sink=sink, timeout=timeout)
        if dead is None:
            ensure_dead_letter_topic(admin, options)
        else:
            require_operations(
                dead,
                (AclOperation.WRITE, AclOperation.READ),
                sink=sink,
                setting="dead_letter_topic",
                why="transactions write refused rows there, and redrive reads them",
            )
    if options.topic is not None:
        target = describe_topic(admin, options.topic, sink=sink, timeout=timeout)
        if target is None:
            raise ConfigurationError(
                f"topic {options.topic!r} does not exist; create it before starting the query",
                sink=sink,
                setting="topic",
            )
        require_operations(
            target,
            (AclOperation.WRITE,),
            sink=sink,
            setting="topic",
            why="the sink writes the records there",
        )
    if options.dead_letter_topic is not None:
        # Limits below the producer's batch.size are refused now, not in a task.
        topic_limits(options, None, [t for t in (options.dead_letter_topic, options.topic) if t])


def _code(exc: BaseException) -> int | None:
    err = kafka_error_of(exc)
    return None if err is None else int(err.code())


def broker_max_transaction_timeout(
    admin: AdminClient, brokers: list[int], *, sink: str, timeout: float
) -> int | None:
    """Return the smallest ``transaction.max.timeout.ms`` of ``brokers`` (ids from :func:`connect`).

    None when the brokers' configuration cannot be described (not authorised):
    the broker then checks the timeout itself at the first ``init_transactions``.
    """
    resources = [ConfigResource(ResourceType.BROKER, str(b)) for b in brokers]
    limits: list[int] = []
    try:
        futures = admin.describe_configs(resources, request_timeout=timeout)
        for future in futures.values():
            entries = future.result()
            entry = entries.get("transaction.max.timeout.ms")
            if entry is not None and entry.value is not None:
                limits.append(int(entry.value))
    except Exception as exc:
        if kafka_error_of(exc) is None:
            raise
        _log.warning(
            "sink %s: cannot describe the brokers' transaction.max.timeout.ms (%s); the broker "
            "will check transaction.timeout.ms at the first init_transactions",
            sink,
            exc,
        )
        return None
    return min(limits) if limits else None


def describe_topic(admin: AdminClient, topic: str, *, sink: str, timeout: float) -> Any | None:
    """Describe a topic with this principal's authorized operations, without creating it.

    Parameters
    ----------
    admin
        An admin client.
    topic
        The topic.
    sink
        The sink name (named in errors).
    timeout
        Seconds.

    Returns
    -------
    TopicDescription or None
        The description (``authorized_operations`` is None when the brokers
        do not report them), or None when the topic does not exist.
    """
    future = admin.describe_topics(
        TopicCollection([topic]), include_authorized_operations=True, request_timeout=timeout
    )[topic]
    try:
        return future.result()
    except Exception as exc:
        code = _code(exc)
        if code in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC):
            return None
        err = kafka_error_of(exc)
        if err is None:
            raise
        raise map_kafka_error(
            err, KafkaErrorContext(sink, action="describing topics", topic=topic)
        ) from exc


def check_topic_exists(admin: AdminClient, topic: str, *, sink: str, timeout: float) -> bool:
    """Tell whether a topic exists, without creating it (:func:`describe_topic`)."""
    return describe_topic(admin, topic, sink=sink, timeout=timeout) is not None


def require_operations(
    description: Any, needed: tuple[Any, ...], *, sink: str, setting: str, why: str
) -> None:
    """Refuse a topic on which this principal lacks an operation the sink needs.

    Parameters
    ----------
    description
        From :func:`describe_topic`; nothing is checked when the brokers did
        not report the authorized operations.
    needed
        ``AclOperation`` members.
    sink, setting
        Named in the error.
    why
        What the sink does with the topic.

    Raises
    ------
    ConfigurationError
        Naming the topic, the operations to grant and the setting.
    """
    allowed = description.authorized_operations
    if allowed is None:
        return
    missing = [op.name for op in needed if op not in allowed]
    if missing:
        topic = description.name
        raise ConfigurationError(
            f"this principal may not {' or '.join(missing)} topic {topic!r} ({why}); grant it "
            f"{', '.join(missing)} on the topic (kafka-acls.sh --add --topic {topic} "
            + " ".join(f"--operation {op.title()}" for op in missing)
            + ")",
            sink=sink,
            setting=setting,
        )


def _create_hint(topic: str, partitions: int) -> str:
    return (
        f"kafka-topics.sh --create --topic {topic} --partitions {partitions} "
        "--config cleanup.policy=compact"
    )


def ensure_control_topic(
    admin: AdminClient,
    topic: str,
    *,
    sink: str,
    create: bool,
    partitions: int,
    replication_factor: int,
    timeout: float,
) -> bool:
    """Make sure the control topic exists and is compacted.

    Runs on the driver in ``open``. Idempotent: a topic created concurrently
    by another driver counts as created.

    Parameters
    ----------
    admin
        An admin client.
    topic
        The control topic.
    sink
        The sink name (named in errors).
    create
        Create the topic when it is missing.
    partitions
        Partitions of a created topic (markers only use partition 0).
    replication_factor
        Replication factor of a created topic (-1: the broker default).
    timeout
        Seconds per request.

    Returns
    -------
    bool
        True if this call created the topic.

    Raises
    ------
    ConfigurationError
        If the topic is missing and cannot (or may not) be created, or exists
        with a cleanup policy that may delete markers.
    """
    created = False
    if not check_topic_exists(admin, topic, sink=sink, timeout=timeout):
        if not create:
            raise ConfigurationError(
                f"the control topic {topic!r} does not exist and create_control_topic=False; "
                f"create it: {_create_hint(topic, partitions)}",
                sink=sink,
                setting="control_topic",
            )
        futures = admin.create_topics(
            [NewTopic(topic, partitions, replication_factor, config=dict(CONTROL_TOPIC_CONFIG))],
            operation_timeout=timeout,
            request_timeout=timeout,
        )
        try:
            futures[topic].result()
            created = True
            _log.info("sink %s: created the compacted control topic %s", sink, topic)
        except Exception as exc:
            code = _code(exc)
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                pass
            elif code in _DENIED:
                raise ConfigurationError(
                    f"the control topic {topic!r} does not exist and this principal may not "
                    f"create it ({exc}). Create it once ({_create_hint(topic, partitions)}) or "
                    "grant CREATE on it",
                    sink=sink,
                    setting="control_topic",
                ) from exc
            else:
                err = kafka_error_of(exc)
                if err is None:
                    raise
                raise map_kafka_error(
                    err, KafkaErrorContext(sink, action="creating the control topic", topic=topic)
                ) from exc
    _check_control_topic_config(admin, topic, sink=sink, timeout=timeout, just_created=created)
    return created


def _check_control_topic_config(
    admin: AdminClient, topic: str, *, sink: str, timeout: float, just_created: bool
) -> None:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    # A topic created a moment ago may not be known to every broker yet.
    attempts = 20 if just_created else 1
    entries: Mapping[str, Any] | None = None
    for attempt in range(1, attempts + 1):
        try:
            entries = admin.describe_configs([resource], request_timeout=timeout)[resource].result()
            break
        except Exception as exc:
            if _code(exc) == KafkaError.UNKNOWN_TOPIC_OR_PART and attempt < attempts:
                time.sleep(0.25)
                continue
            if kafka_error_of(exc) is None:
                raise
            _log.warning(
                "sink %s: cannot describe the control topic %s (%s); make sure it is compacted "
                "(cleanup.policy=compact)",
                sink,
                topic,
                exc,
            )
            return
    if entries is None:
        return

    def value(name: str) -> str | None:
        entry = entries.get(name)
        return None if entry is None else entry.value

    policy = {p.strip() for p in (value("cleanup.policy") or "").split(",") if p.strip()}
    deletes = "delete" in policy and not (
        value("retention.ms") == "-1" and value("retention.bytes") == "-1"
    )
    if "compact" not in policy or deletes:
        raise ConfigurationError(
            f"the control topic {topic!r} has cleanup.policy={value('cleanup.policy')!r}: "
            "retention could delete the marker of a committed partition before a replay "
            "reads it, and the replay would then write that partition twice. Set "
            f"cleanup.policy=compact (kafka-configs.sh --alter --entity-type topics "
            f"--entity-name {topic} --add-config cleanup.policy=compact)",
            sink=sink,
            setting="control_topic",
        )

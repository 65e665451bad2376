"""Checking the topics a batch's ``topic`` column names, before producing to them.

librdkafka accepts a record for a topic it does not know, then waits up to
``topic.metadata.propagation.max.ms`` (30 s by default) for the topic to
appear before failing the record's delivery; and a topic the principal may
describe but not write to fails the whole transaction with a reason that only
reaches librdkafka's log. So before a record batch is produced, every distinct
value of its ``topic`` column is described once (``DescribeTopics`` with the
principal's authorized operations, which never auto-creates a topic). A topic
that does not exist, or that the principal may not describe or write to, fails
the partition at once with a :class:`~twophase.errors.ConfigurationError`
naming the topic and the column; nothing of the partition is written.

A topic found writable is remembered in this process for the rest of the batch
(per producer configuration, sink identity and batch), so the partitions of a
batch that a worker runs describe each topic once. Each process keeps one admin
client per producer configuration for these requests. The default topic (the
``topic`` option) is checked once, in ``open()``.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, TopicCollection
from confluent_kafka.admin import AdminClient

from twophase import TaskContext
from twophase.errors import ConfigurationError, DataError

from .._context import ErrorContext
from ._compat import AclOperation
from ._config import is_valid_topic_name
from ._errors import kafka_error_of, map_kafka_error
from ._options import KafkaOptions

__all__ = ["admin_client", "check_topic_column", "clear"]

_MISSING = frozenset({KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC})

#: Batches whose found topics a process remembers.
_MAX_BATCHES = 16

#: Admin clients a process keeps (one per producer configuration).
_MAX_ADMINS = 8

_lock = threading.Lock()
_found: OrderedDict[tuple[tuple[tuple[str, str], ...], str, int], set[str]] = OrderedDict()
_admins: OrderedDict[tuple[tuple[str, str], ...], AdminClient] = OrderedDict()


def admin_client(options: KafkaOptions) -> AdminClient:
    """Return this process's admin client of the producer configuration."""
    with _lock:
        admin = _admins.pop(options.conf_key, None)
        if admin is None:
            admin = AdminClient(dict(options.client_config))
        _admins[options.conf_key] = admin
        while len(_admins) > _MAX_ADMINS:
            _admins.popitem(last=False)
        return admin


def _found_for(options: KafkaOptions, context: TaskContext) -> set[str]:
    key = (options.conf_key, context.identity, context.batch_id)
    with _lock:
        found = _found.get(key)
        if found is None:
            found = _found[key] = set()
            while len(_found) > _MAX_BATCHES:
                _found.popitem(last=False)
        return set(found)


def _remember(options: KafkaOptions, context: TaskContext, topic: str) -> None:
    with _lock:
        _found.setdefault((options.conf_key, context.identity, context.batch_id), set()).add(topic)


def clear() -> None:
    """Forget every topic found, and the admin clients (tests)."""
    with _lock:
        _found.clear()
        _admins.clear()


def check_topic_column(
    column: pa.Array, *, options: KafkaOptions, context: TaskContext, tolerate: bool = False
) -> dict[str, tuple[str, str]]:
    """Check that every topic named in a record batch's ``topic`` column can be written.

    Runs on the executor, in :meth:`KafkaTransaction.write`, before anything
    of the record batch is produced. Null topics are left to the produce
    loop, which names their row.

    Parameters
    ----------
    column
        The batch's ``topic`` column.
    options
        The sink's settings.
    context
        The task (named in errors).
    tolerate
        Return the topics that are not valid names or do not exist instead of raising
        (``bad_rows="dead_letter"``: their rows are row errors).

    Returns
    -------
    dict
        With ``tolerate``: ``{topic: (librdkafka error name, message)}`` of the topics
        refused; otherwise empty.

    Raises
    ------
    ConfigurationError
        For a topic that does not exist, or that the principal may not
        describe or write to (``column='topic'``).
    DataError
        For a value that is not a valid topic name.
    TwoPhaseError
        The mapped error when the request itself fails (brokers unreachable:
        :class:`~twophase.errors.RetriableError`).
    """
    refused: dict[str, tuple[str, str]] = {}
    if pa.types.is_null(column.type) or column.null_count == len(column):
        return refused
    found = _found_for(options, context)
    topics = [t for t in pc.unique(column).drop_null().to_pylist() if t not in found]
    where = ErrorContext(options.sink).for_batch(context.batch_id, context.partition_id)
    then = (
        "then restart the query: the batch is replayed and completes exactly once (partitions "
        "committed before are skipped)"
    )
    rows = column.to_pylist() if topics else []
    for topic in topics:
        row = rows.index(topic)
        named = f"the 'topic' column names topic {topic!r} (first at row {row} of the record batch)"
        if not is_valid_topic_name(topic):
            if tolerate:
                refused[topic] = ("TOPIC_EXCEPTION", f"{topic!r} is not a valid topic name")
                continue
            raise DataError(
                f"{named}, which is not a valid Kafka topic name (1-249 characters from "
                "[A-Za-z0-9._-]); fix the column",
                column="topic",
                **where.keywords(),
            )
        future = admin_client(options).describe_topics(
            TopicCollection([topic]),
            include_authorized_operations=True,
            request_timeout=options.operation_timeout,
        )[topic]
        try:
            description = future.result()
        except Exception as exc:
            err = kafka_error_of(exc)
            if err is None:
                raise
            if err.code() in _MISSING and tolerate:
                refused[topic] = (err.name(), f"topic {topic!r} does not exist")
                continue
            if err.code() in _MISSING:
                raise ConfigurationError(
                    f"{named}, which does not exist. Create it (kafka-topics.sh --create --topic "
                    f"{topic}) or fix the column, {then}",
                    column="topic",
                    **where.keywords(),
                ) from exc
            if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                raise ConfigurationError(
                    f"{named}, which this principal may not describe (TOPIC_AUTHORIZATION_FAILED; "
                    "Kafka does not say whether it exists). Grant the principal WRITE and "
                    f"DESCRIBE on the topic, or fix the column, {then}",
                    column="topic",
                    **where.keywords(),
                ) from exc
            ctx = options.error_context("describing the topic", context=context, topic=topic)
            raise map_kafka_error(err, ctx) from exc
        allowed = description.authorized_operations
        if allowed is not None and AclOperation.WRITE not in allowed:
            raise ConfigurationError(
                f"{named}, which this principal may describe but not write to. Grant the "
                f"principal WRITE on the topic, or fix the column, {then}",
                column="topic",
                **where.keywords(),
            )
        _remember(options, context, topic)
    return refused

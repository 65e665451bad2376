"""Which rows of a record batch are row errors, found before anything is produced.

With ``bad_rows="dead_letter"`` a partition's transaction must survive its bad rows.
librdkafka refuses some records synchronously in ``produce()`` (over the producer's
``message.max.bytes``: ``MSG_SIZE_TOO_LARGE``; a partition the topic lacks:
``_UNKNOWN_PARTITION``): the transaction goes on, and the produce loop hands those rows
back. Every other refusal is asynchronous -- the brokers refuse a record set over the
topic's ``max.message.bytes``, or a record without a key in a compacted topic
(``cleanup.policy`` with ``compact``: ``INVALID_RECORD``), taking the good records of
the set and the whole transaction with it (abortable) -- so :func:`screen` finds those
rows first, from the topics' configs (``DescribeConfigs``) and partition counts, and
the rows are never produced. The table of row errors and batch errors is in
``docs/kafka.md``, "Dead letters".
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, TopicCollection

from twophase import RowError, TaskContext
from twophase.errors import ConfigurationError

from .._context import ErrorContext
from ._columns import RecordPlan
from ._compat import ConfigResource, ResourceType
from ._errors import kafka_error_of, map_kafka_error
from ._options import KafkaOptions
from ._topics import admin_client, check_topic_column

__all__ = [
    "RECORD_OVERHEAD",
    "TopicLimit",
    "merged",
    "record_sizes",
    "refused_by_producer",
    "screen",
    "topic_limits",
    "without_rows",
]

#: Bytes a record takes besides its key, value and headers, counted high: a record
#: batch's header (61) and a record's own framing (at most 21), and 10 per header.
RECORD_OVERHEAD = 100
HEADER_OVERHEAD = 10

#: Librdkafka's defaults of the two producer limits a record set is held to.
_DEFAULT_MAX = 1_000_000


@dataclass(frozen=True)
class TopicLimit:
    """What a topic takes: ``max.message.bytes``, partitions, and a key (when compacted)."""

    max_message_bytes: int
    partitions: int
    compacted: bool = False


_lock = threading.Lock()
_limits: OrderedDict[tuple[tuple[tuple[str, str], ...], str, int, str], TopicLimit] = OrderedDict()


def producer_limits(options: KafkaOptions) -> tuple[int, int]:
    """Return the limit of a target record (the ``message.max.bytes`` given) and ``batch.size``."""
    conf = options.producer_config
    given = options.record_max_bytes
    return (
        int(conf.get("message.max.bytes", _DEFAULT_MAX)) if given is None else given,
        int(conf.get("batch.size", _DEFAULT_MAX)),
    )


def topic_limits(
    options: KafkaOptions, context: TaskContext | None, topics: Iterable[str]
) -> dict[str, TopicLimit]:
    """Describe the topics' ``max.message.bytes``, cleanup policy and partitions, once per batch.

    Parameters
    ----------
    options
        The sink's settings.
    context
        The task (its batch keys the cache); None to ask the brokers again (redrive).
    topics
        Existing topics.

    Returns
    -------
    dict
        Each topic's limit.

    Raises
    ------
    ConfigurationError
        A topic's ``max.message.bytes`` is below the producer's ``batch.size``: the
        brokers would refuse record sets of good records (``setting='batch.size'``).
    """
    batch = -1 if context is None else context.batch_id
    ident = "" if context is None else context.identity
    found: dict[str, TopicLimit] = {}
    with _lock:
        for t in topics:
            hit = _limits.get((options.conf_key, ident, batch, t))
            if hit is not None and context is not None:
                found[t] = hit
    wanted = sorted(set(topics) - set(found))
    if not wanted:
        return found
    admin = admin_client(options)
    timeout = options.operation_timeout
    try:
        described = admin.describe_topics(TopicCollection(wanted), request_timeout=timeout)
        configs = admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t) for t in wanted],
            request_timeout=timeout,
        )
        partitions = {t: len(f.result().partitions) for t, f in described.items()}
        described_configs = {res.name: f.result() for res, f in configs.items()}
    except Exception as exc:
        err = kafka_error_of(exc)
        if err is None:
            raise
        ctx = options.error_context("describing the topics' limits", context=context)
        raise map_kafka_error(err, ctx) from exc
    sizes = {t: int(c["max.message.bytes"].value) for t, c in described_configs.items()}
    compacted = {
        t: "compact" in str(c["cleanup.policy"].value if "cleanup.policy" in c else "")
        for t, c in described_configs.items()
    }
    _, batch_size = producer_limits(options)
    where = ErrorContext(options.sink, batch if context else None)
    with _lock:
        for t in wanted:
            if sizes[t] < batch_size:
                raise ConfigurationError(
                    f"topic {t!r} has max.message.bytes={sizes[t]}, below the producer's "
                    f"batch.size={batch_size}: the brokers would refuse a set of good records "
                    "and abort the transaction. Set producer_config batch.size to at most "
                    f"{sizes[t]}, or raise the topic's max.message.bytes",
                    setting="batch.size",
                    **where.keywords(),
                )
            found[t] = _limits[(options.conf_key, ident, batch, t)] = TopicLimit(
                sizes[t], partitions[t], compacted[t]
            )
        while len(_limits) > 256:
            _limits.popitem(last=False)
    return found


def record_sizes(batch: pa.RecordBatch, plan: RecordPlan) -> np.ndarray:
    """Return each row's record size: key, value and headers, plus :data:`RECORD_OVERHEAD`."""
    size = np.full(batch.num_rows, RECORD_OVERHEAD, dtype=np.int64)
    for index in (plan.value, plan.key):
        if index is not None and not pa.types.is_null(batch.column(index).type):
            lengths = pc.binary_length(batch.column(index)).fill_null(0)
            size += lengths.to_numpy(zero_copy_only=False)
    if plan.headers is not None and not pa.types.is_null(batch.column(plan.headers).type):
        column = batch.column(plan.headers)
        entries = pc.list_flatten(column)
        if len(entries):
            each = HEADER_OVERHEAD + pc.add(
                pc.binary_length(pc.struct_field(entries, "key")).fill_null(0),
                pc.binary_length(pc.struct_field(entries, "value")).fill_null(0),
            ).to_numpy(zero_copy_only=False)
            owner = pc.list_parent_indices(column).to_numpy(zero_copy_only=False)
            size += np.bincount(owner, weights=each, minlength=batch.num_rows).astype(np.int64)
    return size


class _Same(Sequence[str | None]):
    """``n`` times the same topic, as a sequence (nothing allocated per row)."""

    def __init__(self, topic: str, n: int) -> None:
        self._topic, self._n = topic, n

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self._topic


def screen(
    batch: pa.RecordBatch, plan: RecordPlan, *, options: KafkaOptions, context: TaskContext
) -> list[RowError]:
    """Return the rows the brokers would refuse, found before producing (dead-letter mode).

    Parameters
    ----------
    batch
        The rows.
    plan
        The batch's columns.
    options
        The sink's settings.
    context
        The task.

    Returns
    -------
    list of RowError
        Rows with a null, invalid or missing topic, a partition the topic lacks, a null
        header or header key, a null key into a compacted topic, or a record over its
        topic's ``max.message.bytes``.
    """
    n = batch.num_rows
    errors: dict[int, RowError] = {}
    if plan.topic is None:
        assert plan.default_topic is not None
        # Every row goes to the default topic: no per-row list on the clean path.
        topics: Sequence[str | None] = _Same(plan.default_topic, n)
        refused_topics: dict[str, tuple[str, str]] = {}
        used = {plan.default_topic}
    else:
        column = batch.column(plan.topic)
        refused_topics = check_topic_column(column, options=options, context=context, tolerate=True)
        topics = [None] * n if pa.types.is_null(column.type) else column.to_pylist()
        for i, t in enumerate(topics):
            if t is None:
                errors[i] = RowError(
                    i, "invalid_value", "null topic, and no topic option", None, "topic"
                )
            elif t in refused_topics:
                code, message = refused_topics[t]
                errors[i] = RowError(i, "invalid_value", message, code, "topic")
        used = {t for t in set(topics) if t is not None and t not in refused_topics}
    limits = topic_limits(options, context, used) if used else {}
    if plan.partition is not None and not pa.types.is_null(batch.column(plan.partition).type):
        for i, p in enumerate(batch.column(plan.partition).to_pylist()):
            t = topics[i]
            if p is None or i in errors or t is None:
                continue
            count = limits[t].partitions
            if p < 0 or p >= count:
                errors[i] = RowError(
                    i,
                    "invalid_value",
                    f"partition {p} is not one of topic {t!r}'s partitions 0..{count - 1}",
                    "_UNKNOWN_PARTITION",
                    "partition",
                )
    _screen_null_keys(batch, plan, topics, limits, errors)
    if plan.headers is not None and not pa.types.is_null(batch.column(plan.headers).type):
        column = batch.column(plan.headers)
        entries = pc.list_flatten(column)
        bad = pc.or_kleene(entries.is_null(), pc.struct_field(entries, "key").is_null())
        if pc.any(bad).as_py():
            owner = pc.list_parent_indices(column).filter(bad).to_pylist()
            for i in sorted(set(owner)):
                errors.setdefault(
                    i,
                    RowError(
                        i,
                        "invalid_value",
                        "a null header or a header with a null key",
                        None,
                        "headers",
                    ),
                )
    # The producer takes records up to twice the limit given (dead letters must fit):
    # every record is held to that limit, or its topic's when smaller.
    record_max, _ = producer_limits(options)
    small = {t: min(lim.max_message_bytes, record_max) for t, lim in limits.items()}
    if small:
        sizes = record_sizes(batch, plan)
        for t, limit in small.items():
            over = np.flatnonzero(sizes > limit)
            for i in over.tolist():
                if topics[i] == t and i not in errors:
                    errors[i] = RowError(
                        i,
                        "too_large",
                        f"a record of {int(sizes[i])} bytes (counted uncompressed, with its "
                        f"framing) is over topic {t!r}'s max.message.bytes={limit}",
                        "MSG_SIZE_TOO_LARGE",
                        "value",
                    )
    return [errors[i] for i in sorted(errors)]


def _screen_null_keys(
    batch: pa.RecordBatch,
    plan: RecordPlan,
    topics: Sequence[str | None],
    limits: dict[str, TopicLimit],
    errors: dict[int, RowError],
) -> None:
    """Add the rows with a null key bound for a compacted topic (the brokers refuse them)."""
    if not any(limit.compacted for limit in limits.values()):
        return
    if plan.key is None:
        nulls: Iterable[int] = range(batch.num_rows)
    else:
        nulls = np.flatnonzero(batch.column(plan.key).is_null().to_numpy(zero_copy_only=False))
    for i in map(int, nulls):
        t = topics[i]
        if i not in errors and t is not None and limits[t].compacted:
            errors[i] = RowError(
                i,
                "invalid_value",
                f"a null key, and topic {t!r} is compacted (its cleanup.policy has "
                "'compact'): the brokers refuse a record without a key there",
                "INVALID_RECORD",
                "key",
            )


#: librdkafka errors ``produce()`` raises for one record, leaving the transaction open:
#: the error class and the column at fault.
ROW_CODES = {
    KafkaError.MSG_SIZE_TOO_LARGE: ("too_large", "value"),
    KafkaError._UNKNOWN_PARTITION: ("invalid_value", "partition"),
}


def refused_by_producer(exc: BaseException, row: int, topic: str) -> RowError | None:
    """Return the row error of a record ``produce()`` refused, or None for another failure."""
    err = kafka_error_of(exc)
    if err is None or err.code() not in ROW_CODES or err.fatal() or err.txn_requires_abort():
        return None
    error_class, column = ROW_CODES[err.code()]
    return RowError(row, error_class, f"topic {topic!r}: {err.str()}", err.name(), column)


def without_rows(
    batch: pa.RecordBatch, refused: list[RowError]
) -> tuple[pa.RecordBatch, np.ndarray | None]:
    """Return the batch without the refused rows, and the kept rows' positions (None: all)."""
    if not refused:
        return batch, None
    mask = np.ones(batch.num_rows, dtype=bool)
    mask[[e.row for e in refused]] = False
    kept = np.flatnonzero(mask)
    return batch.take(pa.array(kept)), kept


def merged(
    refused: list[RowError], skipped: list[RowError], kept: np.ndarray | None
) -> list[RowError]:
    """Return the rows screened out and those ``produce()`` refused (kept positions), in order."""
    if not skipped:
        return refused
    moved = [
        dataclasses.replace(e, row=e.row if kept is None else int(kept[e.row])) for e in skipped
    ]
    return sorted(refused + moved, key=lambda e: e.row)

"""From Arrow record batches to Kafka records, produced in a tight loop.

The columns are those of Spark's Kafka sink, checked once per schema into a
:class:`._columns.RecordPlan`. The produce loop takes whole columns out of
Arrow at once (a C++ conversion, about 0.15 us per value) and calls
``Producer.produce`` positionally in a tight loop specialised for the columns
present; a full local queue (``BufferError``) is drained with ``poll`` and the
record retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from operator import length_hint
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaException

from twophase.errors import DataError, RetriableError

from .._arrow import first_true
from ._columns import RecordPlan

__all__ = ["produce_one", "produce_rows"]

#: Seconds a produce may wait for room in a full local queue before failing.
QUEUE_FULL_TIMEOUT = 120.0

#: Largest partition number (Kafka partitions are int32).
_MAX_PARTITION = 2**31 - 1


def _objects(column: pa.Array) -> list[Any]:
    if pa.types.is_null(column.type):
        return [None] * len(column)
    # One conversion to Python objects (bytes / str / None): as fast as
    # to_numpy(zero_copy_only=False), which would import pandas.
    return list(column.to_pylist())


def _payloads(column: pa.Array) -> list[Any]:
    # Strings go out as their UTF-8 bytes: viewing the column as binary (no copy)
    # skips decoding every value into a Python str only for produce() to encode it.
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.view(pa.large_binary())
    return _objects(column)


#: Called with a failed produce's exception, its topic and the row's index in the
#: produced rows; raises, or returns to go on with the next row (a row error).
OnProduceError = Callable[[BaseException, str, int], None]


def _drain_and_produce(
    produce: Callable[..., None],
    poll: Callable[[float], int],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    deadline = time.monotonic() + QUEUE_FULL_TIMEOUT
    while True:
        poll(0.01)
        try:
            produce(*args, **kwargs)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise RetriableError(
                    f"the producer's local queue stayed full for {QUEUE_FULL_TIMEOUT:.0f} s "
                    "(brokers slow or unreachable)"
                ) from None


def produce_one(
    producer: Any,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    partition: int,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Produce one record, waiting for room when the local queue is full.

    Parameters
    ----------
    producer
        A ``confluent_kafka.Producer`` with an open transaction.
    topic, value, key, partition, headers
        The record.
    """
    kwargs = {} if headers is None else {"headers": headers}
    try:
        producer.produce(topic, value, key, partition, **kwargs)
    except BufferError:
        _drain_and_produce(producer.produce, producer.poll, (topic, value, key, partition), kwargs)


def produce_rows(
    producer: Any,
    plan: RecordPlan,
    batch: pa.RecordBatch,
    *,
    start: int,
    on_error: OnProduceError,
    sink: str,
    batch_id: int | None,
    partition_id: int | None,
) -> int:
    """Produce rows ``start..`` of a record batch into the open transaction.

    Runs on an executor, inside :meth:`KafkaTransaction.write`.

    Parameters
    ----------
    producer
        A ``confluent_kafka.Producer`` with an open transaction.
    plan
        From :func:`plan_records`.
    batch
        The rows.
    start
        First row to produce (rows before it were produced already).
    on_error
        Called when ``produce`` raises a Kafka error; raises the mapped error.
    sink, batch_id, partition_id
        Named in data errors.

    Returns
    -------
    int
        Rows produced.

    Raises
    ------
    DataError
        A null topic or a negative partition in a row.
    """
    n = int(batch.num_rows) - start
    if n <= 0:
        return 0
    if start:
        batch = batch.slice(start)
    values = _payloads(batch.column(plan.value))
    keys = _payloads(batch.column(plan.key)) if plan.key is not None else None
    produce = producer.produce
    poll = producer.poll

    if plan.topic is None and plan.partition is None and plan.headers is None:
        topic = plan.default_topic
        assert topic is not None
        if keys is None:
            _loop_values(produce, poll, topic, values, on_error)
        else:
            _loop_keyed(produce, poll, topic, values, keys, on_error)
        return n

    if plan.topic is None:
        assert plan.default_topic is not None
        topics: list[Any] = [plan.default_topic] * n
    else:
        topics = _objects(batch.column(plan.topic))
        if None in topics:
            row = start + topics.index(None)
            raise DataError(
                f"row {row} of the record batch has a null topic; set the sink's topic "
                "option or fill the 'topic' column",
                sink=sink,
                batch_id=batch_id,
                partition_id=partition_id,
                column="topic",
            )
    if plan.partition is not None:
        column = batch.column(plan.partition)
        if pa.types.is_null(column.type):
            partitions: list[Any] = [-1] * n
        else:
            partitions = column.to_pylist()
            for i, p in enumerate(partitions):
                if p is None:  # let the partitioner choose
                    partitions[i] = -1
                elif p < 0 or p > _MAX_PARTITION:
                    raise DataError(
                        f"row {start + i} has partition {p}; partitions are >= 0 (or null to "
                        "let the partitioner choose)",
                        sink=sink,
                        batch_id=batch_id,
                        partition_id=partition_id,
                        column="partition",
                    )
    else:
        partitions = [-1] * n
    if plan.headers is not None:
        column = batch.column(plan.headers)
        _check_headers(column, start=start, sink=sink, batch_id=batch_id, partition_id=partition_id)
        headers: list[Any] = [
            None if h is None else [(kv["key"], kv["value"]) for kv in h]
            for h in column.to_pylist()
        ]
    else:
        headers = [None] * n
    if keys is None:
        keys = [None] * n
    _loop_general(produce, poll, (topics, values, keys, partitions, headers), on_error)
    return n


def _check_headers(
    column: pa.Array, *, start: int, sink: str, batch_id: int | None, partition_id: int | None
) -> None:
    """Refuse a null header or a header without a key (a null list is no headers)."""
    entries = pc.list_flatten(column)
    bad = pc.or_kleene(entries.is_null(), pc.struct_field(entries, "key").is_null())
    if not pc.any(bad).as_py():
        return
    owner = pc.list_parent_indices(column)
    row = start + int(owner[first_true(bad)].as_py())
    raise DataError(
        f"row {row} has a null header or a header with a null key; every header needs a key "
        "(its value may be null). Filter the nulls out of the array, e.g. "
        "filter(headers, h -> h.key IS NOT NULL)",
        sink=sink,
        batch_id=batch_id,
        partition_id=partition_id,
        column="headers",
    )


def _index(rows: list[Any], it: Any) -> int:
    """Return the index of the row ``it`` (an iterator over ``rows``) yielded last."""
    return len(rows) - length_hint(it) - 1


def _loop_values(
    produce: Callable[..., None],
    poll: Callable[[float], int],
    topic: str,
    values: list[Any],
    on_error: OnProduceError,
) -> None:
    it = iter(values)
    while True:
        try:
            for v in it:
                produce(topic, v)
        except BufferError:
            try:
                _drain_and_produce(produce, poll, (topic, v), {})
            except KafkaException as exc:
                on_error(exc, topic, _index(values, it))
            continue
        except KafkaException as exc:
            on_error(exc, topic, _index(values, it))
            continue
        return


def _loop_keyed(
    produce: Callable[..., None],
    poll: Callable[[float], int],
    topic: str,
    values: list[Any],
    keys: list[Any],
    on_error: OnProduceError,
) -> None:
    vi = iter(values)  # zip takes from it first: its length hint places the row
    it = zip(vi, keys)  # noqa: B905 -- keys has as many rows as values
    while True:
        try:
            for v, k in it:
                produce(topic, v, k)
        except BufferError:
            try:
                _drain_and_produce(produce, poll, (topic, v, k), {})
            except KafkaException as exc:
                on_error(exc, topic, _index(values, vi))
            continue
        except KafkaException as exc:
            on_error(exc, topic, _index(values, vi))
            continue
        return


def _loop_general(
    produce: Callable[..., None],
    poll: Callable[[float], int],
    columns: tuple[list[Any], list[Any], list[Any], list[Any], list[Any]],
    on_error: OnProduceError,
) -> None:
    topics = columns[0]
    ti = iter(topics)
    it = zip(ti, *columns[1:])  # noqa: B905 -- every column has the batch's rows
    t = ""
    while True:
        try:
            for t, v, k, p, h in it:
                if h is None:
                    produce(t, v, k, p)
                else:
                    produce(t, v, k, p, headers=h)
        except BufferError:
            kwargs = {} if h is None else {"headers": h}
            try:
                _drain_and_produce(produce, poll, (t, v, k, p), kwargs)
            except KafkaException as exc:
                on_error(exc, t, _index(topics, ti))
            continue
        except KafkaException as exc:
            on_error(exc, t, _index(topics, ti))
            continue
        return

"""From Arrow record batches to Kafka records, with the columns of Spark's Kafka sink.

=============  ==========================================  ==========================
column         Arrow type (Spark type)                     meaning
=============  ==========================================  ==========================
``value``      string or binary (StringType, BinaryType)   record value; required;
                                                           null writes a tombstone
``key``        string or binary                            record key; optional
``topic``      string                                      target topic; optional
                                                           (the ``topic`` option
                                                           overrides it, as in Spark)
``partition``  integer (IntegerType)                       target partition; null
                                                           lets the partitioner pick
``headers``    list of struct<key: string, value: binary>  record headers
=============  ==========================================  ==========================

Other columns are ignored, as Spark's Kafka sink ignores them. Strings are sent
as UTF-8.

The produce loop takes whole columns out of Arrow at once (a C++ conversion,
about 0.15 us per value) and calls ``Producer.produce`` positionally in a
tight loop specialised for the columns present; a full local queue
(``BufferError``) is drained with ``poll`` and the record retried.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NoReturn

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaException

from twophase.errors import ConfigurationError, DataError, RetriableError

__all__ = ["COLUMNS", "RecordPlan", "plan_records", "produce_one", "produce_rows"]

#: The columns the sink reads, as in Spark's Kafka sink.
COLUMNS = ("value", "key", "topic", "partition", "headers")

#: Seconds a produce may wait for room in a full local queue before failing.
QUEUE_FULL_TIMEOUT = 120.0

#: Largest partition number (Kafka partitions are int32).
_MAX_PARTITION = 2**31 - 1

#: How to fix a column of the wrong type, per column.
_FIX_HINTS = {
    "value": "Cast it, e.g. col('value').cast('string'), or serialise it: to_json(...)",
    "key": "Cast it, e.g. col('key').cast('string'), or serialise it: to_json(...)",
    "topic": "Cast it: col('topic').cast('string')",
    "partition": "Cast it: col('partition').cast('int')",
    "headers": "Build it as an array of (key, value) structs, e.g. array(struct(lit('trace')"
    ".alias('key'), col('trace').cast('binary').alias('value'))); a map<string, binary> "
    "becomes one with transform(map_entries(m), e -> struct(e.key AS key, "
    "CAST(e.value AS BINARY) AS value))",
}


@dataclass(frozen=True)
class RecordPlan:
    """Where each record field comes from in the batch schema.

    Built once per schema on the driver (:meth:`KafkaSink.check_schema`) and
    again, cached, on the executor. Picklable.

    Attributes
    ----------
    value
        Index of the ``value`` column.
    key
        Index of the ``key`` column, or None.
    topic
        Index of the ``topic`` column, or None when every record goes to
        ``default_topic``.
    partition
        Index of the ``partition`` column, or None.
    headers
        Index of the ``headers`` column, or None.
    default_topic
        The sink's ``topic`` option (it overrides the column).
    """

    value: int
    key: int | None
    topic: int | None
    partition: int | None
    headers: int | None
    default_topic: str | None


def _is_bytes_like(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _is_headers(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    item = t.value_type
    if not pa.types.is_struct(item) or item.num_fields != 2:
        return False
    names = {item.field(i).name: item.field(i).type for i in range(2)}
    return (
        set(names) == {"key", "value"}
        and _is_text(names["key"])
        and (_is_bytes_like(names["value"]) or pa.types.is_null(names["value"]))
    )


def plan_records(
    schema: pa.Schema, *, default_topic: str | None, sink: str, batch_id: int | None
) -> RecordPlan:
    """Check the batch schema against Spark's Kafka sink columns.

    Runs on the driver before anything is written (and, cached, on executors).

    Parameters
    ----------
    schema
        The Arrow schema of the micro-batch.
    default_topic
        The sink's ``topic`` option, or None.
    sink
        The sink name (named in errors).
    batch_id
        The micro-batch id (named in errors).

    Returns
    -------
    RecordPlan
        Where each field comes from.

    Raises
    ------
    ConfigurationError
        Naming the column: a missing ``value`` column, a column of the wrong
        type, a duplicated column, or no topic at all.
    """
    names = list(schema.names)
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in COLUMNS:
            if name in index:
                raise ConfigurationError(
                    f"the batch has two columns named {name!r}",
                    sink=sink,
                    batch_id=batch_id,
                    column=name,
                )
            index[name] = i

    def fail(column: str, expected: str) -> ConfigurationError:
        got = schema.field(index[column]).type
        return ConfigurationError(
            f"column {column!r} has type {got}; the Kafka sink takes {expected} (as Spark's "
            f"Kafka sink does). {_FIX_HINTS[column]}",
            sink=sink,
            batch_id=batch_id,
            column=column,
        )

    if "value" not in index:
        similar = [n for n in names if n.lower() == "value"]
        hint = f" (found {similar[0]!r}; column names are case-sensitive)" if similar else ""
        raise ConfigurationError(
            "the batch has no 'value' column" + hint + "; select the record value as "
            "'value' (string or binary), e.g. df.selectExpr('CAST(id AS STRING) AS key', "
            "'to_json(struct(*)) AS value')",
            sink=sink,
            batch_id=batch_id,
            column="value",
        )
    if not _is_bytes_like(schema.field(index["value"]).type):
        raise fail("value", "string or binary")
    if "key" in index:
        t = schema.field(index["key"]).type
        if not (_is_bytes_like(t) or pa.types.is_null(t)):
            raise fail("key", "string or binary")
    if "topic" in index and not (
        _is_text(schema.field(index["topic"]).type)
        or pa.types.is_null(schema.field(index["topic"]).type)
    ):
        raise fail("topic", "string")
    if "partition" in index:
        t = schema.field(index["partition"]).type
        if not (pa.types.is_signed_integer(t) or pa.types.is_null(t)):
            raise fail("partition", "int")
    if "headers" in index and not _is_headers(schema.field(index["headers"]).type):
        raise fail("headers", "array<struct<key: string, value: binary>>")
    topic_index = index.get("topic")
    if default_topic is not None:
        topic_index = None  # the option overrides the column, as in Spark
    elif topic_index is None:
        raise ConfigurationError(
            "no topic: the batch has no 'topic' column and the sink has no topic option; pass "
            "topic='...' to the sink or add a 'topic' column",
            sink=sink,
            batch_id=batch_id,
            column="topic",
        )
    return RecordPlan(
        value=index["value"],
        key=index.get("key"),
        topic=topic_index,
        partition=index.get("partition"),
        headers=index.get("headers"),
        default_topic=default_topic,
    )


def _objects(column: pa.Array) -> list[Any]:
    if pa.types.is_null(column.type):
        return [None] * len(column)
    # One C++ conversion to Python objects (bytes / str / None), the fastest
    # way out of Arrow.
    return list(column.to_numpy(zero_copy_only=False).tolist())


def _payloads(column: pa.Array) -> list[Any]:
    # Strings go out as their UTF-8 bytes: viewing the column as binary (no copy)
    # skips decoding every value into a Python str only for produce() to encode it.
    if pa.types.is_string(column.type):
        column = column.view(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.view(pa.large_binary())
    return _objects(column)


#: Called with the failed produce's exception and its topic; must raise.
OnProduceError = Callable[[BaseException, str], NoReturn]


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
    producer: Any, topic: str, value: bytes | None, key: bytes | None, partition: int
) -> None:
    """Produce one record, waiting for room when the local queue is full.

    Parameters
    ----------
    producer
        A ``confluent_kafka.Producer`` with an open transaction.
    topic, value, key, partition
        The record.
    """
    try:
        producer.produce(topic, value, key, partition)
    except BufferError:
        _drain_and_produce(producer.produce, producer.poll, (topic, value, key, partition), {})


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
        try:
            if keys is None:
                _loop_values(produce, poll, topic, values)
            else:
                _loop_keyed(produce, poll, topic, values, keys)
        except KafkaException as exc:
            on_error(exc, topic)
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
            partitions = column.fill_null(-1).to_numpy(zero_copy_only=False).tolist()
            # A null became -1 (let the partitioner choose); a real negative is an error.
            nulls = column.is_null().to_numpy(zero_copy_only=False)
            for i, p in enumerate(partitions):
                if (p < 0 or p > _MAX_PARTITION) and not nulls[i]:
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
    _loop_general(
        produce, poll, zip(topics, values, keys, partitions, headers, strict=True), on_error
    )
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
    row = start + int(owner[pc.index(bad, True).as_py()].as_py())
    raise DataError(
        f"row {row} has a null header or a header with a null key; every header needs a key "
        "(its value may be null). Filter the nulls out of the array, e.g. "
        "filter(headers, h -> h.key IS NOT NULL)",
        sink=sink,
        batch_id=batch_id,
        partition_id=partition_id,
        column="headers",
    )


def _loop_values(
    produce: Callable[..., None], poll: Callable[[float], int], topic: str, values: list[Any]
) -> None:
    it = iter(values)
    while True:
        try:
            for v in it:
                produce(topic, v)
        except BufferError:
            _drain_and_produce(produce, poll, (topic, v), {})
            continue
        return


def _loop_keyed(
    produce: Callable[..., None],
    poll: Callable[[float], int],
    topic: str,
    values: list[Any],
    keys: list[Any],
) -> None:
    it = zip(values, keys, strict=True)
    while True:
        try:
            for v, k in it:
                produce(topic, v, k)
        except BufferError:
            _drain_and_produce(produce, poll, (topic, v, k), {})
            continue
        return


def _loop_general(
    produce: Callable[..., None],
    poll: Callable[[float], int],
    rows: Iterator[tuple[str, Any, Any, int, Any]],
    on_error: OnProduceError,
) -> None:
    it = iter(rows)
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
                on_error(exc, t)
            continue
        except KafkaException as exc:
            on_error(exc, t)
        return

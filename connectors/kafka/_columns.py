"""The columns of Spark's Kafka sink, checked against a batch's schema: a :class:`RecordPlan`.

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

The plan says where each record field comes from; :mod:`._records` produces
the rows by it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from twophase.errors import ConfigurationError

__all__ = ["COLUMNS", "RecordPlan", "plan_records"]

#: The columns the sink reads, as in Spark's Kafka sink.
COLUMNS = ("value", "key", "topic", "partition", "headers")

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

"""Arrow batches to Kafka records: the columns of Spark's Kafka sink, and the produce loop."""

from __future__ import annotations

from typing import Any, NoReturn

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase.connectors.kafka._columns import RecordPlan, plan_records
from twophase.connectors.kafka._records import produce_one, produce_rows
from twophase.errors import ConfigurationError, DataError

pytestmark = pytest.mark.unit

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


class FakeProducer:
    """Records produce() calls; raises BufferError every ``full_every`` calls."""

    def __init__(self, full_every: int = 0, fail_on: Any = None) -> None:
        self.records: list[tuple[Any, ...]] = []
        self.full_every = full_every
        self.fail_on = fail_on
        self.calls = 0
        self.polls = 0

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        headers: Any = None,
    ) -> None:
        self.calls += 1
        if self.full_every and self.calls % self.full_every == 0:
            raise BufferError("queue full")
        if self.fail_on is not None and value == self.fail_on:
            raise KafkaException(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE, "too large"))
        self.records.append((topic, value, key, partition, headers))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


def raise_it(exc: BaseException, topic: str, index: int) -> NoReturn:
    raise RuntimeError(f"mapped for {topic} row {index}") from exc


def produce(producer: FakeProducer, plan: RecordPlan, batch: pa.RecordBatch, start: int = 0) -> int:
    return produce_rows(
        producer,
        plan,
        batch,
        start=start,
        on_error=raise_it,
        sink="s",
        batch_id=3,
        partition_id=1,
    )


def plan(schema: pa.Schema, topic: str | None = "out") -> RecordPlan:
    return plan_records(schema, default_topic=topic, sink="s", batch_id=3)


def test_value_only_rows_go_to_the_default_topic() -> None:
    batch = pa.record_batch({"value": pa.array(["a", None, "c"])})
    producer = FakeProducer()
    assert produce(producer, plan(batch.schema), batch) == 3
    assert producer.records == [
        ("out", b"a", None, -1, None),  # strings are sent as their UTF-8 bytes
        ("out", None, None, -1, None),  # a null value is a tombstone, as in Spark
        ("out", b"c", None, -1, None),
    ]


def test_keys_and_binary_values() -> None:
    batch = pa.record_batch(
        {
            "key": pa.array([b"k1", None], pa.binary()),
            "value": pa.array([b"\x00", b"v"], pa.large_binary()),
        }
    )
    producer = FakeProducer()
    produce(producer, plan(batch.schema), batch)
    assert [(r[1], r[2]) for r in producer.records] == [(b"\x00", b"k1"), (b"v", None)]


def test_topic_partition_and_headers_columns() -> None:
    batch = pa.record_batch(
        {
            "topic": pa.array(["t1", "t2"]),
            "value": pa.array(["a", "b"]),
            "partition": pa.array([2, None], pa.int32()),
            "headers": pa.array([[{"key": "h", "value": b"1"}], None], HEADERS),
        }
    )
    producer = FakeProducer()
    produce(producer, plan(batch.schema, topic=None), batch)
    assert producer.records == [
        ("t1", b"a", None, 2, [("h", b"1")]),
        ("t2", b"b", None, -1, None),
    ]


def test_the_topic_option_overrides_the_topic_column_as_in_spark() -> None:
    batch = pa.record_batch({"topic": pa.array(["ignored"]), "value": pa.array(["a"])})
    producer = FakeProducer()
    produce(producer, plan(batch.schema, topic="option"), batch)
    assert producer.records[0][0] == "option"


def test_extra_columns_are_ignored_as_in_spark() -> None:
    batch = pa.record_batch({"value": pa.array(["a"]), "id": pa.array([1])})
    producer = FakeProducer()
    produce(producer, plan(batch.schema), batch)
    assert producer.records == [("out", b"a", None, -1, None)]


def test_rows_before_start_are_skipped() -> None:
    batch = pa.record_batch({"value": pa.array(["a", "b", "c"])})
    producer = FakeProducer()
    assert produce(producer, plan(batch.schema), batch, start=1) == 2
    assert [r[1] for r in producer.records] == [b"b", b"c"]


def test_a_full_queue_is_drained_and_no_record_lost_or_repeated() -> None:
    batch = pa.record_batch(
        {
            "key": pa.array([str(i) for i in range(100)]),
            "value": pa.array([f"v{i}" for i in range(100)]),
        }
    )
    producer = FakeProducer(full_every=7)
    produce(producer, plan(batch.schema), batch)
    assert [r[1] for r in producer.records] == [f"v{i}".encode() for i in range(100)]
    assert producer.polls > 0


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=8)),
            st.one_of(st.none(), st.text(max_size=5)),
            st.one_of(st.none(), st.integers(0, 5)),
            st.sampled_from(["a", "b"]),
        ),
        max_size=60,
    ),
    full_every=st.integers(0, 9),
    general=st.booleans(),
)
def test_every_row_is_produced_once_in_order(
    rows: list[tuple[Any, Any, Any, str]], full_every: int, general: bool
) -> None:
    columns: dict[str, Any] = {
        "value": pa.array([r[0] for r in rows], pa.binary()),
        "key": pa.array([r[1] for r in rows], pa.string()),
    }
    if general:
        columns["partition"] = pa.array([r[2] for r in rows], pa.int32())
        columns["topic"] = pa.array([r[3] for r in rows], pa.string())
    batch = pa.record_batch(columns)
    producer = FakeProducer(full_every=1 + full_every if full_every else 0)
    produce(producer, plan(batch.schema, topic=None if general else "out"), batch)
    expected = [
        (
            (r[3] if general else "out"),
            r[0],
            None if r[1] is None else r[1].encode(),
            (r[2] if general and r[2] is not None else -1),
        )
        for r in rows
    ]
    assert [rec[:4] for rec in producer.records] == expected


def test_produce_errors_go_through_on_error_with_the_topic() -> None:
    batch = pa.record_batch({"value": pa.array(["ok", "big"])})
    with pytest.raises(RuntimeError, match="mapped for out row 1"):
        produce(FakeProducer(fail_on=b"big"), plan(batch.schema), batch)
    batch = pa.record_batch({"topic": pa.array(["t9", "t9"]), "value": pa.array(["ok", "big"])})
    with pytest.raises(RuntimeError, match="mapped for t9 row 1"):
        produce(FakeProducer(fail_on=b"big"), plan(batch.schema, topic=None), batch)


@pytest.mark.parametrize("columns", ["value", "keyed", "general"])
def test_an_on_error_that_returns_skips_the_row_and_goes_on(columns: str) -> None:
    values = ["a", "big", "b", "big", "c"]
    data: dict[str, pa.Array] = {"value": pa.array(values)}
    if columns != "value":
        data["key"] = pa.array(["k"] * 5)
    if columns == "general":
        data["topic"] = pa.array(["t"] * 5)
    batch = pa.record_batch(data)
    producer = FakeProducer(fail_on=b"big")
    skipped: list[int] = []
    produce_rows(
        producer,
        plan(batch.schema, topic=None if columns == "general" else "out"),
        batch,
        start=1,
        on_error=lambda exc, topic, index: skipped.append(index),
        sink="s",
        batch_id=0,
        partition_id=0,
    )
    assert skipped == [0, 2]  # rows 1 and 3, counted from start
    assert [r[1] for r in producer.records] == [b"b", b"c"]


def test_a_null_topic_is_a_data_error_naming_the_row() -> None:
    batch = pa.record_batch({"topic": pa.array(["t", None]), "value": pa.array(["a", "b"])})
    producer = FakeProducer()
    with pytest.raises(DataError, match="row 1") as info:
        produce(producer, plan(batch.schema, topic=None), batch)
    assert info.value.column == "topic"
    assert producer.records == []


def test_a_negative_partition_is_a_data_error() -> None:
    batch = pa.record_batch({"value": pa.array(["a"]), "partition": pa.array([-3], pa.int32())})
    with pytest.raises(DataError, match="partition -3") as info:
        produce(FakeProducer(), plan(batch.schema), batch)
    assert (info.value.column, info.value.batch_id, info.value.partition_id) == ("partition", 3, 1)


def test_a_partition_beyond_int32_is_a_data_error() -> None:
    batch = pa.record_batch({"value": pa.array(["a"]), "partition": pa.array([2**31])})
    with pytest.raises(DataError, match="partition 2147483648") as info:
        produce(FakeProducer(), plan(batch.schema), batch)
    assert info.value.column == "partition"


@pytest.mark.parametrize(
    ("headers", "row"),
    [
        ([None, [{"key": "a", "value": b"1"}, None]], 1),
        ([[{"key": "a", "value": b"1"}], [], [{"key": None, "value": b"2"}]], 2),
    ],
    ids=["null-header", "null-key"],
)
def test_a_header_without_a_key_is_a_data_error_naming_the_row(
    headers: list[Any], row: int
) -> None:
    batch = pa.record_batch(
        {"value": pa.array(["v"] * len(headers)), "headers": pa.array(headers, HEADERS)}
    )
    producer = FakeProducer()
    with pytest.raises(DataError, match=f"row {row} has a null header") as info:
        produce(producer, plan(batch.schema), batch)
    assert info.value.column == "headers"
    assert producer.records == []
    # Counted from the start of the record batch, also when the first rows were produced.
    with pytest.raises(DataError, match=f"row {row} has a null header"):
        produce(FakeProducer(), plan(batch.schema), batch, start=1)


def test_null_headers_and_null_header_values_are_fine() -> None:
    headers = pa.array([None, [{"key": "a", "value": None}]], HEADERS)
    batch = pa.record_batch({"value": pa.array(["x", "y"]), "headers": headers})
    producer = FakeProducer()
    assert produce(producer, plan(batch.schema), batch) == 2
    assert [r[4] for r in producer.records] == [None, [("a", None)]]


@pytest.mark.parametrize(
    ("column", "values", "hint"),
    [
        ("value", pa.array([1]), "to_json"),
        ("partition", pa.array(["1"]), "cast('int')"),
        ("topic", pa.array([1]), "cast('string')"),
        ("headers", pa.array([[("k", b"v")]], pa.map_(pa.string(), pa.binary())), "map_entries"),
    ],
)
def test_schema_errors_say_how_to_fix_the_column(column: str, values: pa.Array, hint: str) -> None:
    columns = {"value": pa.array(["a"]), column: values}
    with pytest.raises(ConfigurationError) as info:
        plan(pa.record_batch(columns).schema)
    assert info.value.column == column
    assert hint in str(info.value)


@pytest.mark.parametrize(
    ("columns", "column", "match"),
    [
        ({"id": pa.array([1])}, "value", "no 'value' column"),
        ({"Value": pa.array(["a"])}, "value", "case-sensitive"),
        ({"value": pa.array([1])}, "value", "string or binary"),
        ({"value": pa.array(["a"]), "key": pa.array([1.5])}, "key", "string or binary"),
        ({"value": pa.array(["a"]), "topic": pa.array([b"t"])}, "topic", "string"),
        ({"value": pa.array(["a"]), "partition": pa.array(["1"])}, "partition", "int"),
        ({"value": pa.array(["a"]), "headers": pa.array([{"k": "v"}])}, "headers", "array<struct"),
    ],
)
def test_schema_errors_name_the_column(columns: dict[str, Any], column: str, match: str) -> None:
    batch = pa.record_batch(columns)
    with pytest.raises(ConfigurationError, match=match) as info:
        plan(batch.schema)
    assert (info.value.column, info.value.sink, info.value.batch_id) == (column, "s", 3)


def test_no_topic_anywhere_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="no topic") as info:
        plan(pa.schema([("value", pa.string())]), topic=None)
    assert info.value.column == "topic"


def test_duplicate_columns_are_refused() -> None:
    schema = pa.schema([("value", pa.string()), ("value", pa.binary())])
    with pytest.raises(ConfigurationError, match="two columns"):
        plan(schema)


def test_large_string_types_from_spark_are_accepted() -> None:
    schema = pa.schema(
        [
            ("value", pa.large_string()),
            ("key", pa.large_binary()),
            ("topic", pa.large_string()),
            ("partition", pa.int64()),
        ]
    )
    p = plan(schema, topic=None)
    assert (p.value, p.key, p.topic, p.partition) == (0, 1, 2, 3)


def test_produce_one_waits_for_room_and_writes_the_record_once() -> None:
    producer = FakeProducer(full_every=2)
    produce_one(producer, "ctl", b"m1", b"k1", 0)
    produce_one(producer, "ctl", b"m2", b"k2", 0)  # queue full once, then retried
    assert producer.records == [("ctl", b"m1", b"k1", 0, None), ("ctl", b"m2", b"k2", 0, None)]
    assert producer.polls >= 1


def test_a_dead_letter_record_round_trips_and_carries_every_header() -> None:
    from twophase import DeadLetter
    from twophase.connectors.kafka._dead_letters import HEADER_NAMES, decode_with_types, encode

    letter = DeadLetter("s", 3, 1, 7, "too_large", "MSG_SIZE_TOO_LARGE", "big", "value", '{"v": 1}')
    key, value, headers = encode(letter, {"value": "binary"})
    assert key == b"s/3/1/7"
    assert decode_with_types(value) == (letter, {"value": "binary"})
    assert set(dict(headers)) == set(HEADER_NAMES)

"""The Arrow -> COPY (FORMAT csv) encoder, without a server."""

from __future__ import annotations

import csv
import datetime as dt
import decimal
import io
import json

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase.connectors.jdbc._encode import ColumnPlan
from twophase.connectors.jdbc._postgres._csv import encode_csv, render_column
from twophase.connectors.jdbc._postgres._type_map import ColumnKind
from twophase.errors import DataError

pytestmark = pytest.mark.unit


def csv_of(batch: pa.RecordBatch, kinds: dict[str, str] | None = None) -> str:
    kinds = kinds or {}
    plans = [
        ColumnPlan(i, n, kinds.get(n, ColumnKind.PLAIN)) for i, n in enumerate(batch.schema.names)
    ]
    return encode_csv(batch, plans).to_pybytes().decode()


def test_nulls_are_unquoted_empty_and_empty_strings_are_quoted() -> None:
    batch = pa.record_batch({"i": pa.array([1, None], pa.int64()), "s": ["", None]})
    assert csv_of(batch) == '1,""\n,\n'


def test_strings_with_separators_quotes_and_newlines_are_quoted() -> None:
    batch = pa.record_batch({"s": ['a,"b"', "line\nbreak", "\\."]})
    rows = list(csv.reader(io.StringIO(csv_of(batch))))
    assert [r[0] for r in rows] == ['a,"b"', "line\nbreak", "\\."]
    assert csv_of(batch).splitlines()[0] == '"a,""b"""'


def test_scalars_render_in_postgres_input_syntax() -> None:
    batch = pa.record_batch(
        {
            "b": [True, False],
            "f": pa.array([0.1, float("nan")], pa.float64()),
            "h": pa.array([1.5, None], pa.float16()),
            "d": pa.array([decimal.Decimal("1.20"), decimal.Decimal("-3.00")], pa.decimal128(5, 2)),
            "day": pa.array([dt.date(2020, 2, 29), dt.date(1, 1, 1)], pa.date32()),
            "d64": pa.array([dt.date(2021, 1, 1), None], pa.date64()),
            "ts": pa.array([dt.datetime(2020, 1, 2, 3, 4, 5, 6), None], pa.timestamp("us")),
            "tz": pa.array(
                [dt.datetime(2020, 1, 2, 3, 4, 5, 6), None], pa.timestamp("us", tz="UTC")
            ),
            "t": pa.array([dt.time(1, 2, 3, 4), None], pa.time64("us")),
        }
    )
    first, second = csv_of(batch).splitlines()
    assert first == (
        "true,0.1,1.5,1.20,2020-02-29,2021-01-01,2020-01-02 03:04:05.000006,"
        '"2020-01-02 03:04:05.000006Z",01:02:03.000004'
    )
    assert second == "false,nan,,-3.00,0001-01-01,,,,"


def test_dictionary_and_large_strings_render_as_text() -> None:
    batch = pa.record_batch(
        {
            "d": pa.array(["x", "y", "x"]).dictionary_encode(),
            "l": pa.array(["a", None, "c"], pa.large_string()),
        }
    )
    assert csv_of(batch) == '"x","a"\n"y",\n"x","c"\n'


def test_binary_is_bytea_hex() -> None:
    array = pa.array([b"\x00\xffA", b"", None], pa.binary())
    assert render_column(array, ColumnKind.BYTEA).to_pylist() == ["\\x00ff41", "\\x", None]


def bytea_reference(value: bytes | None) -> str | None:
    return None if value is None else "\\x" + value.hex()


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=20)), max_size=30),
    start=st.integers(0, 5),
    large=st.booleans(),
)
def test_bytea_hex_matches_python_for_any_slice(
    values: list[bytes | None], start: int, large: bool
) -> None:
    array = pa.array(values, pa.large_binary() if large else pa.binary()).slice(start)
    expected = [bytea_reference(v) for v in values[start:]]
    assert render_column(array, ColumnKind.BYTEA).to_pylist() == expected


def test_fixed_size_binary_is_bytea_hex() -> None:
    array = pa.array([b"ab", None], pa.binary(2))
    assert render_column(array, ColumnKind.BYTEA).to_pylist() == ["\\x6162", None]


@pytest.mark.parametrize(
    ("unit", "value", "text"),
    [
        ("s", 3, "3 seconds"),
        ("ms", -5, "-5 milliseconds"),
        ("us", 7, "7 microseconds"),
        ("ns", 8_999, "8 microseconds"),
    ],
)
def test_durations_are_interval_text(unit: str, value: int, text: str) -> None:
    array = pa.array([value, None], pa.duration(unit))
    assert render_column(array, ColumnKind.INTERVAL).to_pylist() == [text, None]


def array_reference(value: list[str | None] | None) -> str | None:
    if value is None:
        return None

    def quote(item: str | None) -> str:
        if item is None:
            return "NULL"
        return '"' + item.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return "{" + ",".join(quote(v) for v in value) + "}"


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.none(), st.lists(st.one_of(st.none(), st.text(max_size=8)), max_size=5)),
        max_size=20,
    ),
    start=st.integers(0, 3),
)
def test_string_arrays_are_escaped_array_literals(
    values: list[list[str | None] | None], start: int
) -> None:
    array = pa.array(values, pa.list_(pa.string())).slice(start)
    expected = [array_reference(v) for v in values[start:]]
    assert render_column(array, ColumnKind.ARRAY).to_pylist() == expected


def test_scalar_arrays_quote_every_element() -> None:
    array = pa.array([[1, None, 3], [], None], pa.list_(pa.int32()))
    assert render_column(array, ColumnKind.ARRAY).to_pylist() == ['{"1",NULL,"3"}', "{}", None]
    binary = pa.array([[b"\x01"]], pa.large_list(pa.binary()))
    assert render_column(binary, ColumnKind.ARRAY).to_pylist() == ['{"\\\\x01"}']


def test_structs_maps_and_nested_lists_become_json() -> None:
    t = pa.struct(
        [
            ("i", pa.int64()),
            ("s", pa.string()),
            ("d", pa.decimal128(5, 2)),
            ("b", pa.binary()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("m", pa.map_(pa.string(), pa.list_(pa.int32()))),
        ]
    )
    value = {
        "i": 1,
        "s": 'q"é',
        "d": decimal.Decimal("1.50"),
        "b": b"\x00",
        "ts": dt.datetime(2020, 1, 1, tzinfo=dt.timezone.utc),
        "m": [("k", [1, None])],
    }
    out = render_column(pa.array([value, None], t), ColumnKind.JSON, "c").to_pylist()
    assert out[1] is None
    assert out[0] == (
        '{"i":1,"s":"q\\"é","d":1.50,"b":"AA==","ts":"2020-01-01T00:00:00+00:00",'
        '"m":{"k":[1,null]}}'
    )
    assert json.loads(out[0])["m"] == {"k": [1, None]}
    nested = pa.array([[[1], [2, 3]]], pa.list_(pa.list_(pa.int64())))
    assert render_column(nested, ColumnKind.JSON).to_pylist() == ["[[1],[2,3]]"]


def test_map_keys_that_are_not_strings_become_strings() -> None:
    array = pa.array([[(1, "a"), (2, None)]], pa.map_(pa.int32(), pa.string()))
    assert render_column(array, ColumnKind.JSON).to_pylist() == ['{"1":"a","2":null}']


def test_nan_inside_json_is_a_data_error_naming_the_column() -> None:
    array = pa.array([{"x": float("nan")}], pa.struct([("x", pa.float64())]))
    with pytest.raises(DataError, match="not a JSON number") as info:
        render_column(array, ColumnKind.JSON, "attrs")
    assert info.value.column == "attrs"


def test_extra_columns_are_appended_after_the_planned_ones() -> None:
    batch = pa.record_batch({"a": [1, 2], "skip": ["x", "y"], "b": ["p", "q"]})
    plans = [ColumnPlan(2, "b", ColumnKind.PLAIN), ColumnPlan(0, "a", ColumnKind.PLAIN)]
    data = encode_csv(batch, plans, [pa.array([10, 11], pa.int64())])
    assert data.to_pybytes().decode() == '"p",1,10\n"q",2,11\n'

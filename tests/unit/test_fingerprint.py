"""Fingerprints: order independent, multiset exact, sensitive to every value and type."""

from __future__ import annotations

import datetime
import decimal

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase import Fingerprint, fingerprint_batches
from twophase._fingerprint import row_hashes

pytestmark = pytest.mark.unit

values = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.text(max_size=30)),
    ),
    max_size=60,
)


def batch(rows: list[tuple[int | None, str | None]]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
        }
    )


@settings(max_examples=200, deadline=None)
@given(rows=values, data=st.data())
def test_fingerprint_ignores_order_and_batching(
    rows: list[tuple[int | None, str | None]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(rows))
    cut = data.draw(st.integers(0, len(rows)))
    whole = fingerprint_batches([batch(rows)])
    assert fingerprint_batches([batch(shuffled[:cut]), batch(shuffled[cut:])]) == whole
    assert whole.count == len(rows)


@settings(max_examples=200, deadline=None)
@given(rows=values.filter(bool), data=st.data())
def test_fingerprint_changes_when_a_row_changes_or_repeats(
    rows: list[tuple[int | None, str | None]], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(rows) - 1))
    k, v = rows[index]
    changed = list(rows)
    changed[index] = ((k or 0) + 1 if k is None or k < 2**63 - 1 else 0, v)
    assert fingerprint_batches([batch(changed)]) != fingerprint_batches([batch(rows)])
    assert fingerprint_batches([batch([*rows, rows[index]])]) != fingerprint_batches([batch(rows)])


def test_null_empty_and_zero_are_distinct() -> None:
    a = pa.record_batch({"s": pa.array([None], pa.string())})
    b = pa.record_batch({"s": pa.array([""], pa.string())})
    c = pa.record_batch({"i": pa.array([None], pa.int64())})
    d = pa.record_batch({"i": pa.array([0], pa.int64())})
    assert len({fingerprint_batches([x]) for x in (a, b)}) == 2
    assert len({fingerprint_batches([x]) for x in (c, d)}) == 2


def test_swapping_values_between_columns_changes_the_hash() -> None:
    a = pa.record_batch({"x": [1], "y": [2]})
    b = pa.record_batch({"x": [2], "y": [1]})
    assert row_hashes(a)[0] != row_hashes(b)[0]


def test_every_spark_type_is_hashed_deterministically() -> None:
    rows = pa.record_batch(
        {
            "i8": pa.array([1, None], pa.int8()),
            "f": pa.array([1.5, -0.0], pa.float32()),
            "d": pa.array([0.0, float("nan")], pa.float64()),
            "dec": pa.array([decimal.Decimal("1.10"), None], pa.decimal128(10, 2)),
            "bin": pa.array([b"\x00\x01", b""], pa.binary()),
            "b": pa.array([True, None], pa.bool_()),
            "date": pa.array([datetime.date(2024, 2, 29), None], pa.date32()),
            "ts": pa.array(
                [datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC), None],
                pa.timestamp("us", "UTC"),
            ),
            "ntz": pa.array([datetime.datetime(2024, 1, 1), None], pa.timestamp("us")),
            "arr": pa.array([[1, 2], None], pa.list_(pa.int32())),
            "st": pa.array(
                [{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int32()), ("b", pa.string())])
            ),
            "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int32())),
            "large": pa.array(["é" * 3000, "x"], pa.large_string()),
        }
    )
    first = fingerprint_batches([rows])
    assert first == fingerprint_batches([rows.take([1, 0])])
    assert first.count == 2
    # -0.0 == 0.0 and NaN == NaN for the fingerprint
    zero = pa.record_batch({"d": pa.array([0.0], pa.float64())})
    neg = pa.record_batch({"d": pa.array([-0.0], pa.float64())})
    assert fingerprint_batches([zero]) == fingerprint_batches([neg])


def test_long_values_cross_the_chunk_boundary() -> None:
    big = ["a" * (3 << 20), "b" * (5 << 20), "c"]
    one = fingerprint_batches([pa.record_batch({"v": big})])
    other = fingerprint_batches([pa.record_batch({"v": big[::-1]})])
    assert one == other
    assert one != fingerprint_batches(
        [pa.record_batch({"v": ["a" * (3 << 20), "b" * (5 << 20), "d"]})]
    )


def test_fingerprint_text_round_trip() -> None:
    fp = Fingerprint(3, 2**64 - 1)
    assert Fingerprint.parse(str(fp)) == fp

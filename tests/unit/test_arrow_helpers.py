"""The pandas-free Arrow helpers (core and connectors) give what pyarrow's own calls give.

Each helper replaces a ``pa.array`` / ``pa.scalar`` / ``to_numpy`` / ``pc.index`` call; it is
compared here with that call on sliced (non-zero ``offset``) and null-bearing inputs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from twophase import _arrow as core
from twophase.connectors import _arrow as conn

pytestmark = pytest.mark.unit

TEXT_TYPES = [pa.binary(), pa.string(), pa.large_binary(), pa.large_string()]


def slices(array: pa.Array) -> list[pa.Array]:
    """The array, slices at odd offsets (inside a byte of a bitmap), and an empty slice."""
    n = len(array)
    return [array, array.slice(3), array.slice(5, n - 9), array.slice(n - 1), array.slice(2, 0)]


def with_nulls(values: list[Any], type: pa.DataType) -> pa.Array:
    return pa.array([None if i % 3 == 1 else v for i, v in enumerate(values)], type)


def test_core_bool_array_and_binary_array_equal_pa_array() -> None:
    mask = np.arange(21) % 3 == 0
    assert core.bool_array(mask).equals(pa.array(mask))
    assert core.bool_array(mask[5:]).equals(pa.array(mask[5:]))
    values = [b"", b"a", "é".encode() * 40, b"\x00\t"] * 5
    for type in TEXT_TYPES:
        assert core.binary_array(values, type).equals(pa.array(values, type)), type
    assert core.binary_array([]).equals(pa.array([], pa.large_binary()))


@pytest.mark.parametrize(
    ("type", "dtype"),
    [
        (pa.int8(), np.int8),
        (pa.uint64(), np.uint64),
        (pa.int64(), np.int64),
        (pa.float64(), np.float64),
        (pa.date32(), np.int32),
        (pa.timestamp("us"), np.int64),
    ],
)
def test_core_fixed_values_equal_to_numpy_on_valid_slots(type: pa.DataType, dtype: Any) -> None:
    storage = pa.from_numpy_dtype(np.dtype(dtype))
    array = with_nulls(list(range(23)), storage).view(type)
    for part in slices(array):
        valid = part.is_valid().to_numpy(zero_copy_only=False)
        assert np.array_equal(core.valid_mask(part), valid)
        expected = part.view(storage).to_numpy(zero_copy_only=False)
        got = core.fixed_values(part, dtype)
        assert got.dtype == np.dtype(dtype)
        assert len(got) == len(part)
        assert np.array_equal(got[valid], expected[valid])


def test_core_bool_values_and_valid_mask_on_sliced_booleans_with_nulls() -> None:
    array = with_nulls([i % 2 == 0 for i in range(19)], pa.bool_())
    for part in slices(array):
        valid = part.is_valid().to_numpy(zero_copy_only=False)
        assert np.array_equal(core.valid_mask(part), valid)
        expected = part.fill_null(False).to_numpy(zero_copy_only=False)
        assert np.array_equal(core.bool_values(part)[valid], expected[valid])
    assert np.array_equal(core.valid_mask(pa.nulls(4)), np.zeros(4, bool))


def test_connectors_text_array_and_text_scalar_equal_pa_array_and_pa_scalar() -> None:
    values: list[Any] = ["", "a", None, "é'\t", None, "x" * 300]
    for type in TEXT_TYPES:
        items = [
            v.encode() if isinstance(v, str) and pa.types.is_binary(type) else v for v in values
        ]
        got = conn.text_array(items, type)
        assert got.equals(pa.array(items, type)), type
        assert got.null_count == 2
        assert conn.text_array(items[:2], type).buffers()[0] is None  # no nulls, no bitmap
        assert conn.text_scalar("é'", type).equals(pa.scalar("é'", type))
    assert conn.text_scalar(b"\\N", pa.large_binary()).equals(pa.scalar(b"\\N", pa.large_binary()))


def test_connectors_numbers_and_number_values_equal_pa_array_and_to_numpy() -> None:
    seq = np.arange(7, 19)
    for type in [pa.int64(), pa.int32(), pa.uint8(), pa.float64()]:
        assert conn.numbers(seq, type).equals(pa.array(seq, type)), type
    lists = pa.array([[1], None, [2, 3], [], [4, 5, 6], None, [7]] * 3, pa.list_(pa.int64()))
    for part in slices(lists):
        offsets = part.offsets
        assert np.array_equal(conn.number_values(offsets), offsets.to_numpy(zero_copy_only=False))
    floats = with_nulls([0.5 * i for i in range(17)], pa.float32())
    for part in slices(floats):
        valid = part.is_valid().to_numpy(zero_copy_only=False)
        expected = part.to_numpy(zero_copy_only=False)
        assert np.array_equal(conn.number_values(part)[valid], expected[valid])


def test_connectors_first_true_equals_pc_index_true() -> None:
    masks = [
        pa.array([None, False, True, None, True] * 4),
        pa.array([False, None] * 9),
        pa.array([True] * 10),
        pa.array([], pa.bool_()),
    ]
    for mask in masks:
        for part in slices(mask) if len(mask) > 9 else [mask]:
            assert conn.first_true(part) == pc.index(part, True).as_py(), part

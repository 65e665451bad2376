"""Arrow values built from numpy and bytes without pyarrow's pandas shim, for both connectors.

``pa.array``, ``pa.scalar``, ``Array.to_numpy`` and a compute call given a
Python scalar import pandas (about 0.7 CPU-s, on every Spark Python worker) the
first time one runs; building an array from its buffers and reading them do
not. The connectors build their constants and columns with these helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = ["first_true", "number_values", "numbers", "text_array", "text_scalar"]


def text_array(values: Sequence[str | bytes | None], type: pa.DataType) -> pa.Array:
    """Return ``pa.array(values, type)`` for a string or binary ``type``.

    Parameters
    ----------
    values
        ``str`` (stored as UTF-8) or ``bytes``; None is a null.
    type
        ``string``, ``binary``, ``large_string`` or ``large_binary``.

    Returns
    -------
    pyarrow.Array
        One slot per item of ``values``.
    """
    raw = [v.encode() if isinstance(v, str) else (v or b"") for v in values]
    ends = np.cumsum([len(v) for v in raw], dtype=np.int64)
    offsets = np.concatenate((np.zeros(1, np.int64), ends))
    if not (pa.types.is_large_string(type) or pa.types.is_large_binary(type)):
        offsets = offsets.astype(np.int32)
    valid = np.array([v is not None for v in values], dtype=bool)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    buffers = [bitmap, pa.py_buffer(offsets), pa.py_buffer(b"".join(raw))]
    return pa.Array.from_buffers(type, len(values), buffers)


def text_scalar(value: str | bytes, type: pa.DataType) -> pa.Scalar:
    """Return ``pa.scalar(value, type)`` for a string or binary type (see :func:`text_array`)."""
    return text_array([value], type)[0]


def numbers(values: np.ndarray[Any, Any], type: pa.DataType) -> pa.Array:
    """Return ``pa.array(values, type)`` (no nulls) for a fixed-width ``type``.

    Parameters
    ----------
    values
        One-dimensional numpy array, cast to ``type``'s numpy dtype.
    type
        A signed or unsigned integer or floating type.

    Returns
    -------
    pyarrow.Array
        The same values.
    """
    data = np.ascontiguousarray(values, dtype=f"{_kind(type)}{type.bit_width // 8}")
    return pa.Array.from_buffers(type, len(data), [None, pa.py_buffer(data)])


def number_values(array: pa.Array) -> np.ndarray[Any, Any]:
    """Return ``array.to_numpy()`` of an integer or floating array (null slots unspecified).

    Parameters
    ----------
    array
        A fixed-width numeric array; it may be a slice.

    Returns
    -------
    numpy.ndarray
        ``len(array)`` values (a read-only view).
    """
    dtype = np.dtype(f"{_kind(array.type)}{array.type.bit_width // 8}")
    end = array.offset + len(array)
    return np.frombuffer(array.buffers()[1], dtype, count=end)[array.offset :]


def first_true(mask: pa.BooleanArray) -> int:
    """Return ``pc.index(mask, True)``: the first slot holding True (a null is not), or -1.

    Parameters
    ----------
    mask
        A boolean array, maybe a slice (``offset`` > 0); its nulls count as
        False.

    Returns
    -------
    int
        Position in ``mask``, -1 when no slot holds True.
    """
    found = _bits(mask)
    if mask.null_count:
        found &= _bits(mask.is_valid())
    hits = np.flatnonzero(found)
    return int(hits[0]) if len(hits) else -1


def _bits(mask: pa.BooleanArray) -> np.ndarray[Any, Any]:
    """Return the values of a boolean array as numpy booleans (null slots unspecified)."""
    end = mask.offset + len(mask)
    packed = np.frombuffer(mask.buffers()[1], np.uint8, count=(end + 7) // 8)
    return np.unpackbits(packed, bitorder="little")[mask.offset : end].astype(bool)


def _kind(type: pa.DataType) -> str:
    if pa.types.is_floating(type):
        return "f"
    return "i" if pa.types.is_signed_integer(type) else "u"

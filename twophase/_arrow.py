"""Arrow helpers: arrays to and from numpy without pyarrow's pandas shim, record batches joined.

``pa.array``, ``pa.scalar``, ``Array.to_numpy`` and ``np.asarray(array)`` import
pandas (about 0.7 CPU-s) the first time any of them runs; building an array
from its buffers, reading its buffers, slicing and Arrow's compute kernels do
not. These helpers are the few constructions the core needs, written that way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "binary_array",
    "bool_array",
    "bool_values",
    "coalesced",
    "concatenated",
    "fixed_values",
    "valid_mask",
]


def bool_array(mask: np.ndarray[Any, Any]) -> pa.BooleanArray:
    """Return a boolean array (no nulls) of a numpy mask, like ``pa.array(mask)``.

    Parameters
    ----------
    mask
        One-dimensional numpy array of booleans.

    Returns
    -------
    pyarrow.BooleanArray
        The same values.
    """
    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    array: pa.BooleanArray = pa.Array.from_buffers(
        pa.bool_(), len(mask), [None, pa.py_buffer(bits)]
    )
    return array


def binary_array(values: Sequence[bytes], type: pa.DataType | None = None) -> pa.Array:
    """Return an array (no nulls) of ``values``, like ``pa.array(values, type)``.

    Parameters
    ----------
    values
        The values, as bytes (UTF-8 for a string type).
    type
        ``binary``, ``string``, ``large_binary`` (the default) or ``large_string``.

    Returns
    -------
    pyarrow.Array
        One value per item of ``values``.
    """
    type = pa.large_binary() if type is None else type
    large = pa.types.is_large_binary(type) or pa.types.is_large_string(type)
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    offsets = np.concatenate((np.zeros(1, np.int64), np.cumsum(lengths)))
    data = pa.py_buffer(offsets if large else offsets.astype(np.int32))
    return pa.Array.from_buffers(type, len(values), [None, data, pa.py_buffer(b"".join(values))])


def fixed_values(array: pa.Array, dtype: Any) -> np.ndarray[Any, Any]:
    """Return the values of a fixed-width array as numpy, like ``array.to_numpy()``.

    Parameters
    ----------
    array
        An array whose values are stored as ``dtype`` (int64 for int64 and
        64-bit temporal types, float64 for float64, ...); it may be a slice.
    dtype
        The numpy dtype of one value.

    Returns
    -------
    numpy.ndarray
        ``len(array)`` values (a read-only view); the values of null entries are
        unspecified: mask them with :func:`valid_mask`.
    """
    data = array.buffers()[1]
    if data is None:
        return np.zeros(len(array), dtype)
    values = np.frombuffer(data, dtype, count=array.offset + len(array))
    return values[array.offset :]


def bool_values(array: pa.BooleanArray) -> np.ndarray[Any, Any]:
    """Return the values of a boolean array as a numpy mask.

    Parameters
    ----------
    array
        A boolean array; it may be a slice.

    Returns
    -------
    numpy.ndarray
        ``len(array)`` booleans; those of null entries are unspecified (mask
        them with :func:`valid_mask`).
    """
    data = array.buffers()[1]
    if data is None:
        return np.zeros(len(array), bool)
    end = array.offset + len(array)
    bits = np.unpackbits(np.frombuffer(data, np.uint8, count=(end + 7) // 8), bitorder="little")
    return bits[array.offset : end].astype(bool)


def valid_mask(array: pa.Array) -> np.ndarray[Any, Any]:
    """Return which slots of ``array`` hold a value, like ``array.is_valid().to_numpy()``.

    Parameters
    ----------
    array
        Any array (Arrow computes the validity, whatever the layout).

    Returns
    -------
    numpy.ndarray
        ``len(array)`` booleans, False for a null.
    """
    return bool_values(array.is_valid())


def coalesced(
    batches: Iterable[pa.RecordBatch],
    rows: int | None,
    seen: Callable[[pa.RecordBatch], object] = lambda _: None,
) -> Iterator[pa.RecordBatch]:
    """Yield the non-empty record batches, each run of them concatenated up to ``rows`` rows.

    What a sink's ``write`` gets (``write_batch_rows``). ``seen`` gets each record batch
    as it came, so what is computed of them (a fingerprint) does not depend on ``rows``.

    Parameters
    ----------
    batches
        Record batches of one schema, in order.
    rows
        The fewest rows of a yielded batch but the last (None: each batch as it came).
    seen
        Called with each non-empty batch as it came.

    Yields
    ------
    pyarrow.RecordBatch
        The rows, in order.
    """
    buffered: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        seen(batch)
        if rows is None:
            yield batch
            continue
        buffered.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield concatenated(buffered)
            buffered, count = [], 0
    if buffered:
        yield concatenated(buffered)


def concatenated(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """Return record batches of one schema as one (the first itself when it is alone)."""
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]

"""Order-independent fingerprints of Arrow data (protocol B's idempotence markers).

A partition's fingerprint is ``(row count, sum of 64-bit row hashes mod 2**64)``:
equal for equal multisets of rows whatever their order, and cheap to combine
batch by batch. Row hashes are computed column-wise with numpy (no Python loop
per row) for every flat type; nested values (lists, structs, maps) are hashed
through a canonical JSON text of each value.

The hash is not cryptographic: it detects a replay that differs from what was
committed, it does not resist an adversary crafting collisions.
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._types import Fingerprint

__all__ = ["FingerprintAccumulator", "fingerprint_batches", "row_hashes"]

_U64 = np.uint64
_NULL = np.uint64(0x9E3779B97F4A7C15)
_SEED = np.uint64(0x2545F4914F6CDD1D)
# Largest number of value bytes hashed in one numpy pass (bounds temporary memory).
_CHUNK_BYTES = 1 << 23
# Values at least this long are hashed with BLAKE2b, one call per value.
_LONG_VALUE = 48


def _mix(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Apply the splitmix64 finaliser to every element (uint64, wrapping)."""
    x = x.astype(_U64, copy=True)
    x ^= x >> _U64(30)
    x *= _U64(0xBF58476D1CE4E5B9)
    x ^= x >> _U64(27)
    x *= _U64(0x94D049BB133111EB)
    x ^= x >> _U64(31)
    return np.asarray(x, dtype=_U64)


_POSITION_WEIGHTS = _mix(np.arange(1024, dtype=_U64) + _SEED) | _U64(1)


def _weights(length: int) -> np.ndarray[Any, Any]:
    global _POSITION_WEIGHTS
    if length > len(_POSITION_WEIGHTS):
        size = max(length, 2 * len(_POSITION_WEIGHTS))
        _POSITION_WEIGHTS = _mix(np.arange(size, dtype=_U64) + _SEED) | _U64(1)
    return _POSITION_WEIGHTS


def _hash_bytes(arr: pa.Array) -> np.ndarray[Any, Any]:
    """Hash each value of a binary-like array; nulls are handled by the caller.

    Values of at least ``_LONG_VALUE`` bytes go through BLAKE2b one by one (C
    speed per byte), shorter ones through a vectorised polynomial hash (no
    Python call per value). The path depends only on the value's own length,
    so equal values always hash alike.
    """
    arr = arr.cast(pa.large_binary())
    lengths_all = np.asarray(
        pc.binary_length(arr).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64
    )
    long = lengths_all >= _LONG_VALUE
    if long.any():
        out = np.empty(len(arr), dtype=_U64)
        short = ~long
        if short.any():
            out[short] = _hash_short_bytes(arr.filter(pa.array(short)))
        out[long] = _hash_long_bytes(arr.filter(pa.array(long)))
        return out
    return _hash_short_bytes(arr)


def _hash_long_bytes(arr: pa.Array) -> np.ndarray[Any, Any]:
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = memoryview(buffers[2])
    blake = hashlib.blake2b
    digests = b"".join(
        blake(data[start:end], digest_size=8).digest()
        for start, end in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)
    )
    return np.frombuffer(digests, dtype="<u8").astype(_U64)


def _hash_short_bytes(arr: pa.Array) -> np.ndarray[Any, Any]:
    n = len(arr)
    buffers = arr.buffers()
    offsets = np.frombuffer(buffers[1], dtype=np.int64)[arr.offset : arr.offset + n + 1]
    data = (
        np.frombuffer(buffers[2], dtype=np.uint8)
        if buffers[2] is not None
        else np.zeros(0, np.uint8)
    )
    lengths = np.diff(offsets)
    out = _mix(lengths.astype(_U64) + _SEED)
    if n == 0 or int(lengths.sum()) == 0:
        return out
    weights = _weights(int(lengths.max()))
    start_row = 0
    while start_row < n:
        # Take as many rows as fit in one chunk of bytes (at least one row).
        limit = offsets[start_row] + _CHUNK_BYTES
        end_row = int(np.searchsorted(offsets, limit, side="right")) - 1
        end_row = min(max(end_row, start_row + 1), n)
        lo, hi = int(offsets[start_row]), int(offsets[end_row])
        if hi > lo:
            chunk_lengths = lengths[start_row:end_row]
            starts = np.repeat(offsets[start_row:end_row] - lo, chunk_lengths)
            positions = np.arange(hi - lo, dtype=np.int64) - starts
            contrib = (data[lo:hi].astype(_U64) + _U64(1)) * weights[positions]
            cumulative = np.concatenate(([_U64(0)], np.cumsum(contrib, dtype=_U64)))
            rel = offsets[start_row : end_row + 1] - lo
            sums = cumulative[rel[1:]] - cumulative[rel[:-1]]
            out[start_row:end_row] ^= sums
        start_row = end_row
    return out


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)


def _hash_nested(arr: pa.Array) -> np.ndarray[Any, Any]:
    texts = [
        json.dumps(v, sort_keys=True, default=_json_default, separators=(",", ":")).encode()
        for v in arr.to_pylist()
    ]
    return _hash_bytes(pa.array(texts, type=pa.large_binary()))


def _column_hashes(arr: pa.Array) -> np.ndarray[Any, Any]:
    typ = arr.type
    if pa.types.is_dictionary(typ):
        return _column_hashes(arr.dictionary_decode())
    if isinstance(typ, pa.ExtensionType):
        return _column_hashes(arr.storage)
    if len(arr) == 0:
        return np.zeros(0, _U64)
    if pa.types.is_null(typ):
        return np.full(len(arr), _NULL, dtype=_U64)
    if pa.types.is_boolean(typ):
        values = np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=_U64)
        hashed = _mix(values + _U64(1))
    elif pa.types.is_floating(typ):
        floats = np.asarray(
            arr.cast(pa.float64()).fill_null(0.0).to_numpy(zero_copy_only=False), dtype=np.float64
        )
        floats = np.where(floats == 0.0, 0.0, floats)  # -0.0 == 0.0
        floats = np.where(np.isnan(floats), np.nan, floats)  # one NaN
        hashed = _mix(floats.view(_U64) ^ _U64(0x5851F42D4C957F2D))
    elif pa.types.is_integer(typ) or (pa.types.is_temporal(typ) and not pa.types.is_interval(typ)):
        if pa.types.is_integer(typ):
            ints = arr.cast(pa.int64()) if typ != pa.uint64() else arr
        else:
            width = typ.bit_width
            ints = arr.view(pa.int64() if width == 64 else pa.int32()).cast(pa.int64())
            # the unit is part of the value: 1 s and 1 ms must not collide
            unit = {"s": 1, "ms": 2, "us": 3, "ns": 4}.get(getattr(typ, "unit", ""), 0)
            ints = ints.fill_null(0)
            values = np.asarray(ints.to_numpy(zero_copy_only=False)).astype(np.int64)
            hashed = _mix(values.view(_U64) + _U64(unit * 0x1000193 + width))
            return _apply_nulls(arr, hashed)
        values = np.asarray(ints.fill_null(0).to_numpy(zero_copy_only=False))
        hashed = _mix(values.astype(np.int64).view(_U64) if values.dtype != _U64 else values)
    elif (
        pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
        or pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_fixed_size_binary(typ)
        or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(typ))
        or (hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(typ))
    ):
        hashed = _hash_bytes(arr)
    elif pa.types.is_decimal(typ):
        # Canonical text so that 1.50 and 1.5 of the same scale hash alike.
        hashed = _hash_bytes(arr.cast(pa.string()))
    else:
        hashed = _hash_nested(arr)
    return _apply_nulls(arr, hashed)


def _apply_nulls(arr: pa.Array, hashed: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        hashed = np.where(valid, hashed, _NULL)
    return hashed


def row_hashes(batch: pa.RecordBatch | pa.Table) -> np.ndarray[Any, Any]:
    """Return one 64-bit hash per row, combining every column in schema order.

    Parameters
    ----------
    batch
        Arrow data.

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of ``batch.num_rows`` hashes.
    """
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        if batch is None:
            return np.zeros(0, _U64)
    h = np.full(batch.num_rows, _mix(np.array([batch.num_columns], dtype=_U64))[0], _U64)
    for index, column in enumerate(batch.columns):
        salt = _U64(0x100000001B3 * (index + 1))
        h = _mix((h * _U64(31)) ^ (_column_hashes(column) + salt))
    return h


class FingerprintAccumulator:
    """Accumulate a :class:`~twophase.Fingerprint` batch by batch.

    Examples
    --------
    >>> import pyarrow as pa
    >>> acc = FingerprintAccumulator()
    >>> acc.add(pa.record_batch({"x": [1, 2]}))
    >>> acc.add(pa.record_batch({"x": [3]}))
    >>> acc.result().count
    3
    """

    __slots__ = ("count", "digest")

    def __init__(self) -> None:
        self.count = 0
        self.digest = 0

    def add(self, batch: pa.RecordBatch) -> None:
        """Add the rows of ``batch``.

        Parameters
        ----------
        batch
            Arrow record batch.
        """
        if batch.num_rows == 0:
            return
        self.count += batch.num_rows
        total = int(np.sum(row_hashes(batch), dtype=_U64))
        self.digest = (self.digest + total) & 0xFFFF_FFFF_FFFF_FFFF

    def result(self) -> Fingerprint:
        """Return the fingerprint of everything added so far.

        Returns
        -------
        Fingerprint
            Count and digest.
        """
        return Fingerprint(self.count, self.digest)


def fingerprint_batches(batches: Iterable[pa.RecordBatch]) -> Fingerprint:
    """Fingerprint a partition: count and order-independent digest of its rows.

    The same function the framework uses for markers and replay checks, so a
    sink or a test can compute what a marker of given rows will hold.

    Parameters
    ----------
    batches
        The partition's record batches (any iterable; consumed once).

    Returns
    -------
    Fingerprint
        Count and order-independent digest of all rows.

    Examples
    --------
    >>> import pyarrow as pa
    >>> a = fingerprint_batches([pa.record_batch({"x": [1, 2, 3]})])
    >>> b = fingerprint_batches([pa.record_batch({"x": [3]}), pa.record_batch({"x": [2, 1]})])
    >>> a == b, a.count
    (True, 3)
    """
    acc = FingerprintAccumulator()
    for batch in batches:
        acc.add(batch)
    return acc.result()

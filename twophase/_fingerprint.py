"""Order-independent fingerprints of Arrow data (the markers protocol's idempotence markers).

A partition's fingerprint is ``(row count, sum of 64-bit row hashes mod 2**64)``:
equal for equal multisets of rows whatever their order, and cheap to combine
batch by batch. Row hashes are computed column-wise with numpy (no Python loop
per row) for every flat type; nested values (lists, structs, maps) are hashed
through a canonical JSON text of each value.

The hash is not cryptographic: it detects a replay that differs from what was
committed, it does not resist an adversary crafting collisions.

Fingerprints are stored in markers, so the row hash is versioned
(:attr:`Fingerprint.version <twophase.Fingerprint.version>`): versions differ
only in how binary and string values are hashed (``_bytes_hash.py``).
"""

from __future__ import annotations

import datetime
import decimal
import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa

from ._arrow import binary_array, bool_values, fixed_values, valid_mask
from ._bytes_hash import U64, BytesHasher, bytes_hasher, mix
from ._values import FINGERPRINT_VERSION, Fingerprint

__all__ = ["FingerprintAccumulator", "fingerprint_batches", "row_hashes"]

_NULL = np.uint64(0x9E3779B97F4A7C15)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)


def _hash_nested(arr: pa.Array, hash_bytes: BytesHasher) -> np.ndarray[Any, Any]:
    texts = [
        json.dumps(v, sort_keys=True, default=_json_default, separators=(",", ":")).encode()
        for v in arr.to_pylist()
    ]
    return hash_bytes(binary_array(texts))


def _column_hashes(arr: pa.Array, hash_bytes: BytesHasher) -> np.ndarray[Any, Any]:
    typ = arr.type
    if pa.types.is_dictionary(typ):
        return _column_hashes(arr.dictionary_decode(), hash_bytes)
    if isinstance(typ, pa.ExtensionType):
        return _column_hashes(arr.storage, hash_bytes)
    if len(arr) == 0:
        return np.zeros(0, U64)
    if pa.types.is_null(typ):
        return np.full(len(arr), _NULL, dtype=U64)
    if pa.types.is_boolean(typ):
        values = bool_values(arr).astype(U64)  # a null's hash is replaced below
        hashed = mix(values + U64(1))
    elif pa.types.is_floating(typ):
        floats = fixed_values(arr.cast(pa.float64()), np.float64)
        if arr.null_count:  # a null entry may hold any bits, even a signalling NaN
            floats = np.where(valid_mask(arr), floats, 0.0)
        floats = np.where(floats == 0.0, 0.0, floats)  # -0.0 == 0.0
        floats = np.where(np.isnan(floats), np.nan, floats)  # one NaN
        hashed = mix(floats.view(U64) ^ U64(0x5851F42D4C957F2D))
    elif pa.types.is_integer(typ) or (pa.types.is_temporal(typ) and not pa.types.is_interval(typ)):
        if pa.types.is_integer(typ):
            ints = arr.cast(pa.int64()) if typ != pa.uint64() else arr
        else:
            width = typ.bit_width
            values = fixed_values(arr, np.int64 if width == 64 else np.int32).astype(np.int64)
            # the unit is part of the value: 1 s and 1 ms must not collide
            unit = {"s": 1, "ms": 2, "us": 3, "ns": 4}.get(getattr(typ, "unit", ""), 0)
            hashed = mix(values.view(U64) + U64(unit * 0x1000193 + width))
            return _apply_nulls(arr, hashed)
        values = fixed_values(ints, U64 if typ == pa.uint64() else np.int64)
        hashed = mix(values.view(U64))
    elif (
        pa.types.is_binary(typ)
        or pa.types.is_large_binary(typ)
        or pa.types.is_string(typ)
        or pa.types.is_large_string(typ)
        or pa.types.is_fixed_size_binary(typ)
        or (hasattr(pa.types, "is_string_view") and pa.types.is_string_view(typ))
        or (hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(typ))
    ):
        hashed = hash_bytes(arr)
    elif pa.types.is_decimal(typ):
        # Canonical text so that 1.50 and 1.5 of the same scale hash alike.
        hashed = hash_bytes(arr.cast(pa.string()))
    else:
        hashed = _hash_nested(arr, hash_bytes)
    return _apply_nulls(arr, hashed)


def _apply_nulls(arr: pa.Array, hashed: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if arr.null_count:
        hashed = np.where(valid_mask(arr), hashed, _NULL)  # whatever null entries hold
    return hashed


def row_hashes(
    batch: pa.RecordBatch | pa.Table, version: int = FINGERPRINT_VERSION
) -> np.ndarray[Any, Any]:
    """Return one 64-bit hash per row, combining every column in schema order.

    Parameters
    ----------
    batch
        Arrow data.
    version
        The fingerprint algorithm (:attr:`~twophase.Fingerprint.version`).

    Returns
    -------
    numpy.ndarray
        ``uint64`` array of ``batch.num_rows`` hashes.
    """
    if isinstance(batch, pa.Table):
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
        if batch is None:
            return np.zeros(0, U64)
    hash_bytes = bytes_hasher(version)
    h = np.full(batch.num_rows, mix(np.array([batch.num_columns], dtype=U64))[0], U64)
    for index, column in enumerate(batch.columns):
        salt = U64(0x100000001B3 * (index + 1))
        h = mix((h * U64(31)) ^ (_column_hashes(column, hash_bytes) + salt))
    return h


class FingerprintAccumulator:
    """Accumulate a :class:`~twophase.Fingerprint` batch by batch.

    Parameters
    ----------
    version
        The fingerprint algorithm (:attr:`~twophase.Fingerprint.version`).

    Raises
    ------
    ValueError
        ``version`` is not one this release computes.

    Examples
    --------
    >>> import pyarrow as pa
    >>> acc = FingerprintAccumulator()
    >>> acc.add(pa.record_batch({"x": [1, 2]}))
    >>> acc.add(pa.record_batch({"x": [3]}))
    >>> acc.result().count
    3
    """

    __slots__ = ("count", "digest", "version")

    def __init__(self, version: int = FINGERPRINT_VERSION) -> None:
        bytes_hasher(version)
        self.count = 0
        self.digest = 0
        self.version = version

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
        total = int(np.sum(row_hashes(batch, self.version), dtype=U64))
        self.digest = (self.digest + total) & 0xFFFF_FFFF_FFFF_FFFF

    def result(self) -> Fingerprint:
        """Return the fingerprint of everything added so far.

        Returns
        -------
        Fingerprint
            Count, digest and version.
        """
        return Fingerprint(self.count, self.digest, self.version)


def fingerprint_batches(
    batches: Iterable[pa.RecordBatch], version: int = FINGERPRINT_VERSION
) -> Fingerprint:
    """Fingerprint a partition: count and order-independent digest of its rows.

    The same function the framework uses for markers and replay checks, so a
    sink or a test can compute what a marker of given rows will hold.

    Parameters
    ----------
    batches
        The partition's record batches (any iterable; consumed once).
    version
        The fingerprint algorithm (:attr:`~twophase.Fingerprint.version`): the
        current one unless comparing with a marker written by an earlier
        release.

    Returns
    -------
    Fingerprint
        Count and order-independent digest of all rows.

    Raises
    ------
    ValueError
        ``version`` is not one this release computes.

    Examples
    --------
    >>> import pyarrow as pa
    >>> a = fingerprint_batches([pa.record_batch({"x": [1, 2, 3]})])
    >>> b = fingerprint_batches([pa.record_batch({"x": [3]}), pa.record_batch({"x": [2, 1]})])
    >>> a == b, a.count
    (True, 3)
    """
    acc = FingerprintAccumulator(version)
    for batch in batches:
        acc.add(batch)
    return acc.result()

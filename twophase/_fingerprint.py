"""Order-independent fingerprints of Arrow data (the markers protocol's idempotence markers).

A partition's fingerprint is ``(row count, sum of 64-bit row hashes mod 2**64)``:
equal for equal multisets of rows whatever their order, and cheap to combine
batch by batch. Row hashes are computed column-wise with numpy (no Python loop
per row) for every flat type; nested values (lists, structs, maps) are hashed
through a canonical JSON text of each value.

The hash is not cryptographic: it detects a replay that differs from what was
committed, it does not resist an adversary crafting collisions.

Fingerprints are stored in markers, so the row hash is versioned
(:attr:`Fingerprint.version <twophase.Fingerprint.version>`). Versions differ
only in how binary and string values are hashed:

* **2** (new markers): values shorter than ``_BLAKE_BYTES`` are padded to whole
  8-byte words and hashed all at once per chunk -- every word mixed with its
  position in the value, summed per value with the value's length; longer ones
  (rare) through BLAKE2b, one call per value.
* **1** (markers of earlier releases; computed only to compare with them):
  values under 48 bytes by a polynomial hash over their bytes, longer ones
  through BLAKE2b, one Python call per value (about 2 us each).
"""

from __future__ import annotations

import datetime
import decimal
import hashlib
import json
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._types import FINGERPRINT_VERSION, FINGERPRINT_VERSIONS, Fingerprint

__all__ = ["FingerprintAccumulator", "fingerprint_batches", "row_hashes"]

_BytesHasher = Callable[[pa.Array], "np.ndarray[Any, Any]"]

_U64 = np.uint64
_NULL = np.uint64(0x9E3779B97F4A7C15)
_SEED = np.uint64(0x2545F4914F6CDD1D)
# Version 1: largest number of value bytes hashed in one numpy pass (bounds
# temporary memory), and the length from which BLAKE2b is used, one call per value.
_CHUNK_BYTES = 1 << 23
_LONG_VALUE = 48
# Version 2: bytes of values hashed in one numpy pass (a few temporaries of this
# size stay in the CPU cache), and the length from which BLAKE2b is used instead
# (its per-call cost is then small, and one value never needs big temporaries).
_WORD_CHUNK_BYTES = 1 << 18
_BLAKE_BYTES = 1 << 16
_WORD_KEY = np.uint64(0xD6E8FEB86659FD93)
_NO_SEPARATOR = pa.scalar(b"", pa.large_binary())


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
    weights: np.ndarray[Any, Any] = _POSITION_WEIGHTS
    return weights


def _hash_bytes_v1(arr: pa.Array) -> np.ndarray[Any, Any]:
    """Hash each value of a binary-like array (version 1); nulls are handled by the caller.

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


def _mix_in_place(x: np.ndarray[Any, Any], scratch: np.ndarray[Any, Any]) -> None:
    """Apply :func:`_mix` to a uint64 array in place (``scratch``: same shape)."""
    np.right_shift(x, _U64(30), out=scratch)
    x ^= scratch
    x *= _U64(0xBF58476D1CE4E5B9)
    np.right_shift(x, _U64(27), out=scratch)
    x ^= scratch
    x *= _U64(0x94D049BB133111EB)
    np.right_shift(x, _U64(31), out=scratch)
    x ^= scratch


def _hash_bytes_v2(arr: pa.Array) -> np.ndarray[Any, Any]:
    """Hash each value of a binary-like array (version 2); nulls are handled by the caller.

    Values shorter than ``_BLAKE_BYTES`` are hashed word-wise in numpy (see
    :func:`_hash_words`), longer ones through BLAKE2b. The path depends only on
    the value's own length, so equal values always hash alike.
    """
    arr = arr.cast(pa.large_binary())
    if arr.null_count:
        arr = arr.fill_null(b"")  # null slots may hold bytes; their hash is replaced anyway
    lengths = np.diff(
        np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    )
    huge = lengths >= _BLAKE_BYTES
    if not huge.any():
        return _hash_words(arr, lengths)
    out = np.empty(len(arr), dtype=_U64)
    out[huge] = _hash_long_bytes(arr.filter(pa.array(huge)))
    if not huge.all():
        out[~huge] = _hash_words(arr.filter(pa.array(~huge)), lengths[~huge])
    return out


def _hash_words(arr: pa.Array, lengths: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Version 2 hash of a ``large_binary`` array without nulls, chunk by chunk.

    Each value is padded with zero bytes to whole 8-byte little-endian words
    (Arrow's C++ join does the copy); word ``j`` contributes
    ``mix(word ^ j * K)``; a value's hash is ``mix(mix(length + SEED) + sum of
    its words' contributions)``. No Python loop per value or per word: a few
    numpy passes over each chunk of at most ``_WORD_CHUNK_BYTES`` bytes (and at
    least one value).
    """
    n = len(arr)
    out = _mix(lengths.astype(_U64) + _SEED)
    ends = np.cumsum(lengths)
    start = 0
    while start < n:
        limit = ends[start - 1] + _WORD_CHUNK_BYTES if start else _WORD_CHUNK_BYTES
        end = min(max(int(np.searchsorted(ends, limit, side="right")), start + 1), n)
        chunk_lengths = lengths[start:end]
        filled = np.flatnonzero(chunk_lengths)
        if len(filled):
            sums = _word_sums(arr.slice(start, end - start), chunk_lengths, filled)
            rows = out[start:end]
            rows[filled] = _mix(rows[filled] + sums)
        start = end
    return out


def _word_sums(
    chunk: pa.Array, lengths: np.ndarray[Any, Any], filled: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Sum of the mixed, position-keyed words of every non-empty value of ``chunk``."""
    padding = -lengths & 7
    if padding.any():
        pad_offsets = np.concatenate(([0], np.cumsum(padding)))
        pad = pa.Array.from_buffers(
            pa.large_binary(),
            len(chunk),
            [
                None,
                pa.py_buffer(pad_offsets),
                pa.py_buffer(np.zeros(int(pad_offsets[-1]), np.uint8)),
            ],
        )
        chunk = pc.binary_join_element_wise(chunk, pad, _NO_SEPARATOR)
    words_per_value = (lengths[filled] + 7) >> 3
    first_word = np.cumsum(words_per_value) - words_per_value
    total = int(first_word[-1] + words_per_value[-1])
    start = int(np.frombuffer(chunk.buffers()[1], dtype=np.int64)[chunk.offset])
    words = np.frombuffer(chunk.buffers()[2], dtype="<u8", count=total, offset=start)
    width = int(words_per_value[0])
    if (words_per_value == width).all():  # one length (in words): the keys of one row
        x = np.bitwise_xor(
            words.reshape(len(filled), width), np.arange(width, dtype=_U64) * _WORD_KEY
        ).reshape(total)
    else:  # the position of every word in its value, keyed
        x = np.arange(total, dtype=np.int64)
        x -= np.repeat(first_word, words_per_value)
        x = x.view(_U64)
        x *= _WORD_KEY
        x ^= words
    _mix_in_place(x, np.empty_like(x))
    return np.add.reduceat(x, first_word)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        return value.hex()
    if isinstance(value, datetime.date | datetime.time | datetime.timedelta):
        return str(value)
    if isinstance(value, decimal.Decimal):
        return str(value)
    return repr(value)


def _hash_nested(arr: pa.Array, hash_bytes: _BytesHasher) -> np.ndarray[Any, Any]:
    texts = [
        json.dumps(v, sort_keys=True, default=_json_default, separators=(",", ":")).encode()
        for v in arr.to_pylist()
    ]
    return hash_bytes(pa.array(texts, type=pa.large_binary()))


_BYTES_HASHERS: dict[int, _BytesHasher] = {1: _hash_bytes_v1, 2: _hash_bytes_v2}


def _column_hashes(arr: pa.Array, hash_bytes: _BytesHasher) -> np.ndarray[Any, Any]:
    typ = arr.type
    if pa.types.is_dictionary(typ):
        return _column_hashes(arr.dictionary_decode(), hash_bytes)
    if isinstance(typ, pa.ExtensionType):
        return _column_hashes(arr.storage, hash_bytes)
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
        hashed = hash_bytes(arr)
    elif pa.types.is_decimal(typ):
        # Canonical text so that 1.50 and 1.5 of the same scale hash alike.
        hashed = hash_bytes(arr.cast(pa.string()))
    else:
        hashed = _hash_nested(arr, hash_bytes)
    return _apply_nulls(arr, hashed)


def _apply_nulls(arr: pa.Array, hashed: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        hashed = np.where(valid, hashed, _NULL)
    return hashed


def _bytes_hasher(version: int) -> _BytesHasher:
    hasher = _BYTES_HASHERS.get(version)
    if hasher is None:
        raise ValueError(
            f"fingerprint version {version} is unknown to this release of twophase "
            f"(it computes versions {', '.join(map(str, FINGERPRINT_VERSIONS))})"
        )
    return hasher


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
            return np.zeros(0, _U64)
    hash_bytes = _bytes_hasher(version)
    h = np.full(batch.num_rows, _mix(np.array([batch.num_columns], dtype=_U64))[0], _U64)
    for index, column in enumerate(batch.columns):
        salt = _U64(0x100000001B3 * (index + 1))
        h = _mix((h * _U64(31)) ^ (_column_hashes(column, hash_bytes) + salt))
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
        _bytes_hasher(version)
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
        total = int(np.sum(row_hashes(batch, self.version), dtype=_U64))
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

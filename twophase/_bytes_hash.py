"""How binary and string values are hashed: the one part of the row hash that versions change.

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

Every hash here and in the row hash (``_fingerprint.py``) is built from
:func:`mix`, the splitmix64 finaliser, over numpy ``uint64`` arrays.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._arrow import binary_array, bool_array, fixed_values, valid_mask
from ._values import FINGERPRINT_VERSIONS

__all__ = ["U64", "BytesHasher", "bytes_hasher", "mix"]

#: Hashes every value of a binary-like array to one ``uint64`` (nulls are the caller's).
BytesHasher = Callable[[pa.Array], "np.ndarray[Any, Any]"]

#: Every hash is a numpy ``uint64``, whose arithmetic wraps.
U64 = np.uint64
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
#: ``b""`` as an Arrow scalar (``pa.scalar`` would import pandas): a null's fill, no separator.
_EMPTY = binary_array([b""])[0]


def mix(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Apply the splitmix64 finaliser to every element (uint64, wrapping)."""
    x = x.astype(U64, copy=True)
    x ^= x >> U64(30)
    x *= U64(0xBF58476D1CE4E5B9)
    x ^= x >> U64(27)
    x *= U64(0x94D049BB133111EB)
    x ^= x >> U64(31)
    return np.asarray(x, dtype=U64)


_POSITION_WEIGHTS = mix(np.arange(1024, dtype=U64) + _SEED) | U64(1)


def _weights(length: int) -> np.ndarray[Any, Any]:
    global _POSITION_WEIGHTS
    if length > len(_POSITION_WEIGHTS):
        size = max(length, 2 * len(_POSITION_WEIGHTS))
        _POSITION_WEIGHTS = mix(np.arange(size, dtype=U64) + _SEED) | U64(1)
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
    lengths_all = fixed_values(pc.binary_length(arr), np.int64)
    if arr.null_count:  # a null's length is 0, whatever its buffer holds
        lengths_all = np.where(valid_mask(arr), lengths_all, 0)
    long = lengths_all >= _LONG_VALUE
    if long.any():
        out = np.empty(len(arr), dtype=U64)
        short = ~long
        if short.any():
            out[short] = _hash_short_bytes(arr.filter(bool_array(short)))
        out[long] = _hash_long_bytes(arr.filter(bool_array(long)))
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
    return np.frombuffer(digests, dtype="<u8").astype(U64)


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
    out = mix(lengths.astype(U64) + _SEED)
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
            contrib = (data[lo:hi].astype(U64) + U64(1)) * weights[positions]
            cumulative = np.concatenate(([U64(0)], np.cumsum(contrib, dtype=U64)))
            rel = offsets[start_row : end_row + 1] - lo
            sums = cumulative[rel[1:]] - cumulative[rel[:-1]]
            out[start_row:end_row] ^= sums
        start_row = end_row
    return out


def _mix_in_place(x: np.ndarray[Any, Any], scratch: np.ndarray[Any, Any]) -> None:
    """Apply :func:`mix` to a uint64 array in place (``scratch``: same shape)."""
    np.right_shift(x, U64(30), out=scratch)
    x ^= scratch
    x *= U64(0xBF58476D1CE4E5B9)
    np.right_shift(x, U64(27), out=scratch)
    x ^= scratch
    x *= U64(0x94D049BB133111EB)
    np.right_shift(x, U64(31), out=scratch)
    x ^= scratch


def _hash_bytes_v2(arr: pa.Array) -> np.ndarray[Any, Any]:
    """Hash each value of a binary-like array (version 2); nulls are handled by the caller.

    Values shorter than ``_BLAKE_BYTES`` are hashed word-wise in numpy (see
    :func:`_hash_words`), longer ones through BLAKE2b. The path depends only on
    the value's own length, so equal values always hash alike.
    """
    arr = arr.cast(pa.large_binary())
    if arr.null_count:
        arr = arr.fill_null(_EMPTY)  # null entries may hold bytes; their hash is replaced anyway
    lengths = np.diff(
        np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    )
    huge = lengths >= _BLAKE_BYTES
    if not huge.any():
        return _hash_words(arr, lengths)
    out = np.empty(len(arr), dtype=U64)
    out[huge] = _hash_long_bytes(arr.filter(bool_array(huge)))
    if not huge.all():
        out[~huge] = _hash_words(arr.filter(bool_array(~huge)), lengths[~huge])
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
    out = mix(lengths.astype(U64) + _SEED)
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
            rows[filled] = mix(rows[filled] + sums)
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
        chunk = pc.binary_join_element_wise(chunk, pad, _EMPTY)
    words_per_value = (lengths[filled] + 7) >> 3
    first_word = np.cumsum(words_per_value) - words_per_value
    total = int(first_word[-1] + words_per_value[-1])
    start = int(np.frombuffer(chunk.buffers()[1], dtype=np.int64)[chunk.offset])
    words = np.frombuffer(chunk.buffers()[2], dtype="<u8", count=total, offset=start)
    width = int(words_per_value[0])
    if (words_per_value == width).all():  # one length (in words): the keys of one row
        x = np.bitwise_xor(
            words.reshape(len(filled), width), np.arange(width, dtype=U64) * _WORD_KEY
        ).reshape(total)
    else:  # the position of every word in its value, keyed
        x = np.arange(total, dtype=np.int64)
        x -= np.repeat(first_word, words_per_value)
        x = x.view(U64)
        x *= _WORD_KEY
        x ^= words
    _mix_in_place(x, np.empty_like(x))
    return np.add.reduceat(x, first_word)


_BYTES_HASHERS: dict[int, BytesHasher] = {1: _hash_bytes_v1, 2: _hash_bytes_v2}


def bytes_hasher(version: int) -> BytesHasher:
    """Return the hasher of binary values of fingerprint ``version``.

    Raises
    ------
    ValueError
        ``version`` is not one this release computes.
    """
    hasher = _BYTES_HASHERS.get(version)
    if hasher is None:
        raise ValueError(
            f"fingerprint version {version} is unknown to this release of twophase "
            f"(it computes versions {', '.join(map(str, FINGERPRINT_VERSIONS))})"
        )
    return hasher

"""Arrow helpers: arrays to and from numpy without pyarrow's pandas shim, record batches joined.

``pa.array``, ``pa.scalar``, ``Array.to_numpy`` and ``np.asarray(array)`` import
pandas (about 0.7 CPU-s) the first time any of them runs; building an array
from its buffers, reading its buffers, slicing and Arrow's compute kernels do
not. These helpers are the few constructions the core needs, written that way.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, suppress
from types import TracebackType
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "JOINED_BYTES",
    "binary_array",
    "bool_array",
    "bool_values",
    "coalesced",
    "concatenated",
    "fixed_values",
    "read_ahead",
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


#: The most Arrow bytes :func:`coalesced` joins into one record batch, whatever its ``rows``: wide
#: rows make fewer rows per write rather than more memory.
JOINED_BYTES = 64 << 20


def coalesced(
    batches: Iterable[pa.RecordBatch],
    rows: int | None,
    seen: Callable[[pa.RecordBatch], object] = lambda _: None,
) -> Iterator[pa.RecordBatch]:
    """Yield the non-empty record batches, each run of them concatenated up to ``rows`` rows.

    Or up to :data:`JOINED_BYTES` of Arrow data, whichever comes first.

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
    count = size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        seen(batch)
        if rows is None:
            yield batch
            continue
        buffered.append(batch)
        count += batch.num_rows
        size += batch.nbytes
        if count >= rows or size >= JOINED_BYTES:
            yield concatenated(buffered)
            buffered, count, size = [], 0, 0
    if buffered:
        yield concatenated(buffered)


def concatenated(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    """Return record batches of one schema as one (the first itself when it is alone)."""
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


_END = object()
_PUT_POLL_SECONDS = 0.05


def read_ahead(items: Iterator[Any]) -> AbstractContextManager[Iterator[Any]]:
    """Return ``items`` pulled one ahead in a thread, for a ``with`` block.

    Parameters
    ----------
    items
        The iterator (pulled in the thread only).

    Returns
    -------
    contextlib.AbstractContextManager
        Gives the items, in order; stops and joins the thread on leaving the block.
    """
    return _ReadAhead(items)


class _ReadAhead:
    """Pull an iterator one item ahead in a thread, while the caller works on the item before.

    For the participant of a sink with ``write_batch_rows``, whose ``write`` settles each
    call before it returns: Spark's next record batches are read (and joined) meanwhile,
    as a sink that streams keeps its target busy while they are read. Arrow and the
    socket release the GIL, so the two overlap.

    The thread is stopped and joined on leaving the ``with`` block, however it is left:
    a thread of the Python worker must not read Spark's input after the participant
    returned or raised. An error of the iterator is raised by the caller's ``next``.

    Parameters
    ----------
    items
        The iterator (pulled in the thread only).
    """

    def __init__(self, items: Iterator[Any]) -> None:
        self._items = items
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pull, name="twophase-read-ahead", daemon=True)

    def _pull(self) -> None:
        try:
            for item in self._items:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as exc:  # raised again in the caller's thread
            self._put(_Failed(exc))

    def _put(self, item: object) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_PUT_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def _get(self) -> Iterator[Any]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item

    def __enter__(self) -> Iterator[Any]:
        self._thread.start()
        return self._get()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._stop.set()
        while self._thread.is_alive():
            with suppress(queue.Empty):
                self._queue.get(timeout=_PUT_POLL_SECONDS)  # free a put the thread waits on
        self._thread.join()


class _Failed:
    """An exception of the pulled iterator, on its way to the caller."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

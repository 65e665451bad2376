"""One ``COPY ... FROM STDIN`` per transaction, fed from the writer while the server ingests.

:class:`CopyStream` runs a single ``COPY`` in a helper thread and takes the
encoded record batches through a small bounded queue (why: "Performance" in
``docs/jdbc.md``). The connection belongs to the helper thread from
:meth:`CopyStream.start` to :meth:`CopyStream.close` / :meth:`CopyStream.abort`;
the writer touches it again only after one of those returned.

Runs on: executors, inside one partition's transaction.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

__all__ = ["CopyAbortedError", "CopyStream"]

_QUEUE_DEPTH = 4
_POLL_SECONDS = 0.5
_END = b""


class CopyAbortedError(Exception):
    """Raised inside the COPY (so that psycopg2 sends CopyFail) when the writer aborts."""


class CopyStream:
    """A running ``COPY ... FROM STDIN`` fed chunk by chunk.

    Parameters
    ----------
    conn
        The transaction's connection (in a transaction, not in use elsewhere).
    statement
        The ``COPY`` statement (a ``psycopg2.sql`` composable or a string).
    chunk_size
        The most bytes handed to libpq per call.
    """

    def __init__(self, conn: Any, statement: Any, chunk_size: int = 1 << 20) -> None:
        self._conn = conn
        self._statement = statement
        self._chunk_size = chunk_size
        self._queue: queue.Queue[memoryview | BaseException] = queue.Queue(maxsize=_QUEUE_DEPTH)
        self._pending = memoryview(b"")
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="twophase-copy", daemon=True)
        self._done = False

    def start(self) -> CopyStream:
        """Start the ``COPY`` in the helper thread.

        Returns
        -------
        CopyStream
            ``self``.
        """
        self._thread.start()
        return self

    # ------------------------------------------------------ helper thread
    def _run(self) -> None:
        try:
            with self._conn.cursor() as cur:
                cur.copy_expert(self._statement, self, size=self._chunk_size)
        except BaseException as exc:  # handed to the writer in close()
            self._error = exc

    def read(self, size: int) -> bytes:
        """Give psycopg2 the next piece of data (called in the helper thread).

        Parameters
        ----------
        size
            The most bytes wanted.

        Returns
        -------
        bytes
            Data, or ``b""`` at the end.
        """
        if not self._pending:
            item = self._queue.get()
            if isinstance(item, BaseException):
                raise item
            if not item:
                return b""  # the end of the data
            self._pending = item
        piece, self._pending = self._pending[:size], self._pending[size:]
        return bytes(piece)

    # ------------------------------------------------------------- writer
    def _put(self, item: memoryview | BaseException) -> bool:
        """Queue an item unless the COPY has ended; False if it has."""
        while self._thread.is_alive():
            try:
                self._queue.put(item, timeout=_POLL_SECONDS)
                return True
            except queue.Full:
                continue
        return False

    def feed(self, data: memoryview) -> None:
        """Queue encoded rows; blocks while the queue is full (backpressure).

        Parameters
        ----------
        data
            CSV rows (a view of the encoder's buffer, which must stay unchanged).

        Raises
        ------
        BaseException
            The COPY's own error, when it already failed (connection lost...).
        """
        if not data:
            return
        if not self._put(data):
            self._thread.join()
            self._done = True
            raise self._error if self._error is not None else CopyAbortedError("COPY ended early")

    def close(self) -> None:
        """End the data, wait for the server's verdict and raise its error if any.

        Raises
        ------
        BaseException
            The psycopg2 error of the COPY (a constraint, a bad value...).
        """
        if self._done:
            if self._error is not None:
                raise self._error
            return
        self._done = True
        self._put(memoryview(_END))
        self._thread.join()
        if self._error is not None:
            raise self._error

    def abort(self) -> None:
        """Make the COPY fail (the transaction is rolled back next) and wait for it."""
        if self._done:
            return
        self._done = True
        self._put(CopyAbortedError("the transaction is being rolled back"))
        self._thread.join()

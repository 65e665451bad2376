"""Finding a record batch's bad rows inside the transaction: savepoints, and halves.

With ``bad_rows="dead_letter"`` a record batch is written through the dialect's
fast path (``COPY``, ``LOAD DATA``) under one savepoint (:func:`write_isolating`).
A clean batch costs that savepoint and nothing more: one round trip, which also
releases the savepoint of the record batch before (a transaction prepares or
commits with its last savepoint set, which keeps its rows). When the server refuses a
row, the savepoint is rolled back and the batch is written again as two halves,
each under its own savepoint through the same fast path, recursively, until the
refused rows stand alone: ``k`` bad rows of ``n`` cost about ``2 k log2(n / k)``
extra writes of ever smaller halves, never ``n`` single rows. Only an error
of the dialect's row table (:attr:`~._errors.ErrorMap.row_errors`), or a value
the client refused before sending it (a :class:`~twophase.errors.DataError`
without a server error), is a row's; anything else fails the batch as it would
with ``bad_rows="fail"``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import pyarrow as pa

from twophase import RowError
from twophase.errors import DataError, TwoPhaseError

from ._errors import ErrorMap
from ._transaction import JdbcTransaction

__all__ = ["SAVEPOINT", "Loader", "write_isolating"]

#: The savepoint's name (one at a time: each is released or rolled back before the next).
SAVEPOINT = "twophase_rows"


class Loader(Protocol):
    """What :func:`write_isolating` asks of a writer."""

    errors: ClassVar[ErrorMap]
    #: One round trip that replaces the savepoint an earlier record batch left set with a new
    #: one (PostgreSQL keeps a same-named savepoint, so it releases it first; MariaDB replaces).
    next_savepoint: ClassVar[str]

    def load(self, txn: Any, batch: pa.RecordBatch, *, settle: bool) -> None:
        """Write the rows through the fast path (``settle``: every row in or refused on return)."""
        ...


def _run(txn: JdbcTransaction, statement: str) -> None:
    try:
        with txn.conn.cursor() as cur:
            cur.execute(statement)
    except txn.errors.error as exc:
        raise txn.failure(exc, f"running {statement}") from exc


def write_isolating(
    writer: Loader, txn: JdbcTransaction, batch: pa.RecordBatch, at: int = 0
) -> list[RowError]:
    """Write ``batch`` under a savepoint; on a row's error, halve it until the bad rows stand alone.

    Runs on the executor, once per record batch (and once per half of a
    refused one), inside the partition's open transaction.

    Parameters
    ----------
    writer
        The dialect's writer.
    txn
        The open transaction.
    batch
        The rows (a slice of the record batch ``write`` was given).
    at
        The position of ``batch``'s first row in that record batch.

    Returns
    -------
    list of RowError
        The refused rows, by their position in the record batch; every other
        row is written.

    Raises
    ------
    TwoPhaseError
        An error that is not a row's (a lost connection, a missing column, a
        lock wait): the batch fails.
    """
    _run(txn, writer.next_savepoint if txn.savepoint else f"SAVEPOINT {SAVEPOINT}")
    txn.savepoint = True
    try:
        writer.load(txn, batch, settle=True)
    except TwoPhaseError as exc:
        refused = _refused(writer, txn, exc, at) if batch.num_rows == 1 else None
        if not _is_row_error(writer.errors, exc) or (batch.num_rows == 1 and refused is None):
            raise
        _run(txn, f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        _run(txn, f"RELEASE SAVEPOINT {SAVEPOINT}")
        txn.savepoint = False
        if refused is not None:
            return [refused]
        half = batch.num_rows // 2
        return write_isolating(writer, txn, batch.slice(0, half), at) + write_isolating(
            writer, txn, batch.slice(half), at + half
        )
    return []  # the savepoint stays set: the next record batch's replaces it in one round trip


def _is_row_error(errors: ErrorMap, exc: TwoPhaseError) -> bool:
    """Whether a failed write may be a row's: a code of the row table, or a value refused here."""
    cause = exc.__cause__
    if cause is None:
        return isinstance(exc, DataError)
    code = errors.code_of(cause)
    return any(code in codes for _class, codes in errors.row_errors)


def _refused(writer: Loader, txn: JdbcTransaction, exc: TwoPhaseError, at: int) -> RowError | None:
    """Return the error of a row written alone, or None when it is not a row's."""
    cause = exc.__cause__
    if cause is None:
        if not isinstance(exc, DataError):
            return None
        return RowError(at, "invalid_value", exc.message, None, exc.column)
    types = txn.plan.column_types if txn.plan is not None else ()
    return writer.errors.row_error(cause, at, secrets=txn.pool.config.secrets, columns=types)

"""Finding a record batch's bad rows inside the transaction: savepoints, splits and halves.

With ``bad_rows="dead_letter"`` a record batch is written through the dialect's
fast path (``COPY``, ``LOAD DATA``) under one savepoint (:func:`write_isolating`).
A clean batch costs that savepoint and nothing more: one round trip, which also
releases the savepoint of the record batch before (a transaction prepares or
commits with its last savepoint set, which keeps its rows). When the server refuses a
row, the savepoint is rolled back. If the server named the refused record (PostgreSQL's
``COPY ..., line N``), the rows before it are written again, the record alone, and the
rest the same way: a write with ``k`` bad rows costs about two writes of its rows,
whatever ``k``. Otherwise the batch is written again as two halves, each under its own
savepoint through the same fast path, recursively, until the refused rows stand alone:
``k`` bad rows of ``n`` cost about ``2 k log2(n / k)`` extra writes of ever smaller
halves. Never ``n`` single rows. Only an error
of the dialect's row table (:attr:`~._errors.ErrorMap.row_errors`), or a value
the client refused before sending it (a :class:`~twophase.errors.DataError`
without a server error), is a row's; anything else fails the batch as it would
with ``bad_rows="fail"``.
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import pyarrow as pa
import pyarrow.compute as pc

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
    """Write ``batch`` under a savepoint; on a row's error, isolate the refused rows.

    Runs on the executor, once per record batch (and once per part of a refused
    one), inside the partition's open transaction. When the server names the
    refused record (:meth:`~._errors.ErrorMap.failed_record`: PostgreSQL's
    ``COPY``), the rows before it are written again, the record alone, and the
    rest the same way: each refused row costs one write of the rows since the
    one before. When it does not, the rows are halved.

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
    refused: list[RowError] = []
    start = 0
    while start < batch.num_rows:  # one refused record per turn, when the server names it
        rest = batch.slice(start)
        failed = _attempt(writer, txn, rest, at + start)
        if failed is None:
            break
        if isinstance(failed, RowError):  # a row alone
            refused.append(failed)
            break
        record = writer.errors.failed_record(failed.__cause__) if failed.__cause__ else None
        if record is None or not 1 <= record <= rest.num_rows or not _one_line_each(rest):
            refused += _halves(writer, txn, rest, at + start)
            break
        bad = record - 1
        if bad:  # the rows before it, which the server took before it refused the record
            refused += write_isolating(writer, txn, rest.slice(0, bad), at + start)
        alone = _attempt(writer, txn, rest.slice(bad, 1), at + start + bad)
        if not isinstance(alone, RowError):  # written after all: the record named was not it
            refused += _halves(writer, txn, rest.slice(bad + 1), at + start + bad + 1)
            break
        refused.append(alone)
        start += bad + 1
    return refused


def _one_line_each(batch: pa.RecordBatch) -> bool:
    """Whether each row is one line of the bulk load's text, so that a line number is a row's.

    A server counts the line breaks inside quoted values too (PostgreSQL: "necessarily a
    little fragile", its source says): a text column with a line break, or a nested column,
    whose rendering may hold one, makes the count no row's.
    """
    for column in batch.columns:
        kind = column.type
        if pa.types.is_string(kind) or pa.types.is_large_string(kind):
            if pc.any(pc.match_substring_regex(column, "[\r\n]")).as_py():
                return False
        elif pa.types.is_nested(kind) or pa.types.is_dictionary(kind):
            return False
    return True


def _halves(writer: Loader, txn: JdbcTransaction, batch: pa.RecordBatch, at: int) -> list[RowError]:
    """Write ``batch`` (refused as a whole) as two halves, each isolated on its own."""
    if batch.num_rows == 0:
        return []
    if batch.num_rows == 1:
        failed = _attempt(writer, txn, batch, at)
        return [failed] if isinstance(failed, RowError) else []
    half = batch.num_rows // 2
    return write_isolating(writer, txn, batch.slice(0, half), at) + write_isolating(
        writer, txn, batch.slice(half), at + half
    )


def _attempt(
    writer: Loader, txn: JdbcTransaction, batch: pa.RecordBatch, at: int
) -> TwoPhaseError | RowError | None:
    """Write ``batch`` under the savepoint: None, or its row's error (rolled back to it).

    Returns
    -------
    TwoPhaseError or RowError or None
        None: written (the savepoint stays set: the next write's replaces it in one
        round trip). A RowError: the one row of ``batch`` was refused. A TwoPhaseError:
        some row of ``batch`` was refused.

    Raises
    ------
    TwoPhaseError
        An error that is not a row's: the batch fails.
    """
    _run(txn, writer.next_savepoint if txn.savepoint else f"SAVEPOINT {SAVEPOINT}")
    txn.savepoint = True
    try:
        writer.load(txn, batch, settle=True)
    except TwoPhaseError as exc:
        alone = _refused(writer, txn, exc, at) if batch.num_rows == 1 else None
        if not _is_row_error(writer.errors, exc) or (batch.num_rows == 1 and alone is None):
            raise
        _run(txn, f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        _run(txn, f"RELEASE SAVEPOINT {SAVEPOINT}")
        txn.savepoint = False
        return alone if alone is not None else exc
    return None


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

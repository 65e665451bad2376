"""A partition's live transaction on an executor, and the errors it raises.

The state of a transaction, for both protocols::

    open --write*--> open --finish--> open --prepare--> prepared    (coordinated)
                                           --commit---> committed   (markers)
    open/prepared --rollback--> rolled back
    open --connection lost during PREPARE or COMMIT--> unknown
"""

from __future__ import annotations

from typing import Any

from twophase import TaskContext
from twophase.errors import AbortRequiredError, TwoPhaseError

from .._context import ErrorContext
from .._set_aside import SetAside
from ._client import lost_connection
from ._errors import ErrorMap
from ._plan import WritePlan
from ._pool import ConnectionPool
from ._table import TableInfo

__all__ = ["JdbcTransaction"]


class JdbcTransaction:
    """A partition's live transaction on an executor (never pickled), in any dialect.

    Attributes
    ----------
    context
        The task that owns it.
    gid
        Its global transaction id (coordinated) / transaction id (markers).
    state
        ``open``, ``prepared``, ``committed``, ``rolled back`` or ``unknown``.
    rows
        Rows written so far.
    xid
        PostgreSQL: the server's 64-bit transaction id (coordinated), to tell
        later whether a gid that disappeared was committed or rolled back.
    errors
        How the dialect's client library's errors map onto :mod:`twophase.errors`.
    """

    errors: ErrorMap  # the dialect's subclass names its error map

    def __init__(
        self,
        context: TaskContext,
        gid: str,
        pool: ConnectionPool,
        conn: Any,
        table: TableInfo,
        xid: int | None,
    ) -> None:
        self.context = context
        self.gid = gid
        self.pool = pool
        self.conn: Any = conn
        self.table = table
        self.state = "open"
        self.rows = 0
        self.xid = xid
        self.plan: WritePlan | None = None
        self.staging: Any = None  # the staging table of upsert/CDC, once created
        self.seq = 0
        self.copy: Any = None  # PostgreSQL: the running COPY stream
        self.savepoint = False  # bad_rows="dead_letter": a record batch's savepoint is set
        self.set_aside = SetAside()  # refused rows against dead letters (bad_rows="dead_letter")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(gid={self.gid!r}, state={self.state!r}, rows={self.rows})"

    @property
    def where(self) -> ErrorContext:
        """Error context: the sink, batch and partition."""
        return ErrorContext.of_task(self.context)

    def open_connection(self, doing: str) -> Any:
        """Return the connection of an open transaction, or refuse.

        Parameters
        ----------
        doing
            What the caller is about to do, for the message.

        Returns
        -------
        psycopg2.extensions.connection
            The transaction's connection.

        Raises
        ------
        AbortRequiredError
            The transaction is not open any more.
        """
        if self.state != "open" or self.conn is None:
            raise AbortRequiredError(
                f"{doing} on a transaction that is {self.state}", **self.where.keywords()
            )
        return self.conn

    def failure(self, exc: BaseException, doing: str, hint: str | None = None) -> TwoPhaseError:
        """Map a client library's error of this transaction, dropping a broken connection.

        Parameters
        ----------
        exc
            The error.
        doing
            What the transaction was doing.
        hint
            An extra sentence of advice.

        Returns
        -------
        TwoPhaseError
            The exception to raise (``raise txn.failure(...) from exc``).
        """
        types = self.plan.column_types if self.plan is not None else ()
        if self.errors.is_connection_error(exc):
            if self.conn is not None:
                self.pool.discard(self.conn, flush=True)
                self.conn = None
            doing, lost = lost_connection(doing, self.pool)
            hint = f"{hint}. {lost}" if hint else lost
        return self.errors.map_error(
            exc,
            doing,
            secrets=self.pool.config.secrets,
            columns=types,
            hint=hint,
            where=self.where,
        )

"""What the sinks of every dialect and both protocols share: settings and the common hooks.

:class:`JdbcSinkMixin` comes first in the bases of every JDBC sink (``_sink.py``)
and implements, once, the hooks that do not depend on the protocol: ``open``
(its common checks), ``check_schema``, ``begin_transaction``, ``write`` and
``abort``. It runs no SQL: the sink's dialect (:mod:`._dialect`) builds the
parts that do. Each protocol's sink adds only how a partition's transaction
ends and what the driver does with it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from twophase import CommitProtocol, DeadLetter, RowError, SinkContext, TaskContext

from .._context import ErrorContext
from ._config import ConnectionConfig
from ._dialect import Checker, DeadLetterStore, Dialect, Writer
from ._options import BadRows, JdbcOptions
from ._transaction import JdbcTransaction

__all__ = ["JdbcSinkMixin"]

TxnT = TypeVar("TxnT", bound=JdbcTransaction)


class JdbcSinkMixin(Generic[TxnT]):
    """Settings and protocol-independent hooks of every JDBC sink.

    Put it before :class:`twophase.TwoPhaseCommitSink` or
    :class:`twophase.MarkerCommitSink` in the bases, and set :attr:`dialect`;
    the remaining keywords of ``__init__`` go to that base class. Picklable:
    options and connection parameters only (connections live in a per-process
    pool).

    Parameters
    ----------
    options
        What to write and how.
    connection
        Connection parameters.
    **base
        ``name``, ``checkpoint_location``, ``retry`` (and ``staging``), for the
        base class.

    Attributes
    ----------
    dialect
        The database (a class attribute of each concrete sink).
    """

    name: str
    bad_rows: BadRows
    write_batch_rows: int | None
    protocol: ClassVar[CommitProtocol]
    dialect: ClassVar[Dialect[Any, Any]]

    @property
    def metrics_target(self) -> str:
        """The database, as the ``twophase.target`` attribute of the sink's metrics."""
        return self.dialect.name.lower()

    def __init__(self, options: JdbcOptions, connection: ConnectionConfig, **base: Any) -> None:
        base.update(bad_rows=options.bad_rows, max_bad_rows=options.max_bad_rows)
        super().__init__(**base)
        self.options = options
        self.connection = connection
        if options.mode in ("upsert", "cdc"):
            # Every row of a key in one transaction, in the batch's order: the merge
            # then applies a key's changes in order, whatever the user's partitioning.
            self.key_by = tuple(options.key_columns)
        prepare = self.protocol is CommitProtocol.COORDINATED
        self._writer: Writer[TxnT] = self.dialect.writer(options, connection, prepare=prepare)
        if options.bad_rows == "dead_letter":
            # Each write settles its rows (one COPY / LOAD DATA per call, to report the
            # refused ones before it returns): fewer, larger calls.
            self.write_batch_rows = self._writer.dead_letter_write_rows
        self._checker: Checker = self.dialect.checker(options, connection)
        self._dead_letters: DeadLetterStore[TxnT] = self.dialect.dead_letters(options, connection)

    def __repr__(self) -> str:
        o = self.options
        keys = f", key_columns={list(o.key_columns)!r}" if o.key_columns else ""
        return (
            f"{type(self).__name__}(name={self.name!r}, table={str(o.table)!r}, "
            f"mode={o.mode!r}{keys}, server={self.connection.describe()!r})"
        )

    # ================================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Check the identity's transaction ids, the table and the sink user's privileges.

        With ``bad_rows="dead_letter"``, also create the dead-letter table if missing.
        """
        where = ErrorContext(self.name)
        self._checker.check_open(
            context.identity, coordinated=self.protocol is CommitProtocol.COORDINATED, where=where
        )
        if self.bad_rows == "dead_letter":
            self._dead_letters.ensure(where)

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Create the table if ``create_table=True``, then check the schema against it."""
        self._checker.check_schema(schema, ErrorContext(self.name, batch_id))

    # ============================================ participant hooks (executor)
    def begin_transaction(self, context: TaskContext) -> TxnT:
        """Open the partition's transaction on a pooled connection and read the table."""
        return self._writer.begin(context)

    def write(self, txn: TxnT, batch: pa.RecordBatch) -> Sequence[RowError] | None:
        """Load the rows into the table (append) or the staging table (upsert/CDC).

        With ``bad_rows="dead_letter"`` under a savepoint; the rows the table
        refuses are found by halves and returned (:mod:`._bad_rows`).
        """
        return self._writer.write(txn, batch)

    def write_dead_letters(self, txn: TxnT, letters: Sequence[DeadLetter]) -> None:
        """Insert the partition's dead letters into ``dead_letter_table``, in its transaction."""
        self._dead_letters.write(txn, txn.set_aside.lettering(letters))

    # ====================================================== redrive (driver, CLI)
    def read_dead_letters(self) -> Iterator[DeadLetter]:
        """Yield this sink's pending dead letters, oldest first (by batch, partition, position).

        Runs on the driver or the command line, without :meth:`open`, on its own
        connection; reads only committed letters.

        Returns
        -------
        iterator of DeadLetter
            The letters of ``dead_letter_table`` whose sink is this sink's name.
        """
        return self._dead_letters.read(self.name, ErrorContext(self.name))

    def redrive_dead_letters(self, letters: Sequence[DeadLetter]) -> Sequence[RowError]:
        """Write letters' rows into the table and delete them from the dead letters, at once.

        Runs on the driver or the command line, without :meth:`open`, in one
        transaction of its own. A row the table still refuses stays a dead
        letter; any other error rolls everything back. Running it again (a lost
        ``COMMIT``) moves nothing twice: a letter already gone is skipped.

        Parameters
        ----------
        letters
            Letters of this sink (from :meth:`read_dead_letters`).

        Returns
        -------
        sequence of RowError
            The rows still refused, each ``row`` the index of its letter in ``letters``.
        """
        return self._dead_letters.redrive(self.name, letters, ErrorContext(self.name))

    def abort(self, txn: TxnT) -> None:
        """Roll the transaction back, open or prepared; the connection goes back."""
        self._writer.rollback(txn)

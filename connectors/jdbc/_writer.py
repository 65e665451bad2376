"""A partition's transaction on its executor, opened and rolled back alike in every dialect.

:class:`TransactionWriter` writes the steps once -- the task's error context,
a table that vanished refused by name, a rollback that is idempotent and that
also rolls back a transaction already prepared (or perhaps prepared, when the
connection broke during ``PREPARE``) -- and leaves to the dialect how its
session starts a transaction, what the session holds besides it (a running
``COPY``, an XA branch) and how a prepared one is rolled back by its id.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

import pyarrow as pa

from twophase import RowError, TaskContext
from twophase.errors import ConfigurationError

from .._context import ErrorContext
from ._bad_rows import SAVEPOINT, write_isolating
from ._client import JdbcClient
from ._config import ConnectionConfig
from ._options import JdbcOptions
from ._plan import TypeRules, WritePlan, plan_write
from ._transaction import JdbcTransaction

__all__ = ["TransactionWriter"]

TxnT = TypeVar("TxnT", bound=JdbcTransaction)


class TransactionWriter(JdbcClient, Generic[TxnT]):
    """The executor side of a dialect, up to the end of the writes (its :class:`~._dialect.Writer`).

    Parameters
    ----------
    options, connection
        As for :class:`~._client.JdbcClient`.
    prepare
        The coordinated protocol: the transaction is prepared, not committed,
        at the end of the partition.
    """

    #: The database's type rules.
    types: ClassVar[TypeRules]
    #: ``bad_rows="dead_letter"``: the statement that sets a record batch's savepoint when the
    #: one before is still set. SQL's ``SAVEPOINT`` replaces a savepoint of the same name;
    #: a database that keeps it instead (and nests the new one) releases it first here.
    next_savepoint: ClassVar[str] = f"SAVEPOINT {SAVEPOINT}"
    #: ``bad_rows="dead_letter"``: the rows of one write (the core joins Spark's record batches
    #: up to it). Each write settles its rows, a load and a savepoint -- a subtransaction on
    #: PostgreSQL -- of its own: larger writes cost less when clean, and more to search when a
    #: row is refused by halves (docs/jdbc.md, "How the bad rows are found").
    dead_letter_write_rows: ClassVar[int] = 50_000

    def __init__(
        self, options: JdbcOptions, connection: ConnectionConfig, *, prepare: bool
    ) -> None:
        super().__init__(options, connection)
        self.prepare = prepare

    # ------------------------------------------------------------------ hooks
    def start(self, context: TaskContext, where: ErrorContext) -> tuple[TxnT, bool]:
        """Start the partition's transaction on a pooled session and read the table.

        Runs on the executor, once per partition attempt, from :meth:`begin`.

        Parameters
        ----------
        context
            The task.
        where
            Its error context.

        Returns
        -------
        tuple
            The open transaction, and whether the table exists.
        """
        raise NotImplementedError

    def load(self, txn: TxnT, batch: pa.RecordBatch, *, settle: bool) -> None:
        """Write rows into the table (append) or the staging table (upsert, CDC): the fast path.

        Runs on the executor, once per record batch of the partition (the first
        one makes the plan, :meth:`planned`), and with ``bad_rows="dead_letter"``
        once more per half of a refused one (:mod:`._bad_rows`).

        Parameters
        ----------
        txn
            The open transaction.
        batch
            The rows.
        settle
            Every row must be written, or the server's error raised, when it
            returns (a ``COPY`` ended); False lets a load run on into the next
            batch. A raised error is the dialect's, mapped, ``from`` the client
            library's (:meth:`~._transaction.JdbcTransaction.failure`).
        """
        raise NotImplementedError

    def finish(self, txn: TxnT) -> None:
        """End the writes: merge the staging table into the table (upsert, CDC) and drop it.

        Runs on the executor, once, after the partition's last batch and before
        the protocol ends the transaction (prepare, or the marker and commit).

        Parameters
        ----------
        txn
            The open transaction.
        """
        raise NotImplementedError

    def release_session(self, txn: TxnT) -> None:
        """End what the session holds (a running load, the open transaction) and give it back."""
        raise NotImplementedError

    def rollback_prepared(self, gid: str, where: ErrorContext) -> None:
        """Roll back a prepared transaction by its id (an unknown id is success)."""
        raise NotImplementedError

    def create_staging(self, txn: TxnT) -> None:
        """Create the transaction's staging table (upsert and CDC)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ steps
    def write(self, txn: TxnT, batch: pa.RecordBatch) -> list[RowError]:
        """Write one record batch; with ``bad_rows="dead_letter"`` return the rows refused.

        Parameters
        ----------
        txn
            The open transaction.
        batch
            The rows.

        Returns
        -------
        list of RowError
            The rows the table refused, each by its position in ``batch``
            (always empty with ``bad_rows="fail"``: the first fails the batch).
        """
        if self.options.bad_rows != "dead_letter" or batch.num_rows == 0:
            self.load(txn, batch, settle=False)
            return []
        txn.open_connection("write()")
        self.planned(txn, batch.schema)  # a batch that does not fit the table fails here
        return list(txn.set_aside.refusing(write_isolating(self, txn, batch)))

    def begin(self, context: TaskContext) -> TxnT:
        """Open the partition's transaction; refuse a table that is gone.

        Parameters
        ----------
        context
            The task.

        Returns
        -------
        JdbcTransaction
            The open transaction.

        Raises
        ------
        ConfigurationError
            The table does not exist or is not visible to the sink's user.
        """
        where = ErrorContext.of_task(context)
        txn, found = self.start(context, where)
        if not found:
            self.rollback(txn)
            raise ConfigurationError(
                f"table {self.options.table} does not exist (or is not visible to the sink's user)",
                **where.keywords(),
            )
        return txn

    def planned(self, txn: TxnT, schema: pa.Schema) -> WritePlan:
        """Return the transaction's write plan, made at its first rows (and its staging table).

        Parameters
        ----------
        txn
            The open transaction.
        schema
            The schema of its rows.

        Returns
        -------
        WritePlan
            Which columns go where, checked against the table the transaction read.

        Raises
        ------
        ConfigurationError
            The rows do not fit the table, naming the column.
        """
        if txn.plan is None:
            options = self.options
            try:
                txn.plan = plan_write(schema, txn.table, options, str(options.table), self.types)
            except ConfigurationError as exc:
                raise exc.with_context(**txn.where.keywords()) from None
            if options.mode != "append":
                self.create_staging(txn)
        return txn.plan

    def rollback(self, txn: TxnT) -> None:
        """Roll back the transaction, open or (coordinated protocol) prepared; idempotent.

        Parameters
        ----------
        txn
            The transaction.
        """
        if txn.state in ("rolled back", "committed"):
            return
        self.release_session(txn)
        if self.prepare and txn.state in ("prepared", "unknown"):
            self.rollback_prepared(txn.gid, txn.where)
        txn.state = "rolled back"

"""What the two PostgreSQL sinks share: settings, the handle, and the common hooks.

:class:`PostgresSinkMixin` comes first in the bases of both sinks (``_sink.py``)
and implements, once, the hooks whose PostgreSQL side does not depend on the
protocol: ``open`` (its common checks), ``check_schema``,
``begin_transaction``, ``write`` and ``abort``. Each sink adds only how a
partition's transaction ends and what the driver does with it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa

from twophase import CommitProtocol, SinkContext, TaskContext, TransactionHandle

from ._checks import PostgresChecker
from ._config import ConnectionConfig
from ._gid import check_identity
from ._options import PostgresOptions
from ._transaction import PostgresTransaction
from ._writer import PostgresWriter

__all__ = ["PostgresHandle", "PostgresSinkMixin"]


@dataclass(frozen=True)
class PostgresHandle(TransactionHandle):
    """The handle of one partition's prepared transaction. Frozen and picklable.

    Attributes
    ----------
    transaction_id
        The gid, ``tp:<identity>:<batch>:<partition>:<attempt>``.
    batch_id, partition_id, attempt
        Where it came from.
    xid
        The server's 64-bit transaction id, recorded in the commit decision so
        that a gid that vanished can be told committed or rolled back
        (``txid_status``). None for handles rebuilt from ``pg_prepared_xacts``.
    rows
        Rows written by the transaction (informational).
    """

    xid: int | None = None
    rows: int = 0


class PostgresSinkMixin:
    """Settings and protocol-independent hooks of both PostgreSQL sinks.

    Put it before :class:`twophase.TwoPhaseCommitSink` or
    :class:`twophase.MarkerCommitSink` in the bases; the remaining keywords
    of ``__init__`` go to that base class. Picklable: options and connection
    parameters only (connections live in a per-process pool).

    Parameters
    ----------
    options
        What to write and how.
    connection
        Connection parameters.
    **base
        ``name``, ``checkpoint_location``, ``retry`` (and ``staging``), for the
        base class.
    """

    name: str
    protocol: ClassVar[CommitProtocol]

    def __init__(self, options: PostgresOptions, connection: ConnectionConfig, **base: Any) -> None:
        super().__init__(**base)
        self.options = options
        self.connection = connection
        if options.mode in ("upsert", "cdc"):
            # Every row of a key in one transaction, in the batch's order: the merge
            # then applies a key's changes in order, whatever the user's partitioning.
            self.key_by = tuple(options.key_columns)
        prepare = self.protocol is CommitProtocol.COORDINATED
        self._writer = PostgresWriter(options, connection, prepare=prepare)
        self._checker = PostgresChecker(options, connection)

    def __repr__(self) -> str:
        o = self.options
        keys = f", key_columns={list(o.key_columns)!r}" if o.key_columns else ""
        return (
            f"{type(self).__name__}(name={self.name!r}, table={str(o.table)!r}, "
            f"mode={o.mode!r}{keys}, server={self.connection.describe()!r})"
        )

    def _where(self, handle: TransactionHandle) -> dict[str, Any]:
        """Error context of a handle."""
        return {"sink": self.name, "batch_id": handle.batch_id, "partition_id": handle.partition_id}

    # ================================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Check the identity's gid length, the table and the sink user's privileges."""
        check_identity(context.identity)
        self._checker.check_target(
            coordinated=self.protocol is CommitProtocol.COORDINATED, sink=self.name
        )

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Create the table if ``create_table=True``, then check the schema against it."""
        self._checker.check_schema(schema, sink=self.name, batch_id=batch_id)

    # ============================================ participant hooks (executor)
    def begin_transaction(self, context: TaskContext) -> PostgresTransaction:
        """Take a pooled connection, ``BEGIN`` and read the table's columns."""
        return self._writer.begin(context)

    def write(self, txn: PostgresTransaction, batch: pa.RecordBatch) -> None:
        """``COPY`` the rows into the table (append) or the staging table (upsert/CDC)."""
        self._writer.write(txn, batch)

    def abort(self, txn: PostgresTransaction) -> None:
        """``ROLLBACK``, or ``ROLLBACK PREPARED`` once prepared; the connection goes back."""
        self._writer.rollback(txn)

"""The executor side of both MariaDB protocols: begin, ``INSERT`` the rows, roll back.

The coordinated protocol runs the partition in an XA transaction
(``XA START`` at begin, ``XA END`` + ``XA PREPARE`` in :mod:`._xa`); the
markers protocol in a local transaction that first takes the partition's slot
(:mod:`._fencing`). Rows go in as multi-row ``INSERT`` statements
(:mod:`._insert`) of at most :data:`STATEMENT_BYTES`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from twophase import TaskContext
from twophase.errors import ConfigurationError, DataError

from .._plan import plan_write
from ._client import MariaDBClient, describe_table
from ._fencing import release_slot, take_slot
from ._insert import insert_statements, rows_text
from ._sql import columns, table
from ._transaction import MariaDBTransaction
from ._types import MARIADB_TYPES
from ._xa import XATransactions
from ._xid import xid_of

__all__ = ["STATEMENT_BYTES", "MariaDBWriter"]

#: The longest ``INSERT`` sent (also capped at half the server's ``max_allowed_packet``).
STATEMENT_BYTES = 4 << 20


class MariaDBWriter(MariaDBClient):
    """Writes partitions into MariaDB transactions (executor side). Picklable.

    Parameters
    ----------
    options, connection
        As for :class:`~.._client.JdbcClient`.
    prepare
        The coordinated protocol (an XA transaction, to be prepared) when True.
    """

    def __init__(self, options: Any, connection: Any, *, prepare: bool) -> None:
        super().__init__(options, connection)
        self.prepare = prepare

    # -------------------------------------------------------------- begin
    def begin(self, context: TaskContext) -> MariaDBTransaction:
        """Open a connection (pooled), start the transaction, read the table.

        Parameters
        ----------
        context
            The task.

        Returns
        -------
        MariaDBTransaction
            The open transaction.
        """
        where: dict[str, Any] = {
            "sink": context.sink_name,
            "batch_id": context.batch_id,
            "partition_id": context.partition_id,
        }
        xid = xid_of(context.identity, context.batch_id, context.partition_id, context.attempt)

        def start(cur: Any) -> tuple[Any, int]:
            if self.prepare:
                cur.execute("XA START %s, %s, %s", xid.params)
            else:
                take_slot(cur, self.options, context)  # the zombie fence of the markers protocol
                cur.execute("BEGIN")
            cur.execute("SELECT @@max_allowed_packet")
            packet = int(cur.fetchone()[0])
            return describe_table(cur, self.options.table), packet

        (found, packet), conn = self.session("starting the transaction", start, **where)
        txn = MariaDBTransaction(
            context,
            xid.gid,
            self.pool(),
            conn,
            found,
            None,
            xa=xid.params if self.prepare else None,
            max_bytes=min(STATEMENT_BYTES, packet // 2),
        )
        if found is None:
            self.rollback(txn)
            raise ConfigurationError(
                f"table {self.options.table} does not exist (or is not visible to the sink's user)",
                **where,
            )
        return txn

    # -------------------------------------------------------------- write
    def write(self, txn: MariaDBTransaction, batch: pa.RecordBatch) -> None:
        """Insert one record batch.

        Parameters
        ----------
        txn
            The open transaction.
        batch
            The rows.
        """
        conn = txn.open_connection("write()")
        if batch.num_rows == 0:
            return
        if txn.plan is None:
            try:
                txn.plan = plan_write(
                    batch.schema, txn.table, self.options, str(self.options.table), MARIADB_TYPES
                )
            except ConfigurationError as exc:
                raise exc.with_context(**txn.where) from None
        plan = txn.plan
        try:
            rows = rows_text(batch, plan.columns)
        except DataError as exc:
            raise exc.with_context(**txn.where) from None
        prefix = f"INSERT INTO {table(self.options.table)} ({columns(plan.names)}) VALUES ".encode()
        try:
            with conn.cursor() as cur:
                for statement in insert_statements(prefix, rows, txn.max_bytes):
                    cur.execute(statement)
        except txn.errors.error as exc:
            raise txn.failure(exc, f"INSERT into {self.options.table}") from exc
        txn.rows += batch.num_rows

    def finish(self, txn: MariaDBTransaction) -> None:
        """Nothing to merge in append mode.

        Parameters
        ----------
        txn
            The open transaction.
        """
        txn.open_connection("finishing the writes")

    # ------------------------------------------------------------- rollback
    def rollback(self, txn: MariaDBTransaction) -> None:
        """Roll back the transaction, open or (coordinated protocol) prepared; idempotent.

        Parameters
        ----------
        txn
            The transaction.
        """
        if txn.state in ("rolled back", "committed"):
            return
        conn, txn.conn = txn.conn, None
        if conn is not None:
            try:
                with conn.cursor() as cur:
                    if txn.xa is not None:
                        cur.execute("XA END %s, %s, %s", txn.xa)
                        cur.execute("XA ROLLBACK %s, %s, %s", txn.xa)
                    else:
                        cur.execute("ROLLBACK")
                        release_slot(cur)
                txn.pool.release(conn)
            except Exception:
                txn.pool.discard(conn)  # closing the session rolls it back
        if txn.xa is not None and txn.state in ("prepared", "unknown"):
            XATransactions(self.options, self.connection).rollback_xid(txn.gid, **txn.where)
        txn.state = "rolled back"

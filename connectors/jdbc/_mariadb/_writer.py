"""The executor side of both MariaDB protocols: begin, ``INSERT`` the rows, roll back.

The coordinated protocol runs the partition in an XA transaction
(``XA START`` at begin, ``XA END`` + ``XA PREPARE`` in :mod:`._prepared_store`); the
markers protocol in a local transaction that first takes the partition's slot
(:mod:`._zombie_fences`). Rows go in as multi-row ``INSERT`` statements
(:mod:`._insert`) of at most :data:`STATEMENT_BYTES`: into the table (append),
or into the session's temporary staging table (upsert, CDC), merged into the
table at the end (:func:`._sql.merge`).
"""

from __future__ import annotations

import logging
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa

from twophase import TaskContext
from twophase.errors import DataError

from ..._arrow import numbers
from ..._context import ErrorContext
from .._plan import OP_COLUMN, SEQ_COLUMN, checked_ops, key_lock_hint
from .._writer import TransactionWriter
from ._client import MariaDBClient, describe_table
from ._errors import errno
from ._insert import insert_statements, rows_text
from ._load import LOCAL_INFILE_REFUSED, fields_text, load
from ._prepared_store import XATransactions
from ._render import render_fields, render_literals
from ._sql import STAGING, columns, create_staging, dedupes_at_load, merge, table
from ._transaction import MariaDBTransaction
from ._type_map import MARIADB_TYPES, Kind
from ._xid import xid_of
from ._zombie_fences import release_slot, take_slot

__all__ = ["STATEMENT_BYTES", "MariaDBWriter"]

_log = logging.getLogger("twophase.connectors.jdbc")

#: The longest ``INSERT`` sent (also capped at half the server's ``max_allowed_packet``).
STATEMENT_BYTES = 4 << 20


class MariaDBWriter(MariaDBClient, TransactionWriter[MariaDBTransaction]):
    """Writes partitions into MariaDB transactions (executor side). Picklable.

    Rows go in with ``LOAD DATA LOCAL INFILE`` (:mod:`._load`); once a server
    refuses it, this process writes multi-row ``INSERT`` statements instead
    (:mod:`._insert`).

    Parameters
    ----------
    options, connection, prepare
        As for :class:`~.._writer.TransactionWriter` (``prepare``: an XA
        transaction).
    """

    types = MARIADB_TYPES

    #: Whether this process still uses ``LOAD DATA LOCAL INFILE``.
    load_data: ClassVar[bool] = True

    # -------------------------------------------------------------- begin
    def start(self, context: TaskContext, where: ErrorContext) -> tuple[MariaDBTransaction, bool]:
        """Take the partition's slot, start the transaction, read the table."""
        xid = xid_of(context.identity, context.batch_id, context.partition_id, context.attempt)

        def start(cur: Any) -> tuple[Any, int]:
            # One live attempt per partition slot (an older one's session is killed): the markers
            # protocol's zombie fence; in the coordinated one, it ends the session of an attempt
            # whose client vanished (a network partition) and whose server-side session would
            # otherwise keep the xid taken until idle_in_transaction_timeout.
            take_slot(cur, self.options, context)
            if self.prepare:
                cur.execute("XA START %s, %s, %s", xid.params)
            else:
                cur.execute("BEGIN")
            cur.execute("SELECT @@max_allowed_packet")
            packet = int(cur.fetchone()[0])
            return describe_table(cur, self.options.table), packet

        (found, packet), conn = self.session("starting the transaction", start, where)
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
        return txn, found is not None

    # -------------------------------------------------------------- write
    def load(self, txn: MariaDBTransaction, batch: pa.RecordBatch, *, settle: bool) -> None:
        """Insert rows (``LOAD DATA``, or multi-row ``INSERT``; one settled row: ``INSERT``).

        ``LOAD DATA`` turns a row's error into a warning; a row written alone
        to tell its error (``settle``) goes in by ``INSERT``, which raises it.
        """
        conn = txn.open_connection("write()")
        if batch.num_rows == 0:
            return
        plan = self.planned(txn, batch.schema)
        names = list(plan.names)
        # (values, kind, column) written after the planned columns
        extra: list[tuple[pa.Array, str, str]] = []
        if self.options.mode != "append":
            seq = numbers(np.arange(txn.seq, txn.seq + batch.num_rows), pa.int64())
            extra.append((seq, Kind.NUMBER, SEQ_COLUMN))
            txn.seq += batch.num_rows
        into = STAGING if self.options.mode != "append" else table(self.options.table)
        try:
            if plan.op_index is not None:
                ops = checked_ops(batch.column(plan.op_index), self.options, txn.where)
                extra.append((ops, Kind.TEXT, OP_COLUMN))
            names += [column for _values, _kind, column in extra]
            with conn.cursor() as cur:
                if MariaDBWriter.load_data and not (settle and batch.num_rows == 1):
                    try:
                        fields = [render_fields(*e) for e in extra]
                        rows = fields_text(batch, plan.columns, fields)
                        load(cur, into, names, rows, plan.column_types, replace=txn.deduped)
                        txn.rows += batch.num_rows
                        return
                    except txn.errors.error as exc:
                        if errno(exc) not in LOCAL_INFILE_REFUSED:
                            raise
                        MariaDBWriter.load_data = False
                        _log.warning(
                            "the server refuses LOAD DATA LOCAL INFILE (%s): this process writes "
                            "multi-row INSERT statements instead (slower; see docs/mariadb.md)",
                            exc,
                        )
                literals = [render_literals(*e) for e in extra]
                text = rows_text(batch, plan.columns, literals)
                verb = "REPLACE" if txn.deduped else "INSERT"
                prefix = f"{verb} INTO {into} ({columns(names)}) VALUES ".encode()
                for statement in insert_statements(prefix, text, txn.max_bytes):
                    cur.execute(statement)
        except DataError as exc:
            raise exc.with_context(**txn.where.keywords()) from None
        except txn.errors.error as exc:
            raise txn.failure(exc, f"writing into {self.options.table}") from exc
        txn.rows += batch.num_rows

    def create_staging(self, txn: MariaDBTransaction) -> None:
        assert txn.plan is not None
        types = dict(txn.plan.column_types)
        written = [(name, types[name]) for name in txn.plan.names]
        keys = self.options.key_columns
        txn.deduped = dedupes_at_load(keys, written, self.options.order_column)
        statements = create_staging(
            written, with_op=txn.plan.op_index is not None, unique=keys if txn.deduped else ()
        )
        try:
            with txn.conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        except txn.errors.error as exc:
            raise txn.failure(exc, "creating the staging table") from exc
        txn.staging = STAGING

    def finish(self, txn: MariaDBTransaction) -> None:
        """Merge the staged rows into the table (upsert/CDC) and drop the staging tables."""
        conn = txn.open_connection("finishing the writes")
        if txn.staging is None or txn.plan is None:
            return
        o = self.options
        statements = merge(
            o.table,
            txn.plan.names,
            o.key_columns,
            o.order_column,
            cdc=txn.plan.op_index is not None,
            deduped=txn.deduped,
        )
        try:
            with conn.cursor() as cur:
                for statement in statements:
                    cur.execute(statement)
        except txn.errors.error as exc:
            hint = None
            if errno(exc) == 1205:
                hint = key_lock_hint("XA RECOVER")
            raise txn.failure(exc, f"merging into {o.table}", hint) from exc
        txn.staging = None

    # ------------------------------------------------------------- rollback
    def release_session(self, txn: MariaDBTransaction) -> None:
        """End the XA branch or the transaction, free the slot, give the session back."""
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

    def rollback_prepared(self, gid: str, where: ErrorContext) -> None:
        """``XA ROLLBACK`` by transaction id."""
        XATransactions(self.options, self.connection).rollback_xid(gid, where)

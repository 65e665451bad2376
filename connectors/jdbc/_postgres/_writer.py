"""The executor side both protocols share: begin, ``COPY`` the rows, merge, roll back.

One PostgreSQL transaction per partition (:class:`~._transaction.PostgresTransaction`),
fed by one streaming ``COPY`` (:class:`~._copy.CopyStream`) that is ended
before any other statement runs on the connection. How a finished transaction
ends is the protocol's: ``PREPARE TRANSACTION`` (:mod:`._prepared_store`) or the
marker row and ``COMMIT`` (:mod:`._marker_table`).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import psycopg2
import pyarrow as pa
from psycopg2 import sql

from twophase import TaskContext
from twophase.errors import DataError, TwoPhaseError

from ..._arrow import numbers
from ..._context import ErrorContext
from .._bad_rows import SAVEPOINT
from .._gid import format_gid
from .._options import QualifiedName
from .._plan import WritePlan, checked_ops, key_lock_hint
from .._writer import TransactionWriter
from . import _sql
from ._catalog import describe_table
from ._client import PostgresClient
from ._copy import CopyStream
from ._csv import encode_csv
from ._errors import sqlstate
from ._gid import GIDS
from ._prepared_store import PreparedTransactions
from ._transaction import PostgresTransaction
from ._type_map import POSTGRES_TYPES
from ._zombie_fences import application_name, take_slot

__all__ = ["PostgresWriter"]

_COPY_CHUNK = 1 << 20
#: Rows encoded at a time by a settled load, while the server ingests the slice before.
_SETTLE_ROWS = 8192


class PostgresWriter(PostgresClient, TransactionWriter[PostgresTransaction]):
    """Writes partitions into PostgreSQL transactions (executor side).

    Picklable: options and connection parameters only.

    Parameters
    ----------
    options, connection, prepare
        As for :class:`~.._writer.TransactionWriter`.
    """

    types = POSTGRES_TYPES
    next_savepoint = f"RELEASE SAVEPOINT {SAVEPOINT}; SAVEPOINT {SAVEPOINT}"
    # The COPY names a refused record, so a write with bad rows is split there, not halved:
    # larger writes cost little more to search (benchmarks/bench_dead_letters.py).
    dead_letter_write_rows = 200_000

    def _lock_hint(self) -> str:
        if self.options.mode == "append":
            return (
                "A lock wait exceeded lock_timeout: another transaction holds a lock this one "
                "needs (look for old entries in pg_prepared_xacts and pg_stat_activity)"
            )
        return key_lock_hint("SELECT * FROM pg_prepared_xacts")

    # -------------------------------------------------------------- begin
    def start(self, context: TaskContext, where: ErrorContext) -> tuple[PostgresTransaction, bool]:
        """``BEGIN`` on a pooled connection and read the target's catalog."""
        gid = GIDS.checked(
            format_gid(context.identity, context.batch_id, context.partition_id, context.attempt)
        )

        def start(cur: Any) -> tuple[int | None, Any]:
            if self.prepare:
                # Named like the markers protocol's attempts, so that the driver's fence can find a
                # zombie that holds the fence row (_zombie_fences.py).
                cur.execute(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; "
                    "SELECT set_config('application_name', %s, true), txid_current()",
                    (application_name(context),),
                )
                xid = int(cur.fetchone()[1])
            else:
                cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                take_slot(cur, context)  # the markers protocol's zombie fence (_zombie_fences.py)
                xid = None
            return xid, describe_table(cur, self.options.table)

        (xid, table), conn = self.session("starting the transaction", start, where)
        return PostgresTransaction(context, gid, self.pool(), conn, table, xid), table is not None

    # -------------------------------------------------------------- write
    def load(self, txn: PostgresTransaction, batch: pa.RecordBatch, *, settle: bool) -> None:
        """COPY rows into the table (append) or the staging table (``settle``: end the COPY).

        A settled load (``bad_rows="dead_letter"``, under a savepoint) streams its rows in
        slices of :data:`_SETTLE_ROWS`, so that the server ingests one slice while the next
        is encoded, as the one ``COPY`` of ``bad_rows="fail"`` does across record batches.
        """
        txn.open_connection("write()")
        if batch.num_rows == 0:
            return
        plan = self.planned(txn, batch.schema)
        if not settle:
            self._feed(txn, plan, batch)
        else:
            try:
                for start in range(0, batch.num_rows, _SETTLE_ROWS):
                    self._feed(txn, plan, batch.slice(start, _SETTLE_ROWS))
            except DataError:
                self._abort_copy(txn)  # a value refused here, with earlier slices sent
                raise
            self._end_copy(txn)
        txn.rows += batch.num_rows

    def _feed(self, txn: PostgresTransaction, plan: WritePlan, batch: pa.RecordBatch) -> None:
        """Encode ``batch`` and hand it to the transaction's COPY (started if none runs)."""
        extra: list[pa.Array] = []
        if self.options.mode != "append":
            extra.append(numbers(np.arange(txn.seq, txn.seq + batch.num_rows), pa.int64()))
            txn.seq += batch.num_rows
        if plan.op_index is not None:
            extra.append(checked_ops(batch.column(plan.op_index), self.options, txn.where))
        try:
            data = encode_csv(batch, plan.columns, extra)
        except DataError as exc:
            raise exc.with_context(**txn.where.keywords()) from None
        if txn.copy is None:
            txn.copy = CopyStream(txn.conn, self._copy_statement(txn), _COPY_CHUNK).start()
        try:
            txn.copy.feed(memoryview(data))
        except psycopg2.Error as exc:
            txn.copy = None  # it has ended
            raise self._copy_failed(txn, exc) from exc

    def _copy_statement(self, txn: PostgresTransaction) -> sql.Composed:
        assert txn.plan is not None
        columns = txn.plan.names
        if self.options.mode == "append":
            return _sql.copy_into(_sql.ident(self.options.table), columns)
        columns = [*columns, _sql.SEQ_COLUMN]
        if txn.plan.op_index is not None:
            columns.append(_sql.OP_COLUMN)
        assert txn.staging is not None
        return _sql.copy_into(txn.staging, columns)

    def _copy_failed(self, txn: PostgresTransaction, exc: BaseException) -> TwoPhaseError:
        hint = self._lock_hint() if sqlstate(exc) == "55P03" else None
        return txn.failure(exc, f"COPY into {self.options.table}", hint)

    def _end_copy(self, txn: PostgresTransaction) -> None:
        """Finish the transaction's COPY (if one runs) and raise its error, mapped."""
        stream, txn.copy = txn.copy, None
        if stream is None:
            return
        try:
            stream.close()
        except psycopg2.Error as exc:
            raise self._copy_failed(txn, exc) from exc

    def _staging_name(self, txn: PostgresTransaction) -> sql.Composable:
        digest = hashlib.sha256(txn.gid.encode()).hexdigest()[:16]
        name = f"twophase_stage_{digest}"
        if not self.prepare:
            return sql.Identifier(name)
        schema = self.options.merge_schema or self.options.table.schema
        return _sql.ident(QualifiedName(schema, name))

    def create_staging(self, txn: PostgresTransaction) -> None:
        assert txn.plan is not None
        staging = self._staging_name(txn)
        statement = _sql.create_staging(
            staging,
            _sql.ident(self.options.table),
            txn.plan.names,
            with_op=txn.plan.op_index is not None,
            temporary=not self.prepare,
        )
        try:
            with txn.conn.cursor() as cur:
                cur.execute(statement)
        except psycopg2.Error as exc:
            raise txn.failure(exc, "creating the staging table") from exc
        txn.staging = staging

    # ------------------------------------------------------------- finish
    def finish(self, txn: PostgresTransaction) -> None:
        """End the COPY; merge the staging table into the target (upsert/CDC) and drop it."""
        conn = txn.open_connection("finishing the writes")
        self._end_copy(txn)
        if txn.staging is None or txn.plan is None:
            return
        options = self.options
        statement = _sql.merge(
            _sql.ident(options.table),
            txn.staging,
            txn.plan.names,
            options.key_columns,
            options.order_column,
            cdc=options.mode != "upsert",
        )
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                cur.execute(sql.SQL("DROP TABLE {}").format(txn.staging))
        except psycopg2.Error as exc:
            hint = self._lock_hint() if sqlstate(exc) == "55P03" else None
            if sqlstate(exc) == "21000":
                hint = "Two rows of the batch have the same key; this is a bug in the merge"
            raise txn.failure(exc, f"merging into {options.table}", hint) from exc
        txn.staging = None

    # ------------------------------------------------------------- rollback
    @staticmethod
    def _abort_copy(txn: PostgresTransaction) -> None:
        """Make a running ``COPY`` fail (the transaction or its savepoint is rolled back next)."""
        stream, txn.copy = txn.copy, None
        if stream is not None:
            stream.abort()

    def release_session(self, txn: PostgresTransaction) -> None:
        """Abort a running ``COPY``, roll the session back and give it back."""
        self._abort_copy(txn)
        conn, txn.conn = txn.conn, None
        if conn is not None:
            txn.pool.release(conn, rollback=True)

    def rollback_prepared(self, gid: str, where: ErrorContext) -> None:
        """``ROLLBACK PREPARED`` by gid."""
        PreparedTransactions(self.options, self.connection).rollback(gid, where)

"""The executor side: one PostgreSQL transaction per partition, fed by COPY.

:class:`PostgresWriter` holds only options and connection parameters, so it
pickles with the sink; the live :class:`PostgresTransaction` never leaves the
executor. The sinks (``_sink.py``) call it from their participant hooks.

Rows go in through one streaming ``COPY`` per transaction
(:class:`~._copy.CopyStream`), ended before any other statement runs on the
connection (merge, marker, ``PREPARE``). A transaction goes through these states::

    open --write*--> open --finish--> open --prepare--> prepared   (protocol A)
                                          --commit---> committed   (protocol B)
    open/prepared --rollback--> rolled back
    any --connection lost during PREPARE--> unknown (rolled back by gid later)
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

import numpy as np
import psycopg2
import pyarrow as pa
import pyarrow.compute as pc
from psycopg2 import sql

from twophase._types import Marker, TaskContext
from twophase.errors import (
    AbortRequiredError,
    ConfigurationError,
    DataError,
    FatalError,
    RetriableError,
    TwoPhaseError,
)

from . import _sql
from ._catalog import TableInfo, describe_table
from ._config import ConnectionConfig, PostgresOptions, QualifiedName
from ._copy import CopyStream
from ._encode import encode_csv
from ._errors import connection_error, is_connection_error, map_error, sqlstate
from ._gid import format_gid
from ._plan import WritePlan, plan_write
from ._pool import ConnectionPool, pool_for

__all__ = ["PostgresTransaction", "PostgresWriter"]

_log = logging.getLogger("twophase.connectors.jdbc")

_CDC_OPS = pa.array(["c", "r", "u", "d"])
_COPY_CHUNK = 1 << 20


class PostgresTransaction:
    """A partition's live transaction on an executor (never pickled).

    Attributes
    ----------
    context
        The task that owns it.
    gid
        Its global transaction id (protocol A) / transaction id (protocol B).
    state
        ``open``, ``prepared``, ``committed``, ``rolled back`` or ``unknown``.
    rows
        Rows written so far.
    xid
        The server's 64-bit transaction id (protocol A), to tell later whether
        a gid that disappeared was committed or rolled back.
    """

    def __init__(
        self, context: TaskContext, gid: str, pool: ConnectionPool, conn: Any, table: TableInfo
    ) -> None:
        self.context = context
        self.gid = gid
        self.pool = pool
        self.conn: Any = conn
        self.table = table
        self.state = "open"
        self.rows = 0
        self.xid: int | None = None
        self.plan: WritePlan | None = None
        self.staging: sql.Composable | None = None
        self.seq = 0
        self.copy: CopyStream | None = None

    def __repr__(self) -> str:
        return f"PostgresTransaction(gid={self.gid!r}, state={self.state!r}, rows={self.rows})"


# Protocol B: transactions between pre_commit and commit, by transaction id.
# Both hooks run in the same executor process, one right after the other.
_LIVE: dict[str, PostgresTransaction] = {}
_LIVE_LOCK = threading.Lock()


def live_transaction(transaction_id: str, *, remove: bool) -> PostgresTransaction | None:
    """Return the live transaction registered under an id in this process, if any.

    Parameters
    ----------
    transaction_id
        The handle's transaction id.
    remove
        Unregister it.

    Returns
    -------
    PostgresTransaction or None
        The transaction.
    """
    with _LIVE_LOCK:
        if remove:
            return _LIVE.pop(transaction_id, None)
        return _LIVE.get(transaction_id)


class PostgresWriter:
    """Writes partitions into PostgreSQL transactions (executor side).

    Picklable: options and connection parameters only.

    Parameters
    ----------
    options
        The sink's options.
    connection
        Connection parameters.
    prepare
        Protocol A (``PREPARE TRANSACTION``) when True, protocol B otherwise.
    """

    def __init__(
        self, options: PostgresOptions, connection: ConnectionConfig, *, prepare: bool
    ) -> None:
        self.options = options
        self.connection = connection
        self.prepare = prepare

    # ------------------------------------------------------------ helpers
    def pool(self) -> ConnectionPool:
        """Return the process-wide pool for the sink's server and settings.

        Returns
        -------
        ConnectionPool
            The pool.
        """
        return pool_for(
            self.connection, self.options.session_settings(), self.options.connect_timeout
        )

    def _context(self, txn: PostgresTransaction) -> dict[str, Any]:
        c = txn.context
        return {"sink": c.sink_name, "batch_id": c.batch_id, "partition_id": c.partition_id}

    def _fail(
        self, txn: PostgresTransaction, exc: BaseException, doing: str, hint: str | None = None
    ) -> TwoPhaseError:
        types = txn.plan.column_types if txn.plan is not None else ()
        if is_connection_error(exc) and txn.conn is not None:
            txn.pool.discard(txn.conn, flush=True)
            txn.conn = None
        return map_error(
            exc,
            doing,
            secrets=self.connection.secrets,
            columns=types,
            hint=hint,
            **self._context(txn),
        )

    def _lock_hint(self) -> str:
        if self.options.mode == "append":
            return (
                "A lock wait exceeded lock_timeout: another transaction holds a lock this one "
                "needs (look for old entries in pg_prepared_xacts and pg_stat_activity)"
            )
        return (
            "A lock wait exceeded lock_timeout: another transaction holds rows of the same "
            "keys. In upsert/CDC mode every key must be written by one partition only: "
            "repartition the DataFrame by the key columns before the sink"
        )

    # -------------------------------------------------------------- begin
    def begin(self, context: TaskContext) -> PostgresTransaction:
        """Open a connection (pooled), ``BEGIN`` and read the target's catalog.

        Parameters
        ----------
        context
            The task.

        Returns
        -------
        PostgresTransaction
            The open transaction.
        """
        where: dict[str, Any] = {
            "sink": context.sink_name,
            "batch_id": context.batch_id,
            "partition_id": context.partition_id,
        }
        gid = format_gid(context.identity, context.batch_id, context.partition_id, context.attempt)
        pool = self.pool()
        for try_number in (0, 1):
            try:
                conn, reused = pool.acquire()
            except psycopg2.Error as exc:
                raise connection_error(
                    exc, self.connection.describe(), secrets=self.connection.secrets, **where
                ) from None
            try:
                with conn.cursor() as cur:
                    if self.prepare:
                        cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED; SELECT txid_current()")
                        xid = int(cur.fetchone()[0])
                    else:
                        cur.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
                        xid = None
                    table = describe_table(cur, self.options.table)
            except psycopg2.Error as exc:
                if is_connection_error(exc):
                    pool.discard(conn, flush=True)
                    if reused and try_number == 0:
                        continue  # the pooled connection died while idle: once more, fresh
                else:
                    _rollback_quietly(pool, conn)
                raise map_error(
                    exc, "starting the transaction", secrets=self.connection.secrets, **where
                ) from exc
            break
        if table is None:
            _rollback_quietly(pool, conn)
            raise ConfigurationError(
                f"table {self.options.table} does not exist (or is not visible to the sink's user)",
                **where,
            )
        txn = PostgresTransaction(context, gid, pool, conn, table)
        txn.xid = xid
        return txn

    # -------------------------------------------------------------- write
    def write(self, txn: PostgresTransaction, batch: pa.RecordBatch) -> None:
        """COPY one record batch into the table (append) or the staging table.

        Parameters
        ----------
        txn
            The open transaction.
        batch
            The rows.
        """
        if txn.state != "open" or txn.conn is None:
            raise AbortRequiredError(
                f"write() on a transaction that is {txn.state}", **self._context(txn)
            )
        if batch.num_rows == 0:
            return
        if txn.plan is None:
            try:
                txn.plan = plan_write(
                    batch.schema, txn.table, self.options, str(self.options.table)
                )
            except ConfigurationError as exc:
                raise exc.with_context(**self._context(txn)) from None
            if self.options.mode != "append":
                self._create_staging(txn)
        plan = txn.plan
        extra: list[pa.Array] = []
        if self.options.mode != "append":
            extra.append(pa.array(np.arange(txn.seq, txn.seq + batch.num_rows, dtype=np.int64)))
            txn.seq += batch.num_rows
        if plan.op_index is not None:
            extra.append(self._checked_ops(txn, batch.column(plan.op_index)))
        try:
            data = encode_csv(batch, plan.columns, extra)
        except DataError as exc:
            raise exc.with_context(**self._context(txn)) from None
        if txn.copy is None:
            txn.copy = CopyStream(txn.conn, self._copy_statement(txn), _COPY_CHUNK).start()
        try:
            txn.copy.feed(memoryview(data))
        except psycopg2.Error as exc:
            txn.copy = None  # it has ended
            raise self._copy_failed(txn, exc) from exc
        txn.rows += batch.num_rows

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
        return self._fail(txn, exc, f"COPY into {self.options.table}", hint)

    def _end_copy(self, txn: PostgresTransaction) -> None:
        """Finish the transaction's COPY (if one runs) and raise its error, mapped."""
        stream, txn.copy = txn.copy, None
        if stream is None:
            return
        try:
            stream.close()
        except psycopg2.Error as exc:
            raise self._copy_failed(txn, exc) from exc

    def _checked_ops(self, txn: PostgresTransaction, ops: pa.Array) -> pa.Array:
        if pa.types.is_dictionary(ops.type):
            ops = ops.dictionary_decode()
        ops = ops.cast(pa.string())
        valid = pc.fill_null(pc.is_in(ops, value_set=_CDC_OPS), False)
        if not pc.all(valid).as_py():
            bad = pc.filter(ops, pc.invert(valid))
            raise DataError(
                f"{len(bad)} row(s) have an operation other than 'c', 'r', 'u', 'd' "
                f"(first: {bad[0].as_py()!r}); the batch is not written",
                column=self.options.cdc_op_column,
                **self._context(txn),
            )
        return ops

    def _staging_name(self, txn: PostgresTransaction) -> sql.Composable:
        digest = hashlib.sha256(txn.gid.encode()).hexdigest()[:16]
        name = f"twophase_stage_{digest}"
        if not self.prepare:
            return sql.Identifier(name)
        schema = self.options.merge_schema or self.options.table.schema
        return _sql.ident(QualifiedName(schema, name))

    def _create_staging(self, txn: PostgresTransaction) -> None:
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
            raise self._fail(txn, exc, "creating the staging table") from exc
        txn.staging = staging

    # ------------------------------------------------------------- finish
    def finish(self, txn: PostgresTransaction) -> None:
        """Merge the staging table into the target (upsert/CDC) and drop it.

        Parameters
        ----------
        txn
            The open transaction.
        """
        if txn.state != "open" or txn.conn is None:
            raise AbortRequiredError(
                f"pre_commit() on a transaction that is {txn.state}", **self._context(txn)
            )
        self._end_copy(txn)
        if txn.staging is None or txn.plan is None:
            return
        options = self.options
        merge = _sql.merge_upsert if options.mode == "upsert" else _sql.merge_cdc
        statement = merge(
            _sql.ident(options.table),
            txn.staging,
            txn.plan.names,
            options.key_columns,
            options.order_column,
        )
        try:
            with txn.conn.cursor() as cur:
                cur.execute(statement)
                cur.execute(sql.SQL("DROP TABLE {}").format(txn.staging))
        except psycopg2.Error as exc:
            hint = self._lock_hint() if sqlstate(exc) == "55P03" else None
            if sqlstate(exc) == "21000":
                hint = "Two rows of the batch have the same key; this is a bug in the merge"
            raise self._fail(txn, exc, f"merging into {options.table}", hint) from exc
        txn.staging = None

    def write_marker(self, txn: PostgresTransaction, marker: Marker) -> None:
        """Insert the marker row (protocol B) inside the partition's transaction.

        Every ``marker_retention`` batches, the transaction of partition 0
        also deletes this identity's markers older than ``marker_retention``
        batches.

        Parameters
        ----------
        txn
            The open transaction.
        marker
            The marker.
        """
        if txn.state != "open" or txn.conn is None:
            raise AbortRequiredError(
                f"write_marker() on a transaction that is {txn.state}", **self._context(txn)
            )
        self._end_copy(txn)
        table = _sql.ident(self.options.marker_table)
        retention = self.options.marker_retention
        try:
            with txn.conn.cursor() as cur:
                cur.execute(
                    _sql.insert_marker(table),
                    (
                        marker.identity,
                        marker.batch_id,
                        marker.partition_id,
                        marker.attempt,
                        str(marker.fingerprint),
                    ),
                )
                if marker.partition_id == 0 and marker.batch_id % retention == 0:
                    cur.execute(
                        _sql.delete_old_markers(table),
                        (marker.identity, marker.batch_id - retention + 1),
                    )
        except psycopg2.Error as exc:
            hint = None
            if sqlstate(exc) == "23505":
                hint = (
                    "This partition's rows are already recorded as committed for this batch: "
                    "writing them again would duplicate them"
                )
            raise self._fail(
                txn, exc, f"writing the marker into {self.options.marker_table}", hint
            ) from exc

    # ------------------------------------------------------------ protocol A
    def prepare_transaction(self, txn: PostgresTransaction) -> None:
        """``PREPARE TRANSACTION gid`` and give the connection back to the pool.

        Parameters
        ----------
        txn
            The open, finished transaction.
        """
        conn = txn.conn
        try:
            with conn.cursor() as cur:
                cur.execute("PREPARE TRANSACTION %s", (txn.gid,))
        except psycopg2.Error as exc:
            if is_connection_error(exc):
                # The server may have prepared it before the connection broke.
                txn.state = "unknown"
            raise self._fail(txn, exc, f"PREPARE TRANSACTION {txn.gid!r}") from exc
        txn.state = "prepared"
        txn.conn = None
        txn.pool.release(conn)

    # ------------------------------------------------------------ protocol B
    def register(self, txn: PostgresTransaction) -> None:
        """Keep the open transaction until ``commit`` (protocol B).

        Parameters
        ----------
        txn
            The finished transaction.
        """
        with _LIVE_LOCK:
            _LIVE[txn.gid] = txn

    def commit_local(self, txn: PostgresTransaction, marker_exists: Any) -> None:
        """``COMMIT`` the live transaction (protocol B), resolving a lost reply.

        Parameters
        ----------
        txn
            The finished transaction.
        marker_exists
            Callable returning whether the transaction's marker is committed;
            asked when the connection broke during ``COMMIT``.
        """
        conn = txn.conn
        if txn.state == "committed":
            return
        if txn.state != "open" or conn is None:
            raise AbortRequiredError(
                f"commit() on a transaction that is {txn.state}", **self._context(txn)
            )
        try:
            with conn.cursor() as cur:
                cur.execute("COMMIT")
                status = cur.statusmessage
        except psycopg2.Error as exc:
            if is_connection_error(exc):
                txn.pool.discard(conn, flush=True)
                txn.conn = None
                txn.state = "unknown"
                if marker_exists():
                    txn.state = "committed"
                    _log.info("%s: COMMIT's reply was lost but the marker is there", txn.gid)
                    return
                txn.state = "rolled back"
                raise RetriableError(
                    f"the connection broke during COMMIT of {txn.gid!r} and its marker is not "
                    "there: the transaction did not commit; the task is retried",
                    **self._context(txn),
                ) from exc
            txn.state = "rolled back"
            raise self._fail(txn, exc, f"COMMIT of {txn.gid!r}") from exc
        txn.conn = None
        if status != "COMMIT":
            txn.state = "rolled back"
            txn.pool.release(conn)
            raise AbortRequiredError(
                f"COMMIT of {txn.gid!r} rolled back instead (the transaction had failed)",
                **self._context(txn),
            )
        txn.state = "committed"
        txn.pool.release(conn)

    # ------------------------------------------------------------- rollback
    def rollback(self, txn: PostgresTransaction) -> None:
        """Roll back the transaction, open or prepared; idempotent.

        Parameters
        ----------
        txn
            The transaction.
        """
        live_transaction(txn.gid, remove=True)
        if txn.state in ("rolled back", "committed"):
            return
        stream, txn.copy = txn.copy, None
        if stream is not None:
            stream.abort()
        conn, txn.conn = txn.conn, None
        if conn is not None:
            _rollback_quietly(txn.pool, conn)
        if txn.state in ("prepared", "unknown"):
            self.rollback_prepared(txn.gid, **self._context(txn))
        txn.state = "rolled back"

    def rollback_prepared(self, gid: str, **context: Any) -> bool:
        """``ROLLBACK PREPARED gid`` on a pooled connection; unknown gid is success.

        Parameters
        ----------
        gid
            The gid.
        **context
            Error context (sink, batch_id, partition_id).

        Returns
        -------
        bool
            True if a prepared transaction was rolled back, False if none had
            that gid.
        """
        pool = self.pool()
        for try_number in (0, 1):
            try:
                conn, reused = pool.acquire()
            except psycopg2.Error as exc:
                raise connection_error(
                    exc, self.connection.describe(), secrets=self.connection.secrets, **context
                ) from None
            try:
                with conn.cursor() as cur:
                    cur.execute("ROLLBACK PREPARED %s", (gid,))
            except psycopg2.Error as exc:
                if sqlstate(exc) == "42704":
                    pool.release(conn)
                    return False
                if is_connection_error(exc):
                    pool.discard(conn, flush=True)
                    if reused and try_number == 0:
                        continue
                else:
                    pool.release(conn)
                raise map_error(
                    exc,
                    f"ROLLBACK PREPARED {gid!r}",
                    secrets=self.connection.secrets,
                    **context,
                ) from exc
            pool.release(conn)
            return True
        raise FatalError("unreachable")  # pragma: no cover


def _rollback_quietly(pool: ConnectionPool, conn: Any) -> None:
    """Roll back whatever the session has open and give the connection back."""
    import psycopg2.extensions as ext

    try:
        if not conn.closed and conn.info.transaction_status != ext.TRANSACTION_STATUS_IDLE:
            with conn.cursor() as cur:
                cur.execute("ROLLBACK")
    except psycopg2.Error:
        pool.discard(conn)
        return
    pool.release(conn)

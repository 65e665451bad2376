"""The driver side: capabilities, schema checks, phase 2, recovery, markers.

:class:`PostgresCommitter` runs its statements in autocommit mode on a pooled
connection (called one after another, they share one connection). A pooled
connection that turns out dead is replaced once, transparently; every
statement here is safe to repeat (reads, ``IF NOT EXISTS`` DDL, ``COMMIT
PREPARED`` / ``ROLLBACK PREPARED`` with an unknown gid treated as below).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg2
import pyarrow as pa
from psycopg2 import sql

from twophase._types import Fingerprint, Marker
from twophase.errors import ConfigurationError, FatalError, RetriableError

from . import _sql
from ._catalog import (
    ServerInfo,
    TableInfo,
    describe_table,
    has_privileges,
    schema_can_create,
    server_info,
)
from ._config import ConnectionConfig, PostgresOptions
from ._errors import connection_error, is_connection_error, map_error, sqlstate
from ._gid import GID_PREFIX, gid_prefix, parse_gid
from ._plan import create_table_fields, plan_write
from ._pool import ConnectionPool, pool_for

__all__ = ["PostgresCommitter", "partition_limit"]

_log = logging.getLogger("twophase.connectors.jdbc")

T = TypeVar("T")


def partition_limit(max_prepared: int, max_partitions: int | None) -> int:
    """How many prepared transactions one batch may hold (protocol A).

    A quarter of ``max_prepared_transactions`` (at least 2 slots) is left to
    other users of the server and to transactions of a retried task.

    Parameters
    ----------
    max_prepared
        The server's ``max_prepared_transactions`` (> 0).
    max_partitions
        The user's cap, if any.

    Returns
    -------
    int
        The limit, at least 1.
    """
    automatic = max(1, max_prepared - max(2, max_prepared // 4))
    return automatic if max_partitions is None else min(automatic, max_partitions)


class PostgresCommitter:
    """Driver-side operations of the PostgreSQL sinks.

    Picklable (options and connection parameters only), although it is only
    used on the driver and, for recovery of a retried task, on executors.

    Parameters
    ----------
    options
        The sink's options.
    connection
        Connection parameters.
    """

    def __init__(self, options: PostgresOptions, connection: ConnectionConfig) -> None:
        self.options = options
        self.connection = connection

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

    def run(self, doing: str, fn: Callable[[Any], T], **context: Any) -> T:
        """Run ``fn(cursor)`` in autocommit mode; retry once if a pooled connection was dead.

        Parameters
        ----------
        doing
            What is being done, for error messages.
        fn
            The work; it receives a cursor.
        **context
            Error context (sink, batch_id, partition_id, column, setting).

        Returns
        -------
        T
            What ``fn`` returned.
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
                    result = fn(cur)
            except psycopg2.Error as exc:
                if is_connection_error(exc):
                    pool.discard(conn, flush=True)
                    if reused and try_number == 0:
                        continue
                else:
                    pool.release(conn)
                raise map_error(exc, doing, secrets=self.connection.secrets, **context) from exc
            except BaseException:
                pool.release(conn)
                raise
            pool.release(conn)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    # ------------------------------------------------------------ capabilities
    def server(self, **context: Any) -> ServerInfo:
        """Read the server's version and ``max_prepared_transactions``.

        Parameters
        ----------
        **context
            Error context.

        Returns
        -------
        ServerInfo
            The values.
        """
        return self.run("reading the server settings", server_info, **context)

    def probe_prepare(self, probe_gid: str, **context: Any) -> None:
        """Check that the server accepts ``PREPARE TRANSACTION``; fail with its own hint.

        Prepares an empty transaction and rolls it back at once.

        Parameters
        ----------
        probe_gid
            A gid no real transaction uses.
        **context
            Error context.

        Raises
        ------
        ConfigurationError
            The server refuses (``max_prepared_transactions = 0``), with the
            server's message and hint.
        """

        def probe(cur: Any) -> None:
            cur.execute("BEGIN")
            try:
                cur.execute("PREPARE TRANSACTION %s", (probe_gid,))
            except psycopg2.Error as exc:
                if cur.connection.info.transaction_status != 0:
                    cur.execute("ROLLBACK")
                raise ConfigurationError(
                    "protocol='coordinated' needs PREPARE TRANSACTION, which this server "
                    f"refuses: {map_error(exc, 'PREPARE TRANSACTION').message}. Or let the "
                    "sink use protocol='markers' (protocol='auto' picks it)",
                    setting="max_prepared_transactions",
                    **context,
                ) from None
            cur.execute("ROLLBACK PREPARED %s", (probe_gid,))

        self.run("probing PREPARE TRANSACTION", probe, **context)

    # ------------------------------------------------------------------ open
    def check_target(self, *, coordinated: bool, **context: Any) -> TableInfo | None:
        """Check the table and the privileges at start (None: missing, will be created).

        Parameters
        ----------
        coordinated
            Protocol A (needs CREATE on the merge schema for upsert/CDC).
        **context
            Error context.

        Returns
        -------
        TableInfo or None
            The table.
        """
        options = self.options

        def check(cur: Any) -> TableInfo | None:
            table = describe_table(cur, options.table)
            if table is None:
                if options.create_table:
                    return None
                raise ConfigurationError(
                    f"table {options.table} does not exist (or is not visible to the sink's "
                    "user); create it, or pass create_table=True",
                    setting="table",
                    **context,
                )
            if table.kind not in ("r", "p"):
                raise ConfigurationError(
                    f"{options.table} is not a table (relkind {table.kind!r})",
                    setting="table",
                    **context,
                )
            needed = {"append": ("INSERT",), "upsert": ("INSERT", "UPDATE")}.get(
                options.mode, ("INSERT", "UPDATE", "DELETE")
            )
            missing = has_privileges(cur, table.oid, needed)
            if missing:
                raise ConfigurationError(
                    f"permission denied: the sink's user lacks {', '.join(missing)} on "
                    f"{options.table} (mode={options.mode!r} needs {', '.join(needed)})",
                    setting="table",
                    **context,
                )
            if coordinated and options.mode != "append":
                schema, ok = schema_can_create(cur, options.merge_schema or options.table.schema)
                if not ok:
                    raise ConfigurationError(
                        f"permission denied: protocol 'coordinated' with mode={options.mode!r} "
                        f"creates an unlogged staging table per transaction in schema "
                        f"{schema!r}, and the sink's user may not create tables there. GRANT "
                        "CREATE on it, or set merge_schema to a schema where it may",
                        setting="merge_schema",
                        **context,
                    )
            return table

        return self.run(f"checking table {options.table}", check, **context)

    def ensure_marker_table(self, identity: str, **context: Any) -> None:
        """Create the marker table if missing and prune this identity's old markers.

        Parameters
        ----------
        identity
            The sink identity.
        **context
            Error context.
        """
        table = _sql.ident(self.options.marker_table)

        def ensure(cur: Any) -> None:
            cur.execute("SELECT to_regclass(%s)", (table.as_string(cur),))
            if cur.fetchone()[0] is None:
                cur.execute(_sql.create_marker_table(table))
            cur.execute(
                sql.SQL("SELECT max(batch_id) FROM {} WHERE identity = %s").format(table),
                (identity,),
            )
            newest = cur.fetchone()[0]
            if newest is not None:
                cur.execute(
                    _sql.delete_old_markers(table),
                    (identity, int(newest) - self.options.marker_retention + 1),
                )

        self.run(f"preparing the marker table {self.options.marker_table}", ensure, **context)

    # ---------------------------------------------------------------- schema
    def check_schema(self, schema: pa.Schema, **context: Any) -> None:
        """Create the table if asked, then check the batch schema against it.

        Parameters
        ----------
        schema
            The Arrow schema of the batch.
        **context
            Error context (sink, batch_id).
        """
        options = self.options

        def check(cur: Any) -> None:
            table = describe_table(cur, options.table)
            if table is None and options.create_table:
                fields = create_table_fields(schema, options)
                cur.execute(
                    _sql.create_table(_sql.ident(options.table), fields, options.key_columns)
                )
                _log.info("created table %s (%d columns)", options.table, len(fields))
                table = describe_table(cur, options.table)
            if table is None:
                raise ConfigurationError(
                    f"table {options.table} does not exist; create it, or pass create_table=True",
                    setting="table",
                )
            plan_write(schema, table, options, str(options.table))

        try:
            self.run(f"checking the schema against {options.table}", check, **context)
        except ConfigurationError as exc:
            raise exc.with_context(**context) from exc.__cause__

    # -------------------------------------------------------- protocol A, phase 2
    def commit_prepared(self, gid: str, xid: int | None, **context: Any) -> str:
        """``COMMIT PREPARED gid``; an unknown gid is resolved through the xid.

        Parameters
        ----------
        gid
            The gid.
        xid
            The 64-bit transaction id recorded at ``begin`` (None when unknown).
        **context
            Error context.

        Returns
        -------
        str
            ``"committed"`` (now), ``"already committed"`` (the xid says so), or
            ``"assumed committed"`` (the server no longer knows the xid).

        Raises
        ------
        FatalError
            The transaction was rolled back: its rows are lost.
        RetriableError
            The server is unreachable, or the transaction is still running.
        """

        def commit(cur: Any) -> tuple[bool, str | None]:
            try:
                cur.execute("COMMIT PREPARED %s", (gid,))
                return True, None
            except psycopg2.Error as exc:
                if sqlstate(exc) != "42704":
                    raise
            if xid is None:
                return False, None
            cur.execute("SELECT txid_status(%s)", (xid,))
            return False, cur.fetchone()[0]

        done, status = self.run(f"COMMIT PREPARED {gid!r}", commit, **context)
        if done:
            return "committed"
        outcome = committed_or_raise(status, gid, **context)
        if outcome == "assumed committed":
            _log.warning(
                "%s is not prepared any more and the server cannot tell whether its "
                "transaction committed (no xid, or too old); a transaction named by a commit "
                "decision is only ever committed, so it is taken as committed",
                gid,
            )
        return outcome

    # ---------------------------------------------------------- recovery
    def list_prepared(self, identity: str, **context: Any) -> list[tuple[str, int, int, int]]:
        """List this identity's prepared transactions in the sink's database.

        Parameters
        ----------
        identity
            The sink identity.
        **context
            Error context.

        Returns
        -------
        list of (gid, batch_id, partition_id, attempt)
            Parsed from ``pg_prepared_xacts``; gids of other identities are
            never returned, even when one identity is a prefix of another.
        """
        prefix = gid_prefix(identity)

        def query(cur: Any) -> list[str]:
            cur.execute(
                "SELECT gid FROM pg_catalog.pg_prepared_xacts "
                "WHERE database = current_database() AND left(gid, %s) = %s ORDER BY gid",
                (len(prefix), prefix),
            )
            return [r[0] for r in cur.fetchall()]

        found = []
        for gid in self.run("listing prepared transactions", query, **context):
            parsed = parse_gid(gid, identity)
            if parsed is not None:
                found.append((gid, parsed.batch_id, parsed.partition_id, parsed.attempt))
        return found

    def stale_prepared(self, identity: str, older_than: float, **context: Any) -> list[str]:
        """List prepared transactions of other identities of this connector, older than a limit.

        They hold locks and slots and block VACUUM; nothing of this run will
        resolve them (a reset checkpoint, another query), so open() warns.

        Parameters
        ----------
        identity
            This sink's identity (excluded).
        older_than
            Age in seconds.
        **context
            Error context.

        Returns
        -------
        list of str
            Their gids.
        """

        def query(cur: Any) -> list[str]:
            cur.execute(
                "SELECT gid FROM pg_catalog.pg_prepared_xacts WHERE database = current_database() "
                "AND left(gid, %s) = %s AND left(gid, %s) <> %s "
                "AND prepared < now() - make_interval(secs => %s) ORDER BY prepared",
                (
                    len(GID_PREFIX),
                    GID_PREFIX,
                    len(gid_prefix(identity)),
                    gid_prefix(identity),
                    older_than,
                ),
            )
            return [r[0] for r in cur.fetchall()]

        return self.run("listing stale prepared transactions", query, **context)

    # ------------------------------------------------------------ markers
    def read_markers(self, identity: str, batch: int, **context: Any) -> list[Marker]:
        """Read the committed markers of one batch (protocol B).

        Parameters
        ----------
        identity
            The sink identity.
        batch
            The batch id.
        **context
            Error context.

        Returns
        -------
        list of Marker
            One per committed partition transaction.
        """
        table = _sql.ident(self.options.marker_table)

        def query(cur: Any) -> list[Marker]:
            cur.execute(_sql.select_markers(table), (identity, batch))
            return [
                Marker(identity, batch, int(p), int(a), Fingerprint.parse(f))
                for p, a, f in cur.fetchall()
            ]

        context.setdefault("batch_id", batch)
        return self.run(f"reading markers from {self.options.marker_table}", query, **context)

    def marker_exists(
        self, identity: str, batch: int, partition: int, attempt: int, **context: Any
    ) -> bool:
        """Whether one transaction's marker is committed (protocol B).

        Parameters
        ----------
        identity, batch, partition, attempt
            The transaction.
        **context
            Error context.

        Returns
        -------
        bool
            True when the marker row is visible (the transaction committed).
        """
        table = _sql.ident(self.options.marker_table)

        def query(cur: Any) -> bool:
            cur.execute(_sql.marker_exists(table), (identity, batch, partition, attempt))
            return bool(cur.fetchone()[0])

        return self.run(f"reading markers from {self.options.marker_table}", query, **context)


def committed_or_raise(status: str | None, gid: str, **context: Any) -> str:
    """Turn the status of a vanished prepared transaction into an outcome or an error.

    Parameters
    ----------
    status
        ``txid_status()``: ``committed``, ``aborted``, ``in progress`` or None.
    gid
        The gid.
    **context
        Error context.

    Returns
    -------
    str
        The outcome when it is a success.
    """
    if status == "committed":
        return "already committed"
    if status == "aborted":
        raise FatalError(
            f"prepared transaction {gid!r} of a decided batch was rolled back (by hand or by "
            "another process): its rows are lost. Restore them from the source (see "
            "docs/jdbc.md, 'resolving in-doubt transactions by hand')",
            **context,
        )
    if status == "in progress":
        raise RetriableError(f"transaction of {gid!r} is still in progress", **context)
    return "assumed committed"

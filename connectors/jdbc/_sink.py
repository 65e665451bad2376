"""The PostgreSQL sinks (protocol A and B) and the factory that picks one.

* :class:`PostgresTwoPhaseSink` -- protocol A: each partition's transaction is
  prepared (``PREPARE TRANSACTION``) on its executor; the driver records the decision and runs
  ``COMMIT PREPARED`` for every partition (phase 2).
* :class:`PostgresMarkerSink` -- protocol B, for servers with
  ``max_prepared_transactions = 0``: each partition commits on its executor
  together with a marker row carrying the partition's fingerprint.
* :func:`postgres_sink` -- the one constructor users need: it asks the server
  for ``max_prepared_transactions`` once and returns the right sink.

The executor side is :class:`~._writer.PostgresWriter`, the driver side
:class:`~._committer.PostgresCommitter`; the sink classes only route the
framework's hooks to them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa

from twophase._retry import RetryPolicy
from twophase._sink import MarkerCommitSink, TwoPhaseCommitSink
from twophase._types import Marker, RecoveryContext, SinkContext, TaskContext, TransactionHandle
from twophase.errors import ConfigurationError, FatalError

from ._catalog import ServerInfo
from ._committer import PostgresCommitter, partition_limit
from ._config import ConnectionConfig, PostgresOptions, QualifiedName, WriteMode
from ._gid import GID_PREFIX, check_identity, parse_gid
from ._writer import PostgresTransaction, PostgresWriter, live_transaction

__all__ = [
    "PostgresHandle",
    "PostgresMarkerSink",
    "PostgresSink",
    "PostgresTwoPhaseSink",
    "postgres_sink",
]

_log = logging.getLogger("twophase.connectors.jdbc")

Protocol = Literal["auto", "coordinated", "markers"]


@dataclass(frozen=True)
class PostgresHandle(TransactionHandle):
    """The handle of one partition's transaction. Frozen and picklable.

    Attributes
    ----------
    transaction_id
        The gid, ``tp:<identity>:<batch>:<partition>:<attempt>``.
    batch_id, partition_id, attempt
        Where it came from.
    xid
        Protocol A: the server's 64-bit transaction id, recorded in the commit
        decision so that a gid that vanished can be told committed or rolled
        back (``txid_status``). None for handles rebuilt from
        ``pg_prepared_xacts`` and for protocol B.
    rows
        Rows written by the transaction (informational).
    """

    xid: int | None = None
    rows: int = 0


def _context(handle: TransactionHandle, sink: str) -> dict[str, Any]:
    return {"sink": sink, "batch_id": handle.batch_id, "partition_id": handle.partition_id}


def _repr(sink: PostgresTwoPhaseSink | PostgresMarkerSink) -> str:
    o = sink.options
    keys = f", key_columns={list(o.key_columns)!r}" if o.key_columns else ""
    return (
        f"{type(sink).__name__}(name={sink.name!r}, table={str(o.table)!r}, "
        f"mode={o.mode!r}{keys}, server={sink.connection.describe()!r})"
    )


class PostgresTwoPhaseSink(TwoPhaseCommitSink[PostgresTransaction, PostgresHandle]):
    """Exactly-once into PostgreSQL with ``PREPARE TRANSACTION`` (protocol A).

    Build it with :func:`postgres_sink` (which checks the server); the
    constructor is public for typing and for forcing the protocol.

    Every partition of a micro-batch writes its rows with ``COPY`` inside one
    transaction and prepares it; once every partition has prepared, the driver
    records the decision and commits them all. A batch is either committed in
    full or not at all, whatever fails and whenever.

    Picklable (it is sent to the executors): options and connection
    parameters only; connections live in a per-process pool.

    Parameters
    ----------
    name
        The sink name (part of every gid).
    options
        What to write and how.
    connection
        Connection parameters.
    server
        The server's capabilities, when already read (sets
        :attr:`max_transactions_per_batch` now rather than in :meth:`open`).
    checkpoint_location, retry, history
        See :class:`twophase.TwoPhaseCommitSink`.
    """

    def __init__(
        self,
        name: str,
        options: PostgresOptions,
        connection: ConnectionConfig,
        *,
        server: ServerInfo | None = None,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        history: int = 100,
    ) -> None:
        super().__init__(
            name, checkpoint_location=checkpoint_location, retry=retry, history=history
        )
        self.options = options
        self.connection = connection
        self._writer = PostgresWriter(options, connection, prepare=True)
        self._committer = PostgresCommitter(options, connection)
        if server is not None and server.max_prepared_transactions > 0:
            self.max_transactions_per_batch = partition_limit(
                server.max_prepared_transactions, options.max_partitions
            )

    def __repr__(self) -> str:
        return _repr(self)

    # ================================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Check the server, the table and the privileges before the first batch.

        Runs on
            the driver.
        Called
            once per run of the query, before recovery.
        Idempotent
            yes: reads, plus ``PREPARE``/``ROLLBACK PREPARED`` of an empty probe
            transaction when the server looks unable to prepare.
        On failure
            the batch fails before anything is written. ConfigurationError
            when the server cannot prepare (with its own hint), the table is
            missing, a privilege is missing or the identity is too long;
            RetriableError when the server is unreachable.

        Parameters
        ----------
        context
            The sink identity and query ids.
        """
        where: dict[str, Any] = {"sink": self.name}
        check_identity(context.identity)
        server = self._committer.server(**where)
        if server.max_prepared_transactions == 0:
            self._committer.probe_prepare(
                f"{GID_PREFIX}probe:{uuid.uuid4().hex}", **where
            )  # raises with the server's message and hint
        options = self.options
        if options.max_partitions is not None and (
            options.max_partitions > server.max_prepared_transactions
        ):
            raise ConfigurationError(
                f"max_partitions={options.max_partitions} is more than the server's "
                f"max_prepared_transactions={server.max_prepared_transactions}",
                setting="max_partitions",
                **where,
            )
        self.max_transactions_per_batch = partition_limit(
            server.max_prepared_transactions, options.max_partitions
        )
        self._committer.check_target(coordinated=True, **where)
        stale = self._committer.stale_prepared(context.identity, 600.0, **where)
        if stale:
            _log.warning(
                "sink %s: %d prepared transaction(s) of other twophase sinks are older than "
                "10 minutes (%s%s); they hold locks and slots and block VACUUM. If their "
                "queries are gone (a reset checkpoint), roll them back by hand: see "
                "docs/jdbc.md",
                self.name,
                len(stale),
                ", ".join(stale[:3]),
                ", ..." if len(stale) > 3 else "",
            )
        _log.debug(
            "sink %s: opened on %s (PostgreSQL %s, max_prepared_transactions=%d, %d in use); "
            "at most %d partitions per batch",
            self.name,
            self.connection.describe(),
            server.describe_version(),
            server.max_prepared_transactions,
            server.prepared_in_use,
            self.max_transactions_per_batch,
        )

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Create the table if asked, then check the batch schema against it.

        Runs on
            the driver.
        Called
            once per batch, before phase 1.
        Idempotent
            yes (``CREATE TABLE IF NOT EXISTS`` is the only write, and only
            with ``create_table=True``).
        On failure
            ConfigurationError naming the column: the batch fails with
            nothing written.

        Parameters
        ----------
        schema
            The batch's Arrow schema.
        batch_id
            The batch.
        """
        self._committer.check_schema(schema, sink=self.name, batch_id=batch_id)

    def commit(self, handle: PostgresHandle) -> None:
        """``COMMIT PREPARED`` one partition's transaction.

        Runs on
            the driver, in phase 2 (one pooled connection for the whole phase).
        Called
            once per handle of a decided batch; again after a transient
            failure or a restart (:meth:`recover_and_commit`).
        Idempotent
            yes. When the gid is no longer prepared, the transaction's xid
            (kept in the handle) tells: committed -> success; rolled back ->
            FatalError (the rows are lost: someone rolled back a decided
            transaction by hand); the server no longer knows -> taken as
            committed, with a warning, because a decided transaction is never
            rolled back by twophase.
        On failure
            RetriableError (server unreachable or restarting) is retried by
            the coordinator with backoff; anything else fails the batch and
            the next start finishes it.

        Parameters
        ----------
        handle
            The handle from :meth:`pre_commit`.
        """
        outcome = self._committer.commit_prepared(
            handle.transaction_id, handle.xid, **_context(handle, self.name)
        )
        if outcome != "committed":
            _log.info("sink %s: %s was %s", self.name, handle.transaction_id, outcome)

    def list_in_doubt(self, context: RecoveryContext) -> Sequence[PostgresHandle]:
        """List this sink's prepared transactions, from ``pg_prepared_xacts``.

        Runs on
            the driver at recovery and after phase 2; on an executor when a
            task is retried.
        Called
            as above.
        Idempotent
            yes (read only). Only gids of exactly ``context.identity``, in the
            sink's database, are returned.
        On failure
            the batch fails before anything is written.

        Parameters
        ----------
        context
            The sink identity.

        Returns
        -------
        sequence of PostgresHandle
            One per prepared transaction (without xid).
        """
        return [
            PostgresHandle(gid, batch, partition, attempt)
            for gid, batch, partition, attempt in self._committer.list_prepared(
                context.identity, sink=self.name
            )
        ]

    def recover_and_abort(self, handle: PostgresHandle) -> None:
        """``ROLLBACK PREPARED`` a transaction no commit decision names.

        Runs on
            the driver at recovery and after phase 2; on an executor when a
            retried task clears an earlier attempt's transaction.
        Called
            once per orphan.
        Idempotent
            yes: an unknown gid (already rolled back or committed) is success.
        On failure
            the batch fails before writing; the orphan keeps its locks until
            the next attempt.

        Parameters
        ----------
        handle
            The in-doubt transaction.
        """
        if parse_gid(handle.transaction_id) is None:
            raise ConfigurationError(
                f"{handle.transaction_id!r} is not a gid of this connector",
                **_context(handle, self.name),
            )
        self._writer.rollback_prepared(handle.transaction_id, **_context(handle, self.name))

    # ============================================ participant hooks (executor)
    def begin_transaction(self, context: TaskContext) -> PostgresTransaction:
        """Take a pooled connection, ``BEGIN`` and read the table's columns.

        Runs on
            an executor.
        Called
            once per non-empty partition per task attempt.
        Idempotent
            not required (each attempt has its own gid).
        On failure
            the task fails (nothing was written); Spark retries it if allowed.

        Parameters
        ----------
        context
            The task.

        Returns
        -------
        PostgresTransaction
            The open transaction.
        """
        return self._writer.begin(context)

    def write(self, txn: PostgresTransaction, batch: pa.RecordBatch) -> None:
        """``COPY`` the rows into the table (append) or the staging table (upsert/CDC).

        Runs on
            an executor.
        Called
            zero or more times per transaction.
        Idempotent
            no; the transaction is rolled back on any failure.
        On failure
            DataError (NOT NULL, too long, bad value, naming the column),
            ConfigurationError (schema changed), RetriableError (connection);
            the framework calls :meth:`abort` and fails the task.

        Parameters
        ----------
        txn
            The transaction.
        batch
            The rows.
        """
        self._writer.write(txn, batch)

    def pre_commit(self, txn: PostgresTransaction) -> PostgresHandle:
        """Merge (upsert/CDC), then ``PREPARE TRANSACTION`` the partition's work.

        Runs on
            an executor.
        Called
            once per transaction after the last write.
        Idempotent
            no.
        On failure
            the framework calls :meth:`abort`. When every slot is taken the
            error is a ConfigurationError naming ``max_prepared_transactions``.

        Parameters
        ----------
        txn
            The transaction.

        Returns
        -------
        PostgresHandle
            The gid and xid, recorded in the commit decision.
        """
        self._writer.finish(txn)
        self._writer.prepare_transaction(txn)
        c = txn.context
        return PostgresHandle(txn.gid, c.batch_id, c.partition_id, c.attempt, txn.xid, txn.rows)

    def abort(self, txn: PostgresTransaction) -> None:
        """Roll back the transaction: ``ROLLBACK`` if open, ``ROLLBACK PREPARED`` if prepared.

        Runs on
            an executor.
        Called
            when a hook after ``begin_transaction`` failed.
        Idempotent
            yes.
        On failure
            the error is attached to the original one; a transaction left
            prepared is found by :meth:`list_in_doubt` and rolled back later.

        Parameters
        ----------
        txn
            The transaction.
        """
        self._writer.rollback(txn)


class PostgresMarkerSink(MarkerCommitSink[PostgresTransaction, PostgresHandle]):
    """Exactly-once into PostgreSQL without prepared transactions (protocol B).

    For servers with ``max_prepared_transactions = 0`` (PostgreSQL's default,
    and most managed services). Every partition commits its own transaction on
    its executor, with a row in the marker table that records the partition's
    fingerprint. A batch replayed after a failure writes only the partitions
    whose marker is missing; if the replayed rows differ from those committed,
    it stops with :class:`~twophase.errors.NondeterministicBatchError` (or use
    ``staging=True``). Readers can see a batch's partitions commit one by one.

    Picklable; build it with :func:`postgres_sink`.

    Parameters
    ----------
    name
        The sink name.
    options
        What to write and how.
    connection
        Connection parameters.
    staging
        Stage each batch in the checkpoint first, so that replays are
        deterministic even when the pipeline is not.
    checkpoint_location, retry, history
        See :class:`twophase.MarkerCommitSink`.
    """

    def __init__(
        self,
        name: str,
        options: PostgresOptions,
        connection: ConnectionConfig,
        *,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
        history: int = 100,
    ) -> None:
        super().__init__(
            name,
            staging=staging,
            checkpoint_location=checkpoint_location,
            retry=retry,
            history=history,
        )
        self.options = options
        self.connection = connection
        self.max_transactions_per_batch = options.max_partitions
        self._writer = PostgresWriter(options, connection, prepare=False)
        self._committer = PostgresCommitter(options, connection)

    def __repr__(self) -> str:
        return _repr(self)

    # ================================================ coordinator hooks (driver)
    def open(self, context: SinkContext) -> None:
        """Check the table and privileges; create the marker table; prune old markers.

        Runs on
            the driver.
        Called
            once per run of the query, before recovery.
        Idempotent
            yes (``CREATE TABLE IF NOT EXISTS``; pruning keeps the markers of
            the last ``marker_retention`` batches of this identity).
        On failure
            the batch fails before anything is written.

        Parameters
        ----------
        context
            The sink identity and query ids.
        """
        where: dict[str, Any] = {"sink": self.name}
        check_identity(context.identity)
        self._committer.check_target(coordinated=False, **where)
        self._committer.ensure_marker_table(context.identity, **where)

    def check_schema(self, schema: pa.Schema, batch_id: int) -> None:
        """Create the table if asked, then check the batch schema against it.

        Runs on
            the driver.
        Called
            once per batch, before anything is written.
        Idempotent
            yes.
        On failure
            ConfigurationError naming the column; nothing is written.

        Parameters
        ----------
        schema
            The batch's Arrow schema.
        batch_id
            The batch.
        """
        self._committer.check_schema(schema, sink=self.name, batch_id=batch_id)

    def read_markers(self, identity: str, batch_id: int) -> Sequence[Marker]:
        """Read the committed markers of one batch from the marker table.

        Runs on
            the driver when a started batch is replayed; on an executor when a
            task is retried.
        Called
            before anything of the batch is written.
        Idempotent
            yes (read only; only committed rows are visible).
        On failure
            the batch fails with nothing written.

        Parameters
        ----------
        identity
            The sink identity.
        batch_id
            The batch.

        Returns
        -------
        sequence of Marker
            One per committed partition transaction.
        """
        return self._committer.read_markers(identity, batch_id, sink=self.name)

    def list_in_doubt(self, context: RecoveryContext) -> Sequence[PostgresHandle]:
        """Return nothing: a local transaction never outlives its connection.

        Runs on
            the driver at recovery.
        Called
            once per run when a batch was left unfinished.
        Idempotent
            yes.
        On failure
            cannot fail.

        Parameters
        ----------
        context
            The sink identity.

        Returns
        -------
        sequence of PostgresHandle
            ``[]``: a transaction whose session died was rolled back by the
            server; one that committed is recorded by its marker.
        """
        return []

    def recover_and_abort(self, handle: PostgresHandle) -> None:
        """Roll back a transaction if it is still live in this process.

        Runs on
            wherever the framework calls it (it never does for this sink,
            because :meth:`list_in_doubt` is empty).
        Called
            at most once per handle.
        Idempotent
            yes.
        On failure
            raises FatalError if the transaction committed (its marker is
            there): a committed local transaction cannot be rolled back.
            Otherwise the transaction died with its session and there is
            nothing to do.

        Parameters
        ----------
        handle
            The transaction.
        """
        txn = live_transaction(handle.transaction_id, remove=True)
        if txn is not None:
            self._writer.rollback(txn)
            return
        parsed = parse_gid(handle.transaction_id)
        if parsed is None:
            raise ConfigurationError(
                f"{handle.transaction_id!r} is not a transaction id of this connector",
                sink=self.name,
                batch_id=handle.batch_id,
            )
        if self._committer.marker_exists(
            parsed.identity, parsed.batch_id, parsed.partition_id, parsed.attempt, sink=self.name
        ):
            raise FatalError(
                f"{handle.transaction_id} is committed (its marker is in "
                f"{self.options.marker_table}) and cannot be rolled back",
                **_context(handle, self.name),
            )
        _log.debug("%s is not live and not committed: nothing to roll back", handle.transaction_id)

    # ============================================ participant hooks (executor)
    def begin_transaction(self, context: TaskContext) -> PostgresTransaction:
        """Take a pooled connection, ``BEGIN`` and read the table's columns.

        Runs on
            an executor.
        Called
            once per non-empty partition per task attempt that is not skipped.
        Idempotent
            not required.
        On failure
            the task fails; Spark retries it if allowed.

        Parameters
        ----------
        context
            The task.

        Returns
        -------
        PostgresTransaction
            The open transaction.
        """
        return self._writer.begin(context)

    def write(self, txn: PostgresTransaction, batch: pa.RecordBatch) -> None:
        """``COPY`` the rows into the table (append) or a temporary table (upsert/CDC).

        Runs on
            an executor.
        Called
            zero or more times per transaction.
        Idempotent
            no; the transaction is rolled back on any failure.
        On failure
            DataError naming the column, ConfigurationError, RetriableError;
            the framework calls :meth:`abort` and fails the task.

        Parameters
        ----------
        txn
            The transaction.
        batch
            The rows.
        """
        self._writer.write(txn, batch)

    def write_marker(self, txn: PostgresTransaction, marker: Marker) -> None:
        """Insert the marker row into the marker table, in the partition's transaction.

        Runs on
            an executor.
        Called
            once per transaction, after the last write, before :meth:`pre_commit`.
        Idempotent
            no (the marker table's primary key refuses the same marker twice).
        On failure
            the framework calls :meth:`abort` and fails the task.

        Parameters
        ----------
        txn
            The transaction.
        marker
            The marker.
        """
        self._writer.write_marker(txn, marker)

    def pre_commit(self, txn: PostgresTransaction) -> PostgresHandle:
        """Merge (upsert/CDC) and keep the transaction open for :meth:`commit`.

        Runs on
            an executor.
        Called
            once per transaction, after :meth:`write_marker`.
        Idempotent
            no.
        On failure
            the framework calls :meth:`abort`.

        Parameters
        ----------
        txn
            The transaction.

        Returns
        -------
        PostgresHandle
            Names the transaction; :meth:`commit` finds it by its id.
        """
        self._writer.finish(txn)
        self._writer.register(txn)
        c = txn.context
        return PostgresHandle(txn.gid, c.batch_id, c.partition_id, c.attempt, None, txn.rows)

    def commit(self, handle: PostgresHandle) -> None:
        """``COMMIT`` the partition's transaction, on the executor that wrote it.

        Runs on
            the executor, right after :meth:`pre_commit`.
        Called
            once per transaction.
        Idempotent
            yes: a transaction that is no longer live here is looked up by its
            marker; present means committed (success).
        On failure
            when the connection breaks during ``COMMIT``, the marker tells the
            outcome: present -> success; absent -> RetriableError and the task
            is retried. Other errors fail the task (the framework aborts).

        Parameters
        ----------
        handle
            The handle from :meth:`pre_commit`.
        """
        parsed = parse_gid(handle.transaction_id)
        if parsed is None:
            raise ConfigurationError(
                f"{handle.transaction_id!r} is not a transaction id of this connector",
                sink=self.name,
                batch_id=handle.batch_id,
            )
        where = _context(handle, self.name)

        def marker_exists() -> bool:
            return self._committer.marker_exists(
                parsed.identity,
                parsed.batch_id,
                parsed.partition_id,
                parsed.attempt,
                **where,
            )

        txn = live_transaction(handle.transaction_id, remove=False)
        if txn is None:
            if marker_exists():
                return
            raise FatalError(
                f"{handle.transaction_id} is neither live in this process nor committed: "
                "commit() must run on the executor right after pre_commit()",
                **where,
            )
        try:
            self._writer.commit_local(txn, marker_exists)
        finally:
            live_transaction(handle.transaction_id, remove=True)

    def abort(self, txn: PostgresTransaction) -> None:
        """``ROLLBACK`` the transaction and give the connection back.

        Runs on
            an executor.
        Called
            when a hook after ``begin_transaction`` failed.
        Idempotent
            yes.
        On failure
            the error is attached to the original one; the session is closed,
            which rolls the transaction back anyway.

        Parameters
        ----------
        txn
            The transaction.
        """
        self._writer.rollback(txn)


#: Either PostgreSQL sink, as returned by :func:`postgres_sink`.
PostgresSink = PostgresTwoPhaseSink | PostgresMarkerSink


def postgres_sink(
    name: str,
    *,
    table: str | tuple[str, str],
    dsn: str | None = None,
    mode: WriteMode = "append",
    key_columns: Sequence[str] = (),
    cdc_op_column: str = "op",
    order_column: str | None = None,
    protocol: Protocol = "auto",
    create_table: bool = False,
    marker_table: str | tuple[str, str] = "twophase_markers",
    marker_retention: int = 100,
    lock_timeout: float = 30.0,
    statement_timeout: float = 600.0,
    idle_in_transaction_timeout: float = 600.0,
    connect_timeout: int = 10,
    max_partitions: int | None = None,
    merge_schema: str | None = None,
    staging: bool = False,
    checkpoint_location: str | None = None,
    retry: RetryPolicy | None = None,
    history: int = 100,
    **connect_params: str | int,
) -> PostgresTwoPhaseSink | PostgresMarkerSink:
    """Build an exactly-once PostgreSQL sink, choosing the protocol from the server.

    Runs on the driver, once, before the query starts. With
    ``protocol="auto"`` it connects once and reads ``max_prepared_transactions``:
    above 0 it returns a :class:`PostgresTwoPhaseSink` (protocol A), else a
    :class:`PostgresMarkerSink` (protocol B), and logs the choice. Pin the
    protocol in production: a server reconfigured between two runs of one
    query would otherwise switch protocols under the same checkpoint.

    Parameters
    ----------
    name
        Sink name, part of every transaction id (1-64 characters of
        ``[A-Za-z0-9_.-]``).
    table
        Target table: ``"events"``, ``"schema.events"`` or
        ``("schema", "events")``. Exact, case-sensitive names.
    dsn
        libpq connection string or URI. Any libpq keyword can also be passed
        as a keyword argument (``host``, ``port``, ``dbname``, ``user``,
        ``password``, ``sslmode``, ``sslrootcert``...); keywords win.
    mode
        ``"append"`` (COPY into the table), ``"upsert"`` (``INSERT ... ON
        CONFLICT (key_columns) DO UPDATE``), or ``"cdc"`` (Debezium-style
        changes: ``c``/``r``/``u`` upsert the row, ``d`` deletes the key).
    key_columns
        Upsert and CDC: the key. A unique index on exactly these columns must
        exist (``create_table=True`` makes them the primary key). Rows of one
        key must all be in one partition: ``df.repartition(*key_columns)``.
    cdc_op_column
        CDC: the column holding the operation; it is not written to the table.
    order_column
        Upsert and CDC: among rows of one key in one batch, the one with the
        largest value wins (NULLs lose); without it, the last row of the
        partition wins.
    protocol
        ``"auto"``, ``"coordinated"`` (A; fails at once, with the server's
        hint, if the server cannot prepare) or ``"markers"`` (B).
    create_table
        Create the table from the first batch's schema if it does not exist
        (see the type mapping in ``docs/jdbc.md``).
    marker_table
        Protocol B: the marker table (created when missing).
    marker_retention
        Protocol B: keep markers of this many recent batches per sink identity.
    lock_timeout, statement_timeout, idle_in_transaction_timeout
        Server-side timeouts (seconds; 0 disables) so that nothing waits forever.
    connect_timeout
        Seconds to wait for a connection.
    max_partitions
        Upper bound on transactions per batch (the batch is coalesced to it).
        Protocol A's default leaves a quarter of ``max_prepared_transactions``
        free.
    merge_schema
        Protocol A, upsert/CDC: schema for the per-transaction unlogged
        staging tables (default: the table's schema). The user needs CREATE
        on it.
    staging
        Protocol B only: stage each batch in the checkpoint so that replays
        are deterministic (see :class:`twophase.MarkerCommitSink`).
    checkpoint_location, retry, history
        See :class:`twophase.TwoPhaseCommitSink`.
    **connect_params
        libpq keywords.

    Returns
    -------
    PostgresTwoPhaseSink or PostgresMarkerSink
        The sink; pass it to ``foreachBatch``.

    Raises
    ------
    ConfigurationError
        An option is invalid, or ``protocol="coordinated"`` on a server that
        cannot prepare.
    RetriableError
        The server cannot be reached to detect its capabilities
        (``protocol="auto"``/``"coordinated"``).

    Examples
    --------
    >>> sink = postgres_sink(  # doctest: +SKIP
    ...     "orders", table="public.orders", dsn="host=db dbname=shop user=etl",
    ...     mode="upsert", key_columns=["order_id"])
    >>> df.repartition("order_id").writeStream.foreachBatch(sink).start()  # doctest: +SKIP
    """
    if protocol not in ("auto", "coordinated", "markers"):
        raise ConfigurationError(
            f"protocol must be 'auto', 'coordinated' or 'markers'; got {protocol!r}",
            setting="protocol",
        )
    options = PostgresOptions(
        table=QualifiedName.parse(table, "table"),
        mode=mode,
        key_columns=tuple(key_columns),
        cdc_op_column=cdc_op_column,
        order_column=order_column,
        create_table=create_table,
        marker_table=QualifiedName.parse(marker_table, "marker_table"),
        marker_retention=marker_retention,
        lock_timeout=lock_timeout,
        statement_timeout=statement_timeout,
        idle_in_transaction_timeout=idle_in_transaction_timeout,
        connect_timeout=connect_timeout,
        max_partitions=max_partitions,
        merge_schema=merge_schema,
        application_name=f"twophase:{name}"[:63],
    )
    connection = ConnectionConfig(dsn, **connect_params)
    common: dict[str, Any] = {
        "checkpoint_location": checkpoint_location,
        "retry": retry,
        "history": history,
    }
    if protocol == "markers":
        _log.info("sink %s: protocol 'markers' (forced) on %s", name, connection.describe())
        return PostgresMarkerSink(name, options, connection, staging=staging, **common)
    committer = PostgresCommitter(options, connection)
    server = committer.server(sink=name)
    if server.max_prepared_transactions == 0:
        if protocol == "coordinated":
            committer.probe_prepare(f"{GID_PREFIX}probe:{uuid.uuid4().hex}", sink=name)
        _log.info(
            "sink %s: PostgreSQL %s at %s has max_prepared_transactions=0: using protocol "
            "'markers' (per-partition commit with markers in %s)",
            name,
            server.describe_version(),
            connection.describe(),
            options.marker_table,
        )
        return PostgresMarkerSink(name, options, connection, staging=staging, **common)
    limit = partition_limit(server.max_prepared_transactions, max_partitions)
    _log.info(
        "sink %s: PostgreSQL %s at %s has max_prepared_transactions=%d: using protocol "
        "'coordinated' (PREPARE TRANSACTION), at most %d partitions per batch",
        name,
        server.describe_version(),
        connection.describe(),
        server.max_prepared_transactions,
        limit,
    )
    if staging:
        _log.info("sink %s: staging=True has no effect with protocol 'coordinated'", name)
    return PostgresTwoPhaseSink(name, options, connection, server=server, **common)

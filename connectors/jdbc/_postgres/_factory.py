"""The one constructor users need: :func:`postgres_sink` picks the protocol from the server."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._factory import SinkOptions, build_sink, options_signature
from ._dialect import POSTGRES, POSTGRES_SINKS, PostgresMarkerSink, PostgresTwoPhaseSink

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["PostgresOptions", "postgres_sink"]


class PostgresOptions(SinkOptions, total=False):
    """:func:`postgres_sink`'s keywords: the family's, ``merge_schema`` and libpq's usual ones.

    Any other keyword libpq takes is accepted too (libpq is asked); type
    checkers know these.
    """

    merge_schema: str | None
    host: str
    hostaddr: str
    port: str | int
    dbname: str
    user: str
    password: str
    passfile: str
    options: str
    application_name: str
    sslmode: str
    sslrootcert: str
    sslcert: str
    sslkey: str
    sslpassword: str
    sslcrl: str
    target_session_attrs: str
    keepalives: str | int
    keepalives_idle: str | int
    keepalives_interval: str | int
    keepalives_count: str | int
    tcp_user_timeout: str | int
    gssencmode: str
    service: str


@options_signature("merge_schema")
def postgres_sink(
    name: str,
    *,
    table: str | tuple[str, str],
    dsn: str | None = None,
    **options: Unpack[PostgresOptions],
) -> PostgresTwoPhaseSink | PostgresMarkerSink:
    """Build an exactly-once PostgreSQL sink, choosing the protocol from the server.

    Runs on the driver, once, before the query starts. With
    ``protocol="auto"`` it connects once and reads ``max_prepared_transactions``:
    above 0 it returns a :class:`PostgresTwoPhaseSink` (``coordinated``), else a
    :class:`PostgresMarkerSink` (``markers``), and logs the choice. Pin the
    protocol in production: a server reconfigured between two runs of one
    query would otherwise switch protocols under the same checkpoint.

    Parameters
    ----------
    name
        Sink name: 1-64 characters of ``[A-Za-z0-9_.-]``, the first a letter
        or a digit. Part of every transaction id and marker: changing it is
        like resetting the checkpoint for this sink.
    table
        Target table: ``"events"``, ``"schema.events"`` or
        ``("schema", "events")``. Exact, case-sensitive names (never folded);
        use the tuple form when a name contains a dot.
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
        exist (``create_table=True`` makes them the primary key). The rows of
        a key need not be in one partition: under ``foreachBatch`` the sink
        routes every row of a key to one transaction itself (its ``key_by``, a
        shuffle of the batch), in the batch's order, so ``repartition`` by key
        upstream is not needed. ``format("twophase-postgres")`` cannot route,
        so it refuses upsert and CDC.
    cdc_op_column
        CDC: the column holding the operation; it is not written to the table.
    order_column
        Upsert and CDC: among rows of one key in one batch, the one with the
        largest value wins (NULLs lose); without it, the last row of the key
        in the batch's order wins.
    protocol
        ``"auto"``, ``"coordinated"`` (fails at once, with the server's
        hint, if the server cannot prepare) or ``"markers"`` (the commit
        protocols: ``docs/protocol.md``).
    create_table
        Create the table from the first batch's schema if it does not exist:
        the key columns become its primary key, and they and the non-nullable
        Spark fields are NOT NULL (the type mapping is in ``docs/jdbc.md``).
    schema_evolution
        ``"none"`` (a batch column the table lacks fails the batch) or
        ``"add_columns"``: before each batch the driver adds such a column as
        a nullable column of the mapped type (``ALTER TABLE ... ADD COLUMN IF
        NOT EXISTS``, waiting at most ``lock_timeout``; the sink's user must
        own the table, checked when the sink opens). Never a drop, a rename or a type change; a key
        column, a type without a mapping, a name differing only in case are
        refused by name. A table column the batch lacks gets NULL or its
        default in either case ("Schema changes" in ``docs/jdbc.md``).
    bad_rows
        ``"fail"`` (a row the table refuses fails the batch with a
        ``DataError`` naming the column) or ``"dead_letter"`` (append mode):
        the row is set aside in ``dead_letter_table``, in the same transaction
        as the batch's good rows, so a replay rewrites or skips both. Only a
        row's own error is set aside (NOT NULL, too long, a bad value, unique,
        foreign key, check: the SQLSTATEs in "Dead letters", ``docs/jdbc.md``);
        a missing table or column, a privilege, a lost connection still fail
        the batch. A clean record batch costs one ``SAVEPOINT``; a refused
        one is split in halves under savepoints until its bad rows stand alone.
    dead_letter_table
        Where ``bad_rows="dead_letter"`` sets rows aside (``"table"``,
        ``"schema.table"`` or a tuple); default: ``<table>_dead_letters`` in
        the table's schema. Created when missing (CREATE on its schema, once),
        with the layout of "Dead letters" in ``docs/jdbc.md``.
    max_bad_rows
        The most rows one batch may set aside; one more fails the batch with
        a ``DataError`` giving the count and the first errors (many bad rows
        usually mean the table changed).
    marker_table
        Markers protocol: the marker table, created when missing (CREATE on
        its schema, once). The coordinated protocol's ``twophase_fences`` and
        ``twophase_commits`` tables go into its schema.
    marker_retention
        Markers protocol: keep markers of this many recent batches per sink
        identity ("Marker table" in ``docs/jdbc.md``).
    lock_timeout
        Seconds; set on every session: no statement waits longer than this
        for a lock (0 disables).
    statement_timeout
        Seconds; set on every session: bounds one ``COPY`` or merge (raise it
        for huge batches; 0 disables).
    idle_in_transaction_timeout
        Seconds; the server ends a session that sits inside a transaction
        longer than this (a hung executor). Prepared transactions are not
        affected (0 disables).
    connect_timeout
        Seconds to wait for a connection (libpq's ``connect_timeout``, unless
        given as a libpq keyword).
    network_timeout
        Seconds a connection may stay silent (no answer, not even to TCP
        keepalive probes) before the step fails with a
        :class:`~twophase.errors.RetriableError` naming the server; a network
        partition shorter than this is a pause. Applied on executors and the
        driver; libpq's own ``keepalives*`` and ``tcp_user_timeout`` keywords win
        where given. 0: the operating system's defaults (hours). See "Network
        failures" in ``docs/guarantees.md``.
    max_partitions
        Upper bound on transactions per batch (the batch is coalesced to it).
        Coordinated protocol: by default this sink's share of the three
        quarters of ``max_prepared_transactions`` not kept free, divided
        among the coordinated sinks active on the server when the sink opens;
        more than ``max_prepared_transactions`` is refused at open. See
        "Sizing max_prepared_transactions" in ``docs/jdbc.md``. Markers
        protocol: no bound by default.
    merge_schema
        Coordinated protocol, upsert/CDC: schema for the per-transaction unlogged
        staging tables (default: the table's schema). The user needs CREATE
        on it.
    staging
        Markers protocol only: stage each batch in the checkpoint so that replays
        are deterministic (see :class:`twophase.MarkerCommitSink`).
    checkpoint_location
        The query's checkpoint location; optional: found from the running
        query when omitted, checked against it when given.
    retry
        Backoff of the driver's commit steps that fail transiently (a
        :class:`twophase.RetryPolicy`; its defaults when omitted).
    **connect_params
        libpq keywords (``host``, ``port``, ``dbname``, ``user``,
        ``password``, ``sslmode``, ``target_session_attrs``,
        ``keepalives_idle``...), passed through unchanged; they win over the
        DSN. A keyword that is neither an option above nor libpq's is refused
        by name, with the closest valid one.

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
    >>> df.writeStream.foreachBatch(sink).option(  # doctest: +SKIP
    ...     "checkpointLocation", "/chk/orders").start()
    """
    return build_sink(POSTGRES, POSTGRES_SINKS, name, table, dsn, options)

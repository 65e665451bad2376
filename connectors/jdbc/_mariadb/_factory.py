"""The one constructor MariaDB users need: :func:`mariadb_sink`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._factory import SinkOptions, build_sink, options_signature
from ._dialect import MARIADB, MARIADB_SINKS, MariaDBMarkerSink, MariaDBTwoPhaseSink

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["MariaDBOptions", "mariadb_sink"]


class MariaDBOptions(SinkOptions, total=False):
    """:func:`mariadb_sink`'s keywords: the family's and PyMySQL's (no other is taken)."""

    host: str
    port: str | int
    user: str
    password: str
    database: str
    unix_socket: str
    ssl_ca: str
    ssl_cert: str
    ssl_key: str
    ssl_verify_cert: str | int
    ssl_verify_identity: str | int
    ssl_disabled: str | int
    read_timeout: str | int
    write_timeout: str | int


@options_signature()
def mariadb_sink(
    name: str,
    *,
    table: str | tuple[str, str],
    url: str | None = None,
    **options: Unpack[MariaDBOptions],
) -> MariaDBTwoPhaseSink | MariaDBMarkerSink:
    """Build an exactly-once MariaDB sink (MariaDB 10.5 or newer; not MySQL).

    Runs on the driver, once, before the query starts; it does not connect
    (the sink checks the server and the table when the query starts). MySQL
    is not supported, and MariaDB before 10.5 neither: the first connection
    refuses them by name with a :class:`~twophase.errors.ConfigurationError`
    (``setting='url'``); see ``docs/mariadb.md``.

    Parameters
    ----------
    name
        Sink name: 1-64 characters of ``[A-Za-z0-9_.-]``, the first a letter
        or a digit. Part of the sink identity (hence of every XA transaction
        id and marker): changing it is like resetting the checkpoint for this
        sink.
    table
        Target table: ``"events"`` (in the connection's database),
        ``"db.events"`` or ``("db", "events")``. It must be InnoDB: a MyISAM
        or Aria table has no transactions, and is refused.
    url
        ``mysql://user:password@host:port/database`` (or ``mariadb://``), with
        optional query parameters (``?ssl_ca=/path/ca.pem``). Keywords win:
        ``host``, ``port``, ``user``, ``password``, ``database``,
        ``unix_socket``, ``ssl_ca``, ``ssl_cert``, ``ssl_key``,
        ``ssl_verify_cert``, ``ssl_verify_identity``, ``ssl_disabled``,
        ``read_timeout``, ``write_timeout``. The URL is never printed (it may
        hold the password).
    mode
        ``"append"`` (``LOAD DATA LOCAL INFILE``, or multi-row ``INSERT`` on a
        server with ``local_infile=OFF``), ``"upsert"`` (``INSERT ... ON
        DUPLICATE KEY UPDATE``) or ``"cdc"`` (Debezium-style changes: ``c``/``r``/``u``
        upsert the row, ``d`` deletes the key).
    key_columns
        Upsert and CDC: the key. A unique index on exactly these columns must
        exist (``create_table=True`` makes them the primary key), and no other
        unique index (``ON DUPLICATE KEY`` would match on it too). The rows
        of a key need not be in one partition: under ``foreachBatch`` the sink
        routes every row of a key to one transaction itself (its ``key_by``, a
        shuffle of the batch), in the batch's order. ``format(...)`` cannot
        route, so it refuses upsert and CDC.
    cdc_op_column
        CDC: the column holding the operation; it is not written to the table.
    order_column
        Upsert and CDC: among rows of one key in one batch, the one with the
        largest value wins (NULLs lose); without it, the last row of the key
        in the batch's order wins.
    protocol
        ``"auto"`` (the default: MariaDB cannot turn XA off, so it is the
        coordinated protocol) and ``"coordinated"``: XA transactions, prepared
        on the executors and committed by the driver (a batch is visible
        entirely or not at all). ``"markers"``: every partition commits on its executor
        with a marker row (for servers or users that cannot use XA).
    create_table
        Create the table from the first batch's schema if it does not exist.
    schema_evolution
        ``"none"`` or ``"add_columns"``, as for
        :func:`~twophase.connectors.jdbc.postgres_sink`: ``ALTER TABLE ...
        WAIT <lock_timeout> ADD COLUMN IF NOT EXISTS`` (the user needs ALTER
        on the table).
    bad_rows
        ``"fail"`` or ``"dead_letter"`` (append mode), as for
        :func:`~twophase.connectors.jdbc.postgres_sink`: a refused row is set
        aside in ``dead_letter_table`` in the batch's transaction (an XA
        transaction takes savepoints too); the error numbers that count as a
        row's are in "Dead letters", ``docs/jdbc.md``.
    dead_letter_table
        Default ``<table>_dead_letters`` in the table's database; created when
        missing (the row column is ``LONGTEXT`` checked by ``JSON_VALID``).
    max_bad_rows
        The most rows one batch may set aside before it fails.
    marker_table
        The marker table (markers protocol), created when missing. The
        coordinated protocol's fence tables (``twophase_fences``,
        ``twophase_prepared``) and the markers protocol's registry of attempts
        (``twophase_attempts``) go into its database.
    marker_retention
        Markers protocol: keep markers of this many recent batches per sink identity.
    lock_timeout
        Seconds; ``innodb_lock_wait_timeout`` of every session, rounded up to
        whole seconds.
    statement_timeout
        Seconds; ``max_statement_time`` of every session (0 disables it).
    idle_in_transaction_timeout
        Seconds; ``idle_transaction_timeout`` of every session (0 disables it).
    connect_timeout
        Seconds to wait for a connection.
    network_timeout
        Seconds a connection may stay silent (no answer, not even to TCP
        keepalive probes) before the step fails with a
        :class:`~twophase.errors.RetriableError` naming the server; a network
        partition shorter than this is a pause. Applied on executors and the
        driver, on PyMySQL's socket (PyMySQL's ``read_timeout`` and
        ``write_timeout`` keywords apply as well where given). 0: the
        operating system's defaults (hours). See "Network failures" in
        ``docs/guarantees.md``.
    max_partitions
        Upper bound on transactions per batch (the batch is coalesced to it);
        MariaDB has no limit on prepared transactions of its own.
    staging, checkpoint_location, retry
        As for :func:`~twophase.connectors.jdbc.postgres_sink`.
    **connect_params
        Connection keywords (those listed under ``url``); any other keyword is
        refused by name, with the closest valid one.

    Returns
    -------
    MariaDBTwoPhaseSink or MariaDBMarkerSink
        The sink; pass it to ``foreachBatch``.

    Raises
    ------
    ConfigurationError
        An option is invalid, naming it.

    Examples
    --------
    >>> sink = mariadb_sink(  # doctest: +SKIP
    ...     "orders", table="shop.orders", url="mysql://etl@db:3306/shop")
    >>> df.writeStream.foreachBatch(sink).start()  # doctest: +SKIP
    """
    return build_sink(MARIADB, MARIADB_SINKS, name, table, url, options)

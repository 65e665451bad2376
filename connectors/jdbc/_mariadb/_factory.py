"""The one constructor MariaDB users need: :func:`mariadb_sink`."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from twophase import RetryPolicy
from twophase.errors import ConfigurationError

from .._config import ConnectionConfig
from .._factory import Protocol, sink_options, unused_staging
from .._options import WriteMode
from ._dbapi import check_keys, parse_url
from ._dialect import MariaDBMarkerSink, MariaDBTwoPhaseSink

__all__ = ["mariadb_sink"]

_log = logging.getLogger("twophase.connectors.jdbc")

#: MariaDB's identifier limit (64 characters; the check counts bytes).
_MAX_IDENTIFIER = 64


def mariadb_sink(
    name: str,
    *,
    table: str | tuple[str, str],
    url: str | None = None,
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
    network_timeout: float = 60.0,
    max_partitions: int | None = None,
    staging: bool = False,
    checkpoint_location: str | None = None,
    retry: RetryPolicy | None = None,
    **connect_params: str | int,
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
        Connection keywords (those listed under ``url``); any other keyword is
        refused by name.

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
    options = sink_options(
        name, protocol, locals(), database="MariaDB", max_identifier_bytes=_MAX_IDENTIFIER
    )
    try:
        params: dict[str, Any] = parse_url(url) if url else {}
        check_keys(connect_params)
        params.update({k: v for k, v in connect_params.items() if v is not None})
        connection = ConnectionConfig(None, **params)
    except ConfigurationError as exc:
        raise exc.with_context(sink=name) from None
    common: dict[str, Any] = {"checkpoint_location": checkpoint_location, "retry": retry}
    if protocol == "markers":
        _log.info("sink %s: protocol 'markers' on %s", name, connection.describe())
        return MariaDBMarkerSink(name, options, connection, staging=staging, **common)
    unused_staging(name, staging)
    _log.info("sink %s: protocol 'coordinated' (XA) on %s", name, connection.describe())
    return MariaDBTwoPhaseSink(name, options, connection, **common)

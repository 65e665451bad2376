"""The PostgreSQL dialect: psycopg2, ``COPY``, ``PREPARE TRANSACTION``; and its sinks.

It builds the four parts of :mod:`._dialect` from the PostgreSQL modules:
:class:`~._writer.PostgresWriter`, :class:`~._checks.PostgresChecker`,
:class:`~._prepared.PreparedTransactions` and :class:`~._markers.PostgresMarkerTable`.
"""

from __future__ import annotations

from twophase import RetryPolicy

from .._config import ConnectionConfig
from .._dialect import PartsDialect
from .._options import JdbcOptions
from .._sink import JdbcMarkerSink, JdbcTwoPhaseSink
from ._catalog import ServerInfo
from ._checks import PostgresChecker
from ._markers import PostgresMarkerTable
from ._prepared import PostgresHandle, PreparedTransactions
from ._slots import partition_limit
from ._transaction import PostgresTransaction
from ._writer import PostgresWriter

__all__ = [
    "POSTGRES",
    "PostgresDialect",
    "PostgresMarkerSink",
    "PostgresSink",
    "PostgresTwoPhaseSink",
]


class PostgresDialect(PartsDialect[PostgresTransaction, PostgresHandle]):
    """PostgreSQL 12 or newer (see ``docs/jdbc.md`` for the server settings).

    Its parts: ``BEGIN``, ``COPY``, merge, ``ROLLBACK``
    (:class:`~._writer.PostgresWriter`); catalog and privileges
    (:class:`~._checks.PostgresChecker`); ``pg_prepared_xacts``
    (:class:`~._prepared.PreparedTransactions`); the marker table
    (:class:`~._markers.PostgresMarkerTable`).
    """

    name = "PostgreSQL"
    instance = "POSTGRES"
    parts = (PostgresWriter, PostgresChecker, PreparedTransactions, PostgresMarkerTable)


#: The one PostgreSQL dialect object (it pickles by name).
POSTGRES = PostgresDialect()


class PostgresTwoPhaseSink(JdbcTwoPhaseSink[PostgresTransaction, PostgresHandle]):
    """Exactly-once into PostgreSQL with ``PREPARE TRANSACTION`` (``coordinated``).

    Build it with :func:`~twophase.connectors.jdbc.postgres_sink` (which
    checks the server); the constructor is public for typing and for forcing
    the protocol.

    Every partition of a micro-batch writes its rows with ``COPY`` inside one
    transaction and prepares it; once every partition has prepared, the driver
    records the decision and commits them all with ``COMMIT PREPARED``. A batch
    is either committed in full or not at all, whatever fails and whenever. A
    gid no longer prepared at commit is resolved by its xid (``txid_status``).

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
    checkpoint_location, retry
        See :class:`twophase.TwoPhaseCommitSink`.
    """

    dialect = POSTGRES

    def __init__(
        self,
        name: str,
        options: JdbcOptions,
        connection: ConnectionConfig,
        *,
        server: ServerInfo | None = None,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            options, connection, name=name, checkpoint_location=checkpoint_location, retry=retry
        )
        if server is not None and server.max_prepared_transactions > 0:
            self.max_transactions_per_batch = partition_limit(
                server.max_prepared_transactions, options.max_partitions
            )


class PostgresMarkerSink(JdbcMarkerSink[PostgresTransaction]):
    """Exactly-once into PostgreSQL without prepared transactions (``markers``).

    For servers with ``max_prepared_transactions = 0`` (PostgreSQL's default,
    and most managed services): every partition commits its own transaction,
    ``COPY`` and a marker row, on its executor. Build it with
    :func:`~twophase.connectors.jdbc.postgres_sink`.

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
    checkpoint_location, retry
        See :class:`twophase.MarkerCommitSink`.
    """

    dialect = POSTGRES

    def __init__(
        self,
        name: str,
        options: JdbcOptions,
        connection: ConnectionConfig,
        *,
        staging: bool = False,
        checkpoint_location: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        super().__init__(
            options,
            connection,
            name=name,
            staging=staging,
            checkpoint_location=checkpoint_location,
            retry=retry,
        )


#: Either PostgreSQL sink, as returned by :func:`~twophase.connectors.jdbc.postgres_sink`.
PostgresSink = PostgresTwoPhaseSink | PostgresMarkerSink

"""The PostgreSQL dialect: psycopg2, ``COPY``, ``PREPARE TRANSACTION``; and its sinks.

:class:`PostgresDialect` declares what PostgreSQL does its own way: its four
parts (:class:`~._writer.PostgresWriter`, :class:`~._checks.PostgresChecker`,
:class:`~._prepared_store.PreparedTransactions`, :class:`~._marker_table.PostgresMarkerTable`),
its identifier limit, libpq's connection keywords, and what ``protocol="auto"``
means (the server's ``max_prepared_transactions``). The family's core builds
the factory and the ``format(...)`` from it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..._context import ErrorContext
from .._config import ConnectionConfig
from .._dialect import PartsDialect
from .._factory import Choice, SinkClasses
from .._options import JdbcOptions
from .._sink import JdbcMarkerSink, JdbcTwoPhaseSink
from ._checks import PostgresChecker
from ._dbapi import LIBPQ_KEYWORDS, libpq_keyword, postgres_connection
from ._dead_letter_table import PostgresDeadLetterTable
from ._marker_table import PostgresMarkerTable
from ._prepared_capacity import partition_limit
from ._prepared_store import PostgresHandle, PreparedTransactions
from ._transaction import PostgresTransaction
from ._writer import PostgresWriter

__all__ = [
    "POSTGRES",
    "POSTGRES_SINKS",
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
    (:class:`~._prepared_store.PreparedTransactions`); the marker table
    (:class:`~._marker_table.PostgresMarkerTable`).
    """

    name = "PostgreSQL"
    instance = "POSTGRES"
    parts = (
        PostgresWriter,
        PostgresChecker,
        PreparedTransactions,
        PostgresMarkerTable,
        PostgresDeadLetterTable,
    )
    #: PostgreSQL truncates names over 63 bytes silently: they are refused.
    max_identifier_bytes = 63
    sink_options = frozenset({"merge_schema"})

    #: libpq's usual keywords, to suggest the closest to a misspelt one.
    connection_keywords = LIBPQ_KEYWORDS

    def connection(self, target: str | None, keywords: Mapping[str, object]) -> ConnectionConfig:
        """Parse the DSN (``target``) and merge libpq's keywords into it."""
        return postgres_connection(target, **keywords)

    def accepts_keyword(self, keyword: str) -> bool:
        """Tell whether the libpq linked here takes ``keyword`` (it tells, not a list)."""
        return libpq_keyword(keyword)

    def application_name(self, sink: str) -> str | None:
        """Return ``twophase:<sink>``, within PostgreSQL's 63 bytes."""
        return f"twophase:{sink}"[:63]

    def choose(
        self, requested: str, options: JdbcOptions, connection: ConnectionConfig, sink: str
    ) -> Choice:
        """Coordinated when the server can prepare (``max_prepared_transactions > 0``).

        ``auto`` connects once and reads the setting; a pinned ``coordinated``
        on a server that cannot prepare fails at once with the server's hint.
        """
        if requested == "markers":
            return Choice("markers", "forced")
        server = PostgresChecker(options, connection).server(ErrorContext(sink))
        version = f"PostgreSQL {server.describe_version()}"
        if server.max_prepared_transactions == 0:
            if requested == "coordinated":
                PreparedTransactions(options, connection).probe(ErrorContext(sink))
            return Choice(
                "markers",
                f"{version} has max_prepared_transactions=0: per-partition commit with "
                f"markers in {options.marker_table}",
            )
        limit = partition_limit(server.max_prepared_transactions, options.max_partitions)
        return Choice(
            "coordinated",
            f"{version} has max_prepared_transactions={server.max_prepared_transactions}: "
            f"PREPARE TRANSACTION, at most {limit} partitions per batch",
            limit,
        )


#: The one PostgreSQL dialect object (it pickles by name).
POSTGRES = PostgresDialect()


class PostgresTwoPhaseSink(JdbcTwoPhaseSink[PostgresTransaction, PostgresHandle]):
    """Exactly-once into PostgreSQL with ``PREPARE TRANSACTION`` (``coordinated``).

    Build it with :func:`~twophase.connectors.jdbc.postgres_sink` (which
    checks the server); the constructor (:class:`~.._sink.JdbcTwoPhaseSink`'s)
    is public for typing and for forcing the protocol. Every partition writes
    its rows with ``COPY`` and prepares; the driver commits them with ``COMMIT
    PREPARED``. A gid no longer prepared at commit is told committed or lost
    by the row its transaction wrote into ``twophase_commits``.
    """

    dialect = POSTGRES


class PostgresMarkerSink(JdbcMarkerSink[PostgresTransaction]):
    """Exactly-once into PostgreSQL without prepared transactions (``markers``).

    For servers with ``max_prepared_transactions = 0`` (PostgreSQL's default,
    and most managed services): every partition commits its own transaction,
    ``COPY`` and a marker row, on its executor. Build it with
    :func:`~twophase.connectors.jdbc.postgres_sink`.
    """

    dialect = POSTGRES


#: Either PostgreSQL sink, as returned by :func:`~twophase.connectors.jdbc.postgres_sink`.
PostgresSink = PostgresTwoPhaseSink | PostgresMarkerSink

#: The sink of each protocol, for the factory.
POSTGRES_SINKS = SinkClasses(PostgresTwoPhaseSink, PostgresMarkerSink)

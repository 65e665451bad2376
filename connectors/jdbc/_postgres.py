"""The PostgreSQL dialect: psycopg2, ``COPY``, ``PREPARE TRANSACTION``.

It builds the four parts of :mod:`._dialect` from the PostgreSQL modules:
:class:`~._writer.PostgresWriter`, :class:`~._checks.PostgresChecker`,
:class:`~._prepared.PreparedTransactions` and :class:`~._markers.MarkerTable`.
"""

from __future__ import annotations

from ._checks import PostgresChecker
from ._config import ConnectionConfig
from ._markers import MarkerTable
from ._options import JdbcOptions
from ._prepared import PreparedTransactions
from ._writer import PostgresWriter

__all__ = ["POSTGRES", "PostgresDialect"]


class PostgresDialect:
    """PostgreSQL 12 or newer (see ``docs/jdbc.md`` for the server settings).

    Attributes
    ----------
    name
        ``"PostgreSQL"``.
    """

    name = "PostgreSQL"

    def writer(
        self, options: JdbcOptions, connection: ConnectionConfig, *, prepare: bool
    ) -> PostgresWriter:
        """Return the executor side: ``BEGIN``, ``COPY``, merge, ``ROLLBACK``."""
        return PostgresWriter(options, connection, prepare=prepare)

    def checker(self, options: JdbcOptions, connection: ConnectionConfig) -> PostgresChecker:
        """Return the driver's checks (catalog and privileges)."""
        return PostgresChecker(options, connection)

    def prepared(self, options: JdbcOptions, connection: ConnectionConfig) -> PreparedTransactions:
        """Return the statements on prepared transactions (``pg_prepared_xacts``)."""
        return PreparedTransactions(options, connection)

    def markers(self, options: JdbcOptions, connection: ConnectionConfig) -> MarkerTable:
        """Return the marker table."""
        return MarkerTable(options, connection)

    def __reduce__(self) -> str:
        return "POSTGRES"


#: The one PostgreSQL dialect object (it pickles by name).
POSTGRES = PostgresDialect()

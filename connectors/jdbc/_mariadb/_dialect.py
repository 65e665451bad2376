"""The MariaDB dialect: PyMySQL, ``LOAD DATA LOCAL INFILE``, ``XA PREPARE``; and its sinks.

:class:`MariaDBDialect` declares what MariaDB does its own way: its four parts
(:class:`~._writer.MariaDBWriter`, :class:`~._checks.MariaDBChecker`,
:class:`~._prepared_store.XATransactions`, :class:`~._marker_table.MariaDBMarkerTable`), its
identifier limit, PyMySQL's connection keywords, and what ``protocol="auto"``
means (always the coordinated protocol: MariaDB cannot turn XA off). The
family's core builds the factory and the ``format(...)`` from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .._config import ConnectionConfig
from .._dialect import PartsDialect
from .._factory import Choice, SinkClasses
from .._options import JdbcOptions
from .._sink import JdbcMarkerSink, JdbcTwoPhaseSink
from ._checks import MariaDBChecker
from ._dbapi import CONNECT_KEYS, parse_url
from ._dead_letter_table import MariaDBDeadLetterTable
from ._marker_table import MariaDBMarkerTable
from ._prepared_store import MariaDBHandle, XATransactions
from ._transaction import MariaDBTransaction
from ._writer import MariaDBWriter

__all__ = [
    "MARIADB",
    "MARIADB_SINKS",
    "MariaDBDialect",
    "MariaDBMarkerSink",
    "MariaDBTwoPhaseSink",
]


class MariaDBDialect(PartsDialect[MariaDBTransaction, MariaDBHandle]):
    """MariaDB 10.5 or newer; not MySQL (see ``docs/mariadb.md``).

    Its parts: ``XA START`` or ``BEGIN``, ``LOAD DATA``/``INSERT``, roll back
    (:class:`~._writer.MariaDBWriter`); ``information_schema``
    (:class:`~._checks.MariaDBChecker`); ``XA COMMIT``, ``XA RECOVER``
    (:class:`~._prepared_store.XATransactions`); the marker table
    (:class:`~._marker_table.MariaDBMarkerTable`).
    """

    name = "MariaDB"
    instance = "MARIADB"
    parts = (
        MariaDBWriter,
        MariaDBChecker,
        XATransactions,
        MariaDBMarkerTable,
        MariaDBDeadLetterTable,
    )
    #: MariaDB's identifier limit (64 characters; the check counts bytes).
    max_identifier_bytes = 64
    sink_options: frozenset[str] = frozenset()
    #: PyMySQL's keywords the sink passes on (any other is refused).
    connection_keywords = CONNECT_KEYS

    def connection(self, target: str | None, keywords: Mapping[str, object]) -> ConnectionConfig:
        """Parse the ``mysql://`` URL (``target``) and merge the keywords into it."""
        params: dict[str, Any] = parse_url(target) if target else {}
        params.update({k: v for k, v in keywords.items() if v is not None})
        return ConnectionConfig(None, **params)

    def accepts_keyword(self, keyword: str) -> bool:
        """Tell whether ``keyword`` is one of PyMySQL's the sink passes on."""
        return keyword in CONNECT_KEYS

    def application_name(self, sink: str) -> str | None:
        """MariaDB sessions keep no application name."""
        return None

    def choose(
        self, requested: str, options: JdbcOptions, connection: ConnectionConfig, sink: str
    ) -> Choice:
        """Pick the coordinated protocol unless ``markers`` is pinned: MariaDB always has XA.

        It does not connect: the sink checks the server when the query starts.
        """
        if requested == "markers":
            return Choice("markers", "forced")
        return Choice("coordinated", "XA")


#: The one MariaDB dialect object (it pickles by name).
MARIADB = MariaDBDialect()


class MariaDBTwoPhaseSink(JdbcTwoPhaseSink[MariaDBTransaction, MariaDBHandle]):
    """Exactly-once into MariaDB with XA transactions (``coordinated``).

    Every partition writes its rows inside one XA transaction and prepares it
    (``XA PREPARE``); the driver commits them by xid (``XA COMMIT``). The sink
    name is part of every xid: at most 44 bytes. Build it with
    :func:`~twophase.connectors.jdbc.mariadb_sink`; the constructor is
    :class:`~.._sink.JdbcTwoPhaseSink`'s.
    """

    dialect = MARIADB


class MariaDBMarkerSink(JdbcMarkerSink[MariaDBTransaction]):
    """Exactly-once into MariaDB without XA (``markers``).

    Every partition commits its own transaction, the rows and a marker row,
    on its executor. Build it with :func:`~twophase.connectors.jdbc.mariadb_sink`.
    """

    dialect = MARIADB


#: The sink of each protocol, for the factory.
MARIADB_SINKS = SinkClasses(MariaDBTwoPhaseSink, MariaDBMarkerSink)

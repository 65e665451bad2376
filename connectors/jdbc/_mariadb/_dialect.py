"""The MariaDB dialect: PyMySQL, ``LOAD DATA LOCAL INFILE``, ``XA PREPARE``; and its sinks."""

from __future__ import annotations

from .._config import ConnectionConfig
from .._dialect import PartsDialect
from .._options import JdbcOptions
from .._sink import JdbcMarkerSink, JdbcTwoPhaseSink
from ._checks import MariaDBChecker
from ._markers import MariaDBMarkerTable
from ._transaction import MariaDBTransaction
from ._writer import MariaDBWriter
from ._xa import MariaDBHandle, XATransactions

__all__ = ["MARIADB", "MariaDBDialect", "MariaDBMarkerSink", "MariaDBTwoPhaseSink"]


class MariaDBDialect(PartsDialect[MariaDBTransaction, MariaDBHandle]):
    """MariaDB 10.5 or newer; not MySQL (see ``docs/mariadb.md``).

    Its parts: ``XA START`` or ``BEGIN``, ``LOAD DATA``/``INSERT``, roll back
    (:class:`~._writer.MariaDBWriter`); ``information_schema``
    (:class:`~._checks.MariaDBChecker`); ``XA COMMIT``, ``XA RECOVER``
    (:class:`~._xa.XATransactions`); the marker table
    (:class:`~._markers.MariaDBMarkerTable`).
    """

    name = "MariaDB"
    instance = "MARIADB"
    parts = (MariaDBWriter, MariaDBChecker, XATransactions, MariaDBMarkerTable)


#: The one MariaDB dialect object (it pickles by name).
MARIADB = MariaDBDialect()


class MariaDBTwoPhaseSink(JdbcTwoPhaseSink[MariaDBTransaction, MariaDBHandle]):
    """Exactly-once into MariaDB with XA transactions (``coordinated``).

    Every partition of a micro-batch writes its rows inside one XA
    transaction and prepares it (``XA PREPARE``); once every partition has
    prepared, the driver records the decision and commits them all by xid
    (``XA COMMIT``). A batch is either committed in full or not at all. Build
    it with :func:`~twophase.connectors.jdbc.mariadb_sink`.

    Parameters
    ----------
    name
        The sink name (part of every xid: at most 44 bytes).
    options
        What to write and how.
    connection
        Connection parameters.
    **base
        ``checkpoint_location``, ``retry``: see :class:`twophase.TwoPhaseCommitSink`.
    """

    dialect = MARIADB

    def __init__(
        self, name: str, options: JdbcOptions, connection: ConnectionConfig, **base: object
    ) -> None:
        super().__init__(options, connection, name=name, **base)


class MariaDBMarkerSink(JdbcMarkerSink[MariaDBTransaction]):
    """Exactly-once into MariaDB without XA (``markers``).

    Every partition commits its own transaction, the rows and a marker row,
    on its executor. Build it with :func:`~twophase.connectors.jdbc.mariadb_sink`.

    Parameters
    ----------
    name
        The sink name.
    options
        What to write and how.
    connection
        Connection parameters.
    **base
        ``staging``, ``checkpoint_location``, ``retry``: see
        :class:`twophase.MarkerCommitSink`.
    """

    dialect = MARIADB

    def __init__(
        self, name: str, options: JdbcOptions, connection: ConnectionConfig, **base: object
    ) -> None:
        super().__init__(options, connection, name=name, **base)

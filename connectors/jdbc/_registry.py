"""The databases of the JDBC family: the one place a dialect is registered.

Each :class:`Database` names a dialect's package in ``connectors/jdbc/``, the
DB-API client library it alone imports, and its public names with the module
of the package that defines each. :mod:`twophase.connectors.jdbc` exports the
names from here (imported on first use), and ``tests/unit/jdbc/test_jdbc_registry.py``
holds the package folders, the import contracts of ``pyproject.toml`` and the
public face to it. Adding a database: ``docs/development.md``, "The JDBC
family, and adding a database".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, NamedTuple

__all__ = ["DATABASES", "Database", "public_names"]


class Database(NamedTuple):
    """One database of the family.

    Attributes
    ----------
    package
        The dialect's package in ``connectors/jdbc/`` (``"_postgres"``).
    client_library
        The top-level import name of its DB-API client library (``"psycopg2"``),
        which no other module of the connectors imports.
    public
        Each public name of the dialect and the module of its package that defines
        it (``{"postgres_sink": "_factory"}``), re-exported by
        :mod:`twophase.connectors.jdbc`.
    """

    package: str
    client_library: str
    public: Mapping[str, str]


#: The registered databases, one entry each.
DATABASES: Final = (
    Database(
        "_mariadb",
        "pymysql",
        {
            "MariaDBMarkerSink": "_dialect",
            "MariaDBTwoPhaseSink": "_dialect",
            "mariadb_sink": "_factory",
            "register_mariadb_format": "_format",
        },
    ),
    Database(
        "_postgres",
        "psycopg2",
        {
            "PostgresMarkerSink": "_dialect",
            "PostgresTwoPhaseSink": "_dialect",
            "PreparedTransaction": "_admin",
            "list_prepared_transactions": "_admin",
            "postgres_sink": "_factory",
            "register_postgres_format": "_format",
        },
    ),
)


def public_names() -> dict[str, str]:
    """Return each public name of every database and its module, relative to the family.

    Returns
    -------
    dict of str to str
        ``{"postgres_sink": "._postgres._factory", ...}``.
    """
    return {
        name: f".{db.package}.{module}" for db in DATABASES for name, module in db.public.items()
    }

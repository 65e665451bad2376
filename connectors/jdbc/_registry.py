"""The databases of the JDBC family: the one place a dialect is registered.

Each :class:`Database` names a dialect's package in ``connectors/jdbc/`` and the
DB-API client library it alone imports; the package's ``__init__`` lists its
public names by module (``PUBLIC``), which :mod:`twophase.connectors.jdbc` exports.
``tests/unit/jdbc/test_jdbc_registry.py`` holds the package folders, the
import contracts of ``pyproject.toml`` and the public face to this registry.
Adding a database: ``docs/development.md``, "The JDBC family, and adding a
database".
"""

from __future__ import annotations

import importlib
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
    """

    package: str
    client_library: str


#: The registered databases, one line each.
DATABASES: Final = (
    Database("_mariadb", "pymysql"),
    Database("_postgres", "psycopg2"),
)


def public_names() -> dict[str, str]:
    """Return each registered database's public names and where they live.

    Returns
    -------
    dict
        Name -> module relative to the family (``"._postgres._factory"``;
        ``"._postgres"`` for a name of the package's ``__init__``), from each
        package's ``PUBLIC``.
    """
    where: dict[str, str] = {}
    for db in DATABASES:
        package = importlib.import_module(f"{__package__}.{db.package}")
        for module, names in package.PUBLIC.items():
            for name in names:
                where[name] = f".{db.package}.{module}" if module else f".{db.package}"
    return where

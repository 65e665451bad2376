"""Identifiers and literals of MariaDB SQL text.

Identifiers always go through :func:`quote` (backticks, a backtick doubled);
values through :func:`literal` or the driver's parameters. The sessions run
with a fixed ``sql_mode`` (:data:`SQL_MODE`: strict, backslash escapes on,
``ANSI_QUOTES`` off), so that quoting here means the same on every server,
whatever its global settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._options import QualifiedName

__all__ = ["SQL_MODE", "columns", "literal", "quote", "table"]

#: The ``sql_mode`` of every session: errors instead of silent truncation or zero
#: dates, and the quoting rules :func:`literal` relies on.
SQL_MODE = (
    "STRICT_ALL_TABLES,NO_ZERO_IN_DATE,NO_ZERO_DATE,ERROR_FOR_DIVISION_BY_ZERO,"
    "NO_ENGINE_SUBSTITUTION,NO_AUTO_VALUE_ON_ZERO"
)


def quote(name: str) -> str:
    """Quote one identifier: ``a`b`` becomes ```a``b```.

    Parameters
    ----------
    name
        The identifier, taken literally.

    Returns
    -------
    str
        The quoted identifier.
    """
    return "`" + name.replace("`", "``") + "`"


def table(name: QualifiedName) -> str:
    """Quote a table name, database-qualified or not.

    Parameters
    ----------
    name
        The table (``schema`` is the database).

    Returns
    -------
    str
        ```db`.`table``` or ```table```.
    """
    return ".".join(quote(part) for part in name.parts())


def columns(names: Sequence[str]) -> str:
    """Quote a column list: ```a`, `b```.

    Parameters
    ----------
    names
        Column names.

    Returns
    -------
    str
        The list, comma-separated.
    """
    return ", ".join(quote(n) for n in names)


def literal(value: str) -> str:
    r"""Quote a string literal under :data:`SQL_MODE` (``\``, ``'`` and NUL escaped).

    Parameters
    ----------
    value
        The string.

    Returns
    -------
    str
        ``'...'``.
    """
    escaped = value.replace("\\", "\\\\").replace("'", "\\'").replace("\x00", "\\0")
    return "'" + escaped + "'"

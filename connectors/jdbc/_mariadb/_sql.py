"""Identifiers and literals of MariaDB SQL text.

Identifiers always go through :func:`quote` (backticks, a backtick doubled);
values through :func:`literal` or PyMySQL's parameters. The sessions run
with a fixed ``sql_mode`` (:data:`SQL_MODE`: strict, backslash escapes on,
``ANSI_QUOTES`` off), so that quoting here means the same on every server,
whatever its global settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._options import QualifiedName
from .._plan import OP_COLUMN, SEQ_COLUMN

__all__ = [
    "LATEST",
    "SQL_MODE",
    "STAGING",
    "columns",
    "create_staging",
    "dedupes_at_load",
    "literal",
    "merge",
    "quote",
    "table",
]

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


#: The staging tables of one session (temporary: each session has its own).
STAGING = "`twophase_stage`"
LATEST = "`twophase_latest`"


def dedupes_at_load(
    keys: Sequence[str], types: Sequence[tuple[str, str]], order: str | None
) -> bool:
    """Whether the staging table keeps one row per key itself (a unique key, rows replaced).

    Then the last row of a key wins as it arrives, which is the latest row when
    no ``order_column`` reorders them, and the merge reads the staging table
    once. Key columns of a type an index cannot hold whole (text, blob, JSON,
    spatial) keep the ``ROW_NUMBER()`` merge.

    Parameters
    ----------
    keys
        The key columns.
    types
        ``(name, column type)`` of the written columns.
    order
        The ``order_column`` setting.

    Returns
    -------
    bool
        True when the staging table gets a unique key on ``keys``.
    """
    if order is not None or not keys:
        return False
    by_name = {name: sql_type.lower() for name, sql_type in types}
    whole = ("text", "blob", "json", "geometry", "point", "polygon", "linestring")
    return all(k in by_name and not any(w in by_name[k] for w in whole) for k in keys)


def create_staging(
    columns_sql: Sequence[tuple[str, str]], *, with_op: bool, unique: Sequence[str] = ()
) -> list[str]:
    """Create the session's staging table: the written columns, all nullable, plus seq and op.

    The columns keep the target's types (``COLUMN_TYPE`` from the catalog, so
    length limits hold), without their constraints: a NOT NULL or unique
    violation surfaces in the merge, where it is reported, and a CDC delete
    may carry NULLs.

    Parameters
    ----------
    columns_sql
        ``(name, column type)`` of the written columns.
    with_op
        Add the CDC operation column.
    unique
        Key columns to give a unique key (:func:`dedupes_at_load`); rows
        then go in with ``REPLACE``.

    Returns
    -------
    list of str
        The statements (drop a leftover, create).
    """
    parts = [f"{quote(name)} {sql_type} NULL" for name, sql_type in columns_sql]
    parts.append(f"{quote(SEQ_COLUMN)} BIGINT NOT NULL")
    if with_op:
        parts.append(f"{quote(OP_COLUMN)} CHAR(1) NOT NULL")
    if unique:
        parts.append(f"UNIQUE KEY ({columns(unique)})")
    return [
        f"DROP TEMPORARY TABLE IF EXISTS {STAGING}, {LATEST}",
        f"CREATE TEMPORARY TABLE {STAGING} ({', '.join(parts)}) ENGINE=InnoDB",
    ]


def merge(
    target: QualifiedName,
    names: Sequence[str],
    keys: Sequence[str],
    order_column: str | None,
    *,
    cdc: bool,
    deduped: bool = False,
) -> list[str]:
    """Apply the latest staged row of every key: upsert it, or delete the key for a CDC ``d``.

    The latest row of a key is the one with the largest ``order_column``
    (NULLs lose), then the last in the partition. MariaDB cannot read a
    temporary table twice in one statement, so the latest rows are kept in a
    second one -- unless the staging table already holds one row per key
    (``deduped``), which is then read as it is.

    Parameters
    ----------
    target
        The table.
    names
        The data columns.
    keys
        The key columns (a unique index on exactly them exists).
    order_column
        Orders the rows of one key, before row order.
    cdc
        The staging table has the operation column.
    deduped
        The staging table has a unique key on ``keys`` (:func:`dedupes_at_load`).

    Returns
    -------
    list of str
        The statements, in order (the last drops the staging tables).
    """
    order = []
    if order_column is not None:
        order += [f"{quote(order_column)} IS NULL", f"{quote(order_column)} DESC"]
    order.append(f"{quote(SEQ_COLUMN)} DESC")
    kept = list(names) + ([OP_COLUMN] if cdc else [])
    source = STAGING if deduped else LATEST
    latest = (
        f"CREATE TEMPORARY TABLE {LATEST} ENGINE=InnoDB AS SELECT {columns(kept)} FROM ("
        f"SELECT *, ROW_NUMBER() OVER (PARTITION BY {columns(keys)} ORDER BY {', '.join(order)}) "
        f"AS `__twophase_rank` FROM {STAGING}) AS ranked WHERE `__twophase_rank` = 1"
    )
    updates = [n for n in names if n not in keys] or [keys[0]]
    assignments = ", ".join(f"{quote(n)} = VALUES({quote(n)})" for n in updates)
    where = f" WHERE {quote(OP_COLUMN)} <> 'd'" if cdc else ""
    statements = [] if deduped else [latest]
    if cdc:
        match = " AND ".join(f"t.{quote(k)} = d.{quote(k)}" for k in keys)
        # Driven by the staged keys, looked up in the table's key index: a scan of the
        # table would wait on rows that other partitions' prepared branches hold.
        statements.append(
            f"DELETE t FROM {source} AS d STRAIGHT_JOIN {table(target)} AS t ON {match} "
            f"WHERE d.{quote(OP_COLUMN)} = 'd'"
        )
    statements.append(
        f"INSERT INTO {table(target)} ({columns(names)}) SELECT {columns(names)} FROM {source}"
        f"{where} ON DUPLICATE KEY UPDATE {assignments}"
    )
    statements.append(f"DROP TEMPORARY TABLE IF EXISTS {STAGING}, {LATEST}")
    return statements

"""SQL statements on the target table (COPY, staging, merge, CREATE), via :mod:`psycopg2.sql`.

Identifiers (tables, columns) always go through :class:`psycopg2.sql.Identifier`
and values always travel as query parameters: nothing from the data or the
user's options is ever formatted into SQL text. The only literal SQL fragments
are the PostgreSQL type names of :data:`~._type_map.POSTGRES_TYPES`, which come
from a fixed table in this package. The marker table's statements follow the
same rule in :mod:`._marker_table`.
"""

from __future__ import annotations

from collections.abc import Sequence

from psycopg2 import sql

from .._options import QualifiedName
from .._plan import OP_COLUMN, SEQ_COLUMN

__all__ = [
    "OP_COLUMN",
    "SEQ_COLUMN",
    "add_column",
    "copy_into",
    "create_staging",
    "create_table",
    "ident",
    "merge",
]


def ident(name: QualifiedName) -> sql.Identifier:
    """Return the identifier of a (possibly schema-qualified) table.

    Parameters
    ----------
    name
        The table name.

    Returns
    -------
    psycopg2.sql.Identifier
        ``"schema"."table"`` or ``"table"``.
    """
    return sql.Identifier(*name.parts())


def _columns(names: Sequence[str]) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in names)


def copy_into(table: sql.Composable, columns: Sequence[str]) -> sql.Composed:
    """``COPY table (columns) FROM STDIN (FORMAT csv)``.

    Parameters
    ----------
    table
        Target or staging table.
    columns
        The column list, in the order of the CSV fields.

    Returns
    -------
    psycopg2.sql.Composed
        The statement.
    """
    return sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT csv)").format(table, _columns(columns))


def create_staging(
    staging: sql.Composable,
    target: sql.Composable,
    columns: Sequence[str],
    *,
    with_op: bool,
    temporary: bool,
) -> sql.Composed:
    """Create the staging table of one transaction, shaped like the written columns.

    ``CREATE TABLE ... AS SELECT ... WITH NO DATA`` copies the column types
    (with their length limits) but no constraints, so that NOT NULL and
    unique violations surface in the merge, where they are reported.

    Parameters
    ----------
    staging
        The staging table name.
    target
        The target table.
    columns
        The data columns.
    with_op
        Add the CDC operation column.
    temporary
        A ``TEMP ... ON COMMIT DROP`` table (the markers protocol). The
        coordinated protocol cannot use one (PostgreSQL refuses to prepare a
        transaction that touched a temporary table) and uses an ``UNLOGGED``
        table dropped before ``PREPARE TRANSACTION``.

    Returns
    -------
    psycopg2.sql.Composed
        The statement.
    """
    extra = [sql.SQL("NULL::bigint AS {}").format(sql.Identifier(SEQ_COLUMN))]
    if with_op:
        extra.append(sql.SQL("NULL::text AS {}").format(sql.Identifier(OP_COLUMN)))
    select = sql.SQL(", ").join([*(sql.Identifier(c) for c in columns), *extra])
    if temporary:
        head = sql.SQL("CREATE TEMPORARY TABLE {} ON COMMIT DROP AS SELECT ").format(staging)
    else:
        head = sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT ").format(staging)
    return head + select + sql.SQL(" FROM {} WITH NO DATA").format(target)


def _latest_per_key(
    staging: sql.Composable, keys: Sequence[str], order_column: str | None
) -> sql.Composed:
    """``SELECT DISTINCT ON (keys) * FROM staging ORDER BY keys, order DESC, seq DESC``."""
    order = [sql.SQL("{} ASC").format(sql.Identifier(k)) for k in keys]
    if order_column is not None:
        order.append(sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(order_column)))
    order.append(sql.SQL("{} DESC").format(sql.Identifier(SEQ_COLUMN)))
    return sql.SQL("SELECT DISTINCT ON ({}) * FROM {} ORDER BY {}").format(
        _columns(keys), staging, sql.SQL(", ").join(order)
    )


def _on_conflict(columns: Sequence[str], keys: Sequence[str]) -> sql.Composed:
    updates = [c for c in columns if c not in keys]
    if not updates:
        return sql.SQL(" ON CONFLICT ({}) DO NOTHING").format(_columns(keys))
    assignments = sql.SQL(", ").join(
        sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(c), sql.Identifier(c)) for c in updates
    )
    return sql.SQL(" ON CONFLICT ({}) DO UPDATE SET {}").format(_columns(keys), assignments)


def merge(
    target: sql.Composable,
    staging: sql.Composable,
    columns: Sequence[str],
    keys: Sequence[str],
    order_column: str | None,
    *,
    cdc: bool,
) -> sql.Composed:
    """Apply the latest staged row of every key: upsert it, or (``cdc``) delete it for ``d``.

    The CDC statement is one statement: the DELETE and the INSERT are
    data-modifying CTEs over the same de-duplicated rows and touch disjoint keys.

    Parameters
    ----------
    target, staging
        The tables.
    columns
        The data columns.
    keys
        The key columns (a unique index on exactly them must exist).
    order_column
        Orders the rows of one key (largest wins), before row order.
    cdc
        The staging table also has the operation (upsert otherwise).

    Returns
    -------
    psycopg2.sql.Composed
        ``INSERT ... SELECT DISTINCT ON ... ON CONFLICT (keys) DO UPDATE``, for
        CDC within ``WITH latest AS (...), deleted AS (DELETE ...), upserted AS (...)``.
    """
    latest = _latest_per_key(staging, keys, order_column)
    if not cdc:
        return sql.SQL("INSERT INTO {} ({}) SELECT {} FROM ({}) AS latest").format(
            target, _columns(columns), _columns(columns), latest
        ) + _on_conflict(columns, keys)
    op = sql.Identifier(OP_COLUMN)
    match = sql.SQL(" AND ").join(
        sql.SQL("t.{} = latest.{}").format(sql.Identifier(k), sql.Identifier(k)) for k in keys
    )
    return (
        sql.SQL(
            "WITH latest AS ({}), "
            "deleted AS (DELETE FROM {} AS t USING latest WHERE latest.{} = 'd' AND {}), "
            "upserted AS (INSERT INTO {} ({}) SELECT {} FROM latest WHERE latest.{} <> 'd'"
        ).format(latest, target, op, match, target, _columns(columns), _columns(columns), op)
        + _on_conflict(columns, keys)
        + sql.SQL(") SELECT 1")
    )


def create_table(
    target: sql.Composable, fields: Sequence[tuple[str, str, bool]], keys: Sequence[str]
) -> sql.Composed:
    """``CREATE TABLE IF NOT EXISTS`` with a primary key on ``keys`` (if any).

    Parameters
    ----------
    target
        The table.
    fields
        ``(name, PostgreSQL type from the mapping, not null)``.
    keys
        Primary key columns, or empty.

    Returns
    -------
    psycopg2.sql.Composed
        The statement.
    """
    parts = [
        sql.SQL("{} {}{}").format(
            sql.Identifier(name), sql.SQL(pg_type), sql.SQL(" NOT NULL" if not_null else "")
        )
        for name, pg_type, not_null in fields
    ]
    if keys:
        parts.append(sql.SQL("PRIMARY KEY ({})").format(_columns(keys)))
    return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(target, sql.SQL(", ").join(parts))


def add_column(target: sql.Composable, name: str, pg_type: str) -> sql.Composed:
    """``ALTER TABLE ... ADD COLUMN IF NOT EXISTS`` of a nullable column."""
    return sql.SQL("ALTER TABLE {} ADD COLUMN IF NOT EXISTS {} {}").format(
        target, sql.Identifier(name), sql.SQL(pg_type)
    )

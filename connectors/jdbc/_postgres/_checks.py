"""PostgreSQL's checks of the target: ``pg_catalog``, the relation's kind, the user's rights.

What every dialect checks alike is :class:`~.._checks.TableChecks`; the
coordinated protocol's statements are in :mod:`._prepared_store`, the markers
protocol's in :mod:`._marker_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twophase.errors import ConfigurationError

from ..._context import ErrorContext
from .._checks import TableChecks
from .._evolution import NewColumn
from .._options import QualifiedName
from . import _sql
from ._catalog import (
    TableInfo,
    describe_table,
    has_privileges,
    schema_can_create,
)
from ._client import PostgresClient
from ._gid import GIDS
from ._type_map import POSTGRES_TYPES

__all__ = ["PostgresChecker"]


class PostgresChecker(PostgresClient, TableChecks):
    """Driver-side checks of the PostgreSQL sinks (the dialect's :class:`~.._dialect.Checker`).

    Picklable (options and connection parameters only).
    """

    ids = GIDS
    types = POSTGRES_TYPES

    def describe_table(self, cur: Any, table: QualifiedName) -> TableInfo | None:
        """Read the table from ``pg_catalog``."""
        return describe_table(cur, table)

    def create_table_statement(self, fields: Sequence[tuple[str, str, bool]]) -> Any:
        """``CREATE TABLE IF NOT EXISTS`` with the key columns as primary key."""
        return _sql.create_table(_sql.ident(self.options.table), fields, self.options.key_columns)

    def add_column_statement(self, column: NewColumn) -> Any:
        """``ADD COLUMN IF NOT EXISTS``; the session's ``lock_timeout`` bounds the wait."""
        return _sql.add_column(_sql.ident(self.options.table), column.name, column.sql_type)

    def check_target(
        self, cur: Any, found: TableInfo | None, *, coordinated: bool, where: ErrorContext
    ) -> None:
        """Refuse a relation that is not a table and rights the mode and protocol need.

        The table's rights for the mode, and its ownership for
        ``schema_evolution="add_columns"``; CREATE on the merge schema
        (coordinated upsert/CDC) or TEMP on the database (markers upsert/CDC),
        checked even when the table is still to be created.
        """
        options = self.options
        if found is not None:
            self._check_table_rights(cur, found, where)
        if coordinated and options.mode != "append":
            schema, ok = schema_can_create(cur, options.merge_schema or options.table.schema)
            if not ok:
                raise ConfigurationError(
                    f"permission denied: protocol 'coordinated' with mode={options.mode!r} "
                    f"creates an unlogged staging table per transaction in schema "
                    f"{schema!r}, and the sink's user may not create tables there. GRANT "
                    "CREATE on it, or set merge_schema to a schema where it may",
                    setting="merge_schema",
                    **where.keywords(),
                )
        if not coordinated and options.mode != "append":
            cur.execute("SELECT has_database_privilege(current_database(), 'TEMP')")
            if not cur.fetchone()[0]:
                raise ConfigurationError(
                    f"permission denied: protocol 'markers' with mode={options.mode!r} "
                    "stages each transaction's rows in a temporary table, and the sink's "
                    "user may not create temporary tables in this database. GRANT TEMP "
                    "ON DATABASE to it",
                    setting="mode",
                    **where.keywords(),
                )

    def _check_table_rights(self, cur: Any, found: TableInfo, where: ErrorContext) -> None:
        options = self.options
        if found.kind not in ("r", "p"):
            raise ConfigurationError(
                f"{options.table} is not a table (relkind {found.kind!r})",
                setting="table",
                **where.keywords(),
            )
        needed = {"append": ("INSERT",), "upsert": ("INSERT", "UPDATE")}.get(
            options.mode, ("INSERT", "UPDATE", "DELETE")
        )
        missing = has_privileges(cur, found.oid, needed)
        if missing:
            raise ConfigurationError(
                f"permission denied: the sink's user lacks {', '.join(missing)} on "
                f"{options.table} (mode={options.mode!r} needs {', '.join(needed)})",
                setting="table",
                **where.keywords(),
            )
        if options.schema_evolution == "add_columns":
            cur.execute(
                "SELECT pg_has_role(relowner, 'USAGE') FROM pg_class WHERE oid = %s", (found.oid,)
            )
            if not cur.fetchone()[0]:
                raise ConfigurationError(
                    f"permission denied: schema_evolution='add_columns' adds columns with ALTER "
                    f"TABLE, which PostgreSQL allows only the owner of {options.table} (or a "
                    "member of its role), and the sink's user is not. Grant it the owning role, "
                    "or set schema_evolution='none'",
                    setting="schema_evolution",
                    **where.keywords(),
                )

"""MariaDB's checks of the target: ``information_schema``, the storage engine, unique keys.

What every dialect checks alike is :class:`~.._checks.TableChecks`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from twophase.errors import ConfigurationError

from ..._context import ErrorContext, keywords_of
from .._checks import TableChecks
from .._evolution import NewColumn
from .._options import QualifiedName
from .._plan import WritePlan
from .._table import TableInfo
from ._client import TRANSACTIONAL_ENGINES, MariaDBClient, describe_table
from ._sql import columns, quote, table
from ._type_map import MARIADB_TYPES
from ._xid import GTRIDS

__all__ = ["MariaDBChecker"]


class MariaDBChecker(MariaDBClient, TableChecks):
    """Driver-side checks of the MariaDB sinks (the dialect's :class:`~.._dialect.Checker`)."""

    ids = GTRIDS
    types = MARIADB_TYPES

    def describe_table(self, cur: Any, table: QualifiedName) -> TableInfo | None:
        """Read the table from ``information_schema``."""
        return describe_table(cur, table)

    def create_table_statement(self, fields: Sequence[tuple[str, str, bool]]) -> Any:
        """``CREATE TABLE IF NOT EXISTS``, InnoDB, utf8mb4, the key columns as primary key."""
        options = self.options
        parts = [
            f"{quote(name)} {sql_type}{' NOT NULL' if not_null else ''}"
            for name, sql_type, not_null in fields
        ]
        if options.key_columns:
            parts.append(f"PRIMARY KEY ({columns(options.key_columns)})")
        return (
            f"CREATE TABLE IF NOT EXISTS {table(options.table)} ({', '.join(parts)}) "
            "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        )

    def add_column_statement(self, column: NewColumn) -> Any:
        """``ADD COLUMN IF NOT EXISTS``, ``WAIT`` bounding the metadata lock by ``lock_timeout``.

        The session's ``innodb_lock_wait_timeout`` does not bound an ``ALTER``:
        its metadata lock waits ``lock_wait_timeout`` (a year by default).
        """
        seconds = math.ceil(self.options.lock_timeout)
        wait = f" WAIT {seconds}" if seconds else ""
        return (
            f"ALTER TABLE {table(self.options.table)}{wait} "
            f"ADD COLUMN IF NOT EXISTS {quote(column.name)} {column.sql_type} NULL"
        )

    def check_target(
        self, cur: Any, found: TableInfo | None, *, coordinated: bool, where: ErrorContext
    ) -> None:
        """Refuse a view and a table without transactions (the rights are not checked)."""
        if found is not None:
            _check_engine(found, str(self.options.table), where)

    def check_plan(self, found: TableInfo, plan: WritePlan) -> None:
        """Refuse an engine without transactions and a second unique key the merge would hit."""
        _check_engine(found, str(self.options.table))
        if self.options.mode != "append":
            _check_other_unique_keys(found, set(plan.names), self.options.key_columns)


def _check_other_unique_keys(found: TableInfo, written: set[str], keys: tuple[str, ...]) -> None:
    """Refuse a second unique key made of written columns: ON DUPLICATE KEY would match it too."""
    for unique in found.unique_keys:
        if unique != frozenset(keys) and unique <= written:
            raise ConfigurationError(
                f"table has a unique index on ({', '.join(sorted(unique))}) besides the key "
                f"({', '.join(keys)}), and the sink writes all its columns: MariaDB's ON "
                "DUPLICATE KEY UPDATE would update the row matching either index. Drop that "
                "index, or stop writing one of its columns",
                setting="key_columns",
            )


def _check_engine(found: TableInfo, name: str, where: ErrorContext | None = None) -> None:
    """Refuse views and tables whose engine has no transactions (MyISAM would half-commit)."""
    if found.kind == "VIEW":
        raise ConfigurationError(
            f"{name} is a view, not a table", setting="table", **keywords_of(where)
        )
    if found.kind not in TRANSACTIONAL_ENGINES:
        raise ConfigurationError(
            f"table {name} uses the {found.kind or 'unknown'} storage engine, which has no "
            "transactions: rows would be visible before the batch commits and stay after a "
            f"rollback. ALTER TABLE {name} ENGINE=InnoDB",
            setting="table",
            **keywords_of(where),
        )

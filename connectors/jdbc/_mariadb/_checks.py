"""The MariaDB dialect's driver-side checks: the identity's xids, the table, the batch schema."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from twophase.errors import ConfigurationError

from .._plan import create_table_fields, plan_write
from .._table import TableInfo
from ._client import TRANSACTIONAL_ENGINES, MariaDBClient, describe_table
from ._sql import columns, quote, table
from ._types import MARIADB_TYPES
from ._xid import GTRIDS

__all__ = ["MariaDBChecker"]

_log = logging.getLogger("twophase.connectors.jdbc")


class MariaDBChecker(MariaDBClient):
    """Driver-side checks of the MariaDB sinks (the dialect's :class:`~.._dialect.Checker`)."""

    def check_open(self, identity: str, *, coordinated: bool, **context: Any) -> None:
        """Check that the identity's xids fit, then the table.

        Parameters
        ----------
        identity
            The sink identity.
        coordinated
            The coordinated protocol.
        **context
            Error context.
        """
        try:
            GTRIDS.check_identity(identity)
        except ConfigurationError as exc:
            raise exc.with_context(**context) from None
        options = self.options

        def check(cur: Any) -> None:
            found = describe_table(cur, options.table)
            if found is None:
                if options.create_table:
                    return
                raise ConfigurationError(
                    f"table {options.table} does not exist (or is not visible to the sink's "
                    "user); create it, or pass create_table=True",
                    setting="table",
                    **context,
                )
            _check_engine(found, str(options.table), **context)

        self.run(f"checking table {options.table}", check, **context)

    def check_schema(self, schema: pa.Schema, **context: Any) -> None:
        """Create the table if asked, then check the batch schema against it.

        Parameters
        ----------
        schema
            The Arrow schema of the batch.
        **context
            Error context (sink, batch_id).
        """
        options = self.options

        def check(cur: Any) -> None:
            found = describe_table(cur, options.table)
            if found is None and options.create_table:
                fields = create_table_fields(schema, options, MARIADB_TYPES)
                parts = [
                    f"{quote(name)} {sql_type}{' NOT NULL' if not_null else ''}"
                    for name, sql_type, not_null in fields
                ]
                if options.key_columns:
                    parts.append(f"PRIMARY KEY ({columns(options.key_columns)})")
                cur.execute(
                    f"CREATE TABLE IF NOT EXISTS {table(options.table)} ({', '.join(parts)}) "
                    "ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
                )
                _log.info("created table %s (%d columns)", options.table, len(fields))
                found = describe_table(cur, options.table)
            if found is None:
                raise ConfigurationError(
                    f"table {options.table} does not exist; create it, or pass create_table=True",
                    setting="table",
                )
            _check_engine(found, str(options.table))
            plan = plan_write(schema, found, options, str(options.table), MARIADB_TYPES)
            if options.mode != "append":
                _check_other_unique_keys(found, set(plan.names), options.key_columns)

        try:
            self.run(f"checking the schema against {options.table}", check, **context)
        except ConfigurationError as exc:
            raise exc.with_context(**context) from exc.__cause__


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


def _check_engine(found: TableInfo, name: str, **context: Any) -> None:
    """Refuse views and tables whose engine has no transactions (MyISAM would half-commit)."""
    if found.kind == "VIEW":
        raise ConfigurationError(f"{name} is a view, not a table", setting="table", **context)
    if found.kind not in TRANSACTIONAL_ENGINES:
        raise ConfigurationError(
            f"table {name} uses the {found.kind or 'unknown'} storage engine, which has no "
            "transactions: rows would be visible before the batch commits and stay after a "
            f"rollback. ALTER TABLE {name} ENGINE=InnoDB",
            setting="table",
            **context,
        )

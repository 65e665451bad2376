"""The driver side both protocols share: server capabilities, the table, the batch schema.

Every statement runs in autocommit mode on a pooled connection
(:meth:`~._client.PostgresClient.run`) and is safe to repeat: reads, and
``CREATE TABLE IF NOT EXISTS``. The coordinated protocol's statements are in
:mod:`._prepared`, the markers protocol's in :mod:`._markers`.
"""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa

from twophase.errors import ConfigurationError

from .._plan import create_table_fields, plan_write
from . import _sql
from ._catalog import (
    TableInfo,
    describe_table,
    has_privileges,
    schema_can_create,
)
from ._client import PostgresClient
from ._gid import GIDS
from ._types import POSTGRES_TYPES

__all__ = ["PostgresChecker"]

_log = logging.getLogger("twophase.connectors.jdbc")


class PostgresChecker(PostgresClient):
    """Driver-side checks of the PostgreSQL sinks.

    Picklable (options and connection parameters only). It is the PostgreSQL
    dialect's :class:`~._dialect.Checker`.
    """

    # ------------------------------------------------------------------ open
    def check_open(self, identity: str, *, coordinated: bool, **context: Any) -> None:
        """Check that the identity's gids fit, then the table and the privileges.

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
            GIDS.check_identity(identity)
        except ConfigurationError as exc:
            raise exc.with_context(**context) from None
        self.check_target(coordinated=coordinated, **context)

    def check_target(self, *, coordinated: bool, **context: Any) -> TableInfo | None:
        """Check the table and the privileges at start (None: missing, will be created).

        Parameters
        ----------
        coordinated
            The coordinated protocol (upsert/CDC need CREATE on the merge
            schema; under the markers protocol, TEMP on the database).
        **context
            Error context.

        Returns
        -------
        TableInfo or None
            The table.
        """
        options = self.options

        def check(cur: Any) -> TableInfo | None:
            table = describe_table(cur, options.table)
            if table is None:
                if options.create_table:
                    return None
                raise ConfigurationError(
                    f"table {options.table} does not exist (or is not visible to the sink's "
                    "user); create it, or pass create_table=True",
                    setting="table",
                    **context,
                )
            if table.kind not in ("r", "p"):
                raise ConfigurationError(
                    f"{options.table} is not a table (relkind {table.kind!r})",
                    setting="table",
                    **context,
                )
            needed = {"append": ("INSERT",), "upsert": ("INSERT", "UPDATE")}.get(
                options.mode, ("INSERT", "UPDATE", "DELETE")
            )
            missing = has_privileges(cur, table.oid, needed)
            if missing:
                raise ConfigurationError(
                    f"permission denied: the sink's user lacks {', '.join(missing)} on "
                    f"{options.table} (mode={options.mode!r} needs {', '.join(needed)})",
                    setting="table",
                    **context,
                )
            if coordinated and options.mode != "append":
                schema, ok = schema_can_create(cur, options.merge_schema or options.table.schema)
                if not ok:
                    raise ConfigurationError(
                        f"permission denied: protocol 'coordinated' with mode={options.mode!r} "
                        f"creates an unlogged staging table per transaction in schema "
                        f"{schema!r}, and the sink's user may not create tables there. GRANT "
                        "CREATE on it, or set merge_schema to a schema where it may",
                        setting="merge_schema",
                        **context,
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
                        **context,
                    )
            return table

        return self.run(f"checking table {options.table}", check, **context)

    # ---------------------------------------------------------------- schema
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
            table = describe_table(cur, options.table)
            if table is None and options.create_table:
                fields = create_table_fields(schema, options, POSTGRES_TYPES)
                cur.execute(
                    _sql.create_table(_sql.ident(options.table), fields, options.key_columns)
                )
                _log.info("created table %s (%d columns)", options.table, len(fields))
                table = describe_table(cur, options.table)
            if table is None:
                raise ConfigurationError(
                    f"table {options.table} does not exist; create it, or pass create_table=True",
                    setting="table",
                )
            plan_write(schema, table, options, str(options.table), POSTGRES_TYPES)

        try:
            self.run(f"checking the schema against {options.table}", check, **context)
        except ConfigurationError as exc:
            raise exc.with_context(**context) from exc.__cause__

"""The driver's checks of the target, alike in every dialect: ids, the table, each batch's schema.

:class:`TableChecks` runs when the sink opens (the identity's transaction ids
fit the database's limit; the table exists, or will be created; the dialect's
own checks of it and of the user's rights) and before every batch (the table
created if asked, the batch's new columns added if asked, the batch's columns
and types against it). A dialect's checker supplies the catalog read, the
``CREATE TABLE`` and ``ADD COLUMN`` statements, its type rules and its id
limit. Every statement runs in autocommit mode on a pooled connection and is
safe to repeat: reads, ``CREATE TABLE IF NOT EXISTS``, and an ``ADD COLUMN``
of a column the table lacked a moment before (one another sink added
meanwhile is taken as added).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa

from twophase.errors import AbortRequiredError, ConfigurationError

from .._context import ErrorContext
from ._client import JdbcClient
from ._evolution import LOCK_HINT, NewColumn, columns_to_add
from ._gid import IdLimit
from ._options import QualifiedName
from ._plan import TypeRules, WritePlan, create_table_fields, plan_write
from ._table import TableInfo

__all__ = ["TableChecks"]

_log = logging.getLogger("twophase.connectors.jdbc")


class TableChecks(JdbcClient):
    """The driver-side checks of a dialect (its :class:`~._dialect.Checker`).

    Subclasses set :attr:`ids` and :attr:`types` and implement
    :meth:`describe_table` and :meth:`create_table_statement`; they may add
    checks in :meth:`check_target` and :meth:`check_plan`.
    """

    #: The database's limit on transaction ids.
    ids: ClassVar[IdLimit]
    #: The database's type rules.
    types: ClassVar[TypeRules]

    # ------------------------------------------------------------------ hooks
    def describe_table(self, cur: Any, table: QualifiedName) -> TableInfo | None:
        """Read the table from the catalog (None: it does not exist or is not visible)."""
        raise NotImplementedError

    def create_table_statement(self, fields: Sequence[tuple[str, str, bool]]) -> Any:
        """Return ``CREATE TABLE IF NOT EXISTS`` of the target for ``(name, type, not null)``."""
        raise NotImplementedError

    def add_column_statement(self, column: NewColumn) -> Any:
        """Return the target's ``ALTER TABLE ... ADD COLUMN`` of a nullable column.

        It waits at most ``lock_timeout`` for the table's lock, and adds
        nothing when the column exists (``IF NOT EXISTS``) where the database
        can say so. The default refuses ``schema_evolution="add_columns"`` by name.
        """
        raise ConfigurationError(
            f"schema_evolution='add_columns' is not supported by the {self.types.database} "
            "sink; add the column yourself",
            column=column.name,
            setting="schema_evolution",
        )

    def check_target(
        self, cur: Any, found: TableInfo | None, *, coordinated: bool, where: ErrorContext
    ) -> None:
        """Check the table and the user's rights at open (``found`` None: it will be created)."""

    def check_plan(self, found: TableInfo, plan: WritePlan) -> None:
        """Check what the plan of a batch needs of the table, beyond columns and types."""

    # ------------------------------------------------------------------- open
    def check_open(self, identity: str, *, coordinated: bool, where: ErrorContext) -> None:
        """Check that the identity's ids fit, then the table and the rights.

        Parameters
        ----------
        identity
            The sink identity.
        coordinated
            The coordinated protocol.
        where
            The sink, named by every error.
        """
        try:
            self.ids.check_identity(identity)
        except ConfigurationError as exc:
            raise exc.with_context(**where.keywords()) from None
        options = self.options

        def check(cur: Any) -> None:
            found = self.describe_table(cur, options.table)
            if found is None and not options.create_table:
                raise ConfigurationError(
                    f"table {options.table} does not exist (or is not visible to the sink's "
                    "user); create it, or pass create_table=True",
                    setting="table",
                    **where.keywords(),
                )
            self.check_target(cur, found, coordinated=coordinated, where=where)

        self.run(f"checking table {options.table}", check, where)

    # ----------------------------------------------------------------- schema
    def check_schema(self, schema: pa.Schema, where: ErrorContext) -> None:
        """Create the table if asked, then check the batch schema against it.

        Parameters
        ----------
        schema
            The Arrow schema of the batch.
        where
            The sink and the batch, named by every error.
        """
        options = self.options

        def check(cur: Any) -> None:
            found = self.describe_table(cur, options.table)
            if found is None and options.create_table:
                fields = create_table_fields(schema, options, self.types)
                cur.execute(self.create_table_statement(fields))
                _log.info("created table %s (%d columns)", options.table, len(fields))
                found = self.describe_table(cur, options.table)
            if found is None:
                raise ConfigurationError(
                    f"table {options.table} does not exist; create it, or pass create_table=True",
                    setting="table",
                )
            added = columns_to_add(schema, found, options, self.types)
            if added:
                found = self._add_columns(cur, added, where)
            self.check_plan(
                found, plan_write(schema, found, options, str(options.table), self.types)
            )

        try:
            self.run(f"checking the schema against {options.table}", check, where)
        except ConfigurationError as exc:
            raise exc.with_context(**where.keywords()) from exc.__cause__

    def _add_columns(self, cur: Any, added: Sequence[NewColumn], where: ErrorContext) -> TableInfo:
        """Add each column, in the batch's order; return the table read again."""
        table = self.options.table
        errors = self.errors
        for column in added:
            try:
                cur.execute(self.add_column_statement(column))
            except errors.error as exc:
                if errors.is_connection_error(exc):
                    raise  # the session is lost: the pooled session's retry, or a retriable error
                again = self.describe_table(cur, table)
                if again is not None and again.column(column.name) is not None:
                    continue  # another sink added it meanwhile: the plan checks its type
                doing = f"adding column {column.name!r} ({column.sql_type}) to table {table}"
                mapped = errors.map_error(
                    exc,
                    doing,
                    secrets=self.connection.secrets,
                    where=where,
                    column=column.name,
                    setting="schema_evolution",
                    hint=LOCK_HINT if errors.classify(exc, "")[0] is AbortRequiredError else None,
                )
                raise mapped from exc
            _log.info(
                "sink %s, batch %s: added column %r (%s, nullable) to table %s "
                "(schema_evolution='add_columns')",
                where.sink,
                where.batch_id,
                column.name,
                column.sql_type,
                table,
            )
        found = self.describe_table(cur, table)
        if found is None:
            raise ConfigurationError(f"table {table} vanished while columns were added")
        return found

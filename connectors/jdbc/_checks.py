"""The driver's checks of the target, alike in every dialect: ids, the table, each batch's schema.

:class:`TableChecks` runs when the sink opens (the identity's transaction ids
fit the database's limit; the table exists, or will be created; the dialect's
own checks of it and of the user's rights) and before every batch (the table
created if asked, the batch's columns and types against it). A dialect's
checker supplies the catalog read, the ``CREATE TABLE`` statement, its type
rules and its id limit. Every statement runs in autocommit mode on a pooled
connection and is safe to repeat: reads, and ``CREATE TABLE IF NOT EXISTS``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, ClassVar

import pyarrow as pa

from twophase.errors import ConfigurationError

from .._context import ErrorContext
from ._client import JdbcClient
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
            self.check_plan(
                found, plan_write(schema, found, options, str(options.table), self.types)
            )

        try:
            self.run(f"checking the schema against {options.table}", check, where)
        except ConfigurationError as exc:
            raise exc.with_context(**where.keywords()) from exc.__cause__

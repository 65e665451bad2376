"""The PostgreSQL dialect's client: psycopg2 sessions with the sink's settings, errors mapped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._context import ErrorContext
from .._client import JdbcClient
from ._dbapi import PSYCOPG2
from ._errors import POSTGRES_ERRORS

if TYPE_CHECKING:
    from ._catalog import ServerInfo

__all__ = ["PostgresClient"]


class PostgresClient(JdbcClient):
    """The PostgreSQL dialect's client: psycopg2, and the sink's session settings."""

    dbapi = PSYCOPG2
    errors = POSTGRES_ERRORS

    def session_settings(self) -> tuple[tuple[str, str], ...]:
        """Return the timeouts, ``TimeZone=UTC``, ``DateStyle`` and ``application_name``.

        Returns
        -------
        tuple of (name, value)
            See :meth:`~.._options.JdbcOptions.session_settings`.
        """
        return self.options.session_settings()

    def server(self, where: ErrorContext) -> ServerInfo:
        """Read the version and ``max_prepared_transactions`` (:data:`~._catalog.server_info`)."""
        from ._catalog import server_info

        return self.read_server(server_info, where)

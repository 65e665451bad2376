"""The PostgreSQL dialect's client: psycopg2 sessions with the sink's settings, errors mapped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from twophase.errors import TwoPhaseError

from .._client import JdbcClient
from . import _errors
from ._driver import PSYCOPG2

if TYPE_CHECKING:
    from ._catalog import ServerInfo

__all__ = ["PostgresClient"]


class _PostgresErrors:
    """psycopg2's errors, mapped by :mod:`._errors`."""

    @property
    def error(self) -> tuple[type[BaseException], ...]:
        import psycopg2

        return (psycopg2.Error,)

    def is_connection_error(self, exc: BaseException) -> bool:
        return _errors.is_connection_error(exc)

    def map_error(
        self,
        exc: BaseException,
        doing: str,
        *,
        secrets: Iterable[str] = (),
        columns: Sequence[tuple[str, str]] = (),
        hint: str | None = None,
        **context: Any,
    ) -> TwoPhaseError:
        return _errors.map_error(exc, doing, secrets=secrets, columns=columns, hint=hint, **context)

    def connection_error(
        self, exc: BaseException, where: str, *, secrets: Iterable[str] = (), **context: Any
    ) -> TwoPhaseError:
        return _errors.connection_error(exc, where, secrets=secrets, **context)


class PostgresClient(JdbcClient):
    """The PostgreSQL dialect's client: psycopg2, and the sink's session settings.

    Parameters
    ----------
    options
        The sink's options.
    connection
        Connection parameters.
    """

    driver = PSYCOPG2
    errors = _PostgresErrors()

    def session_settings(self) -> tuple[tuple[str, str], ...]:
        """Return the timeouts, ``TimeZone=UTC``, ``DateStyle`` and ``application_name``.

        Returns
        -------
        tuple of (name, value)
            See :meth:`~._options.JdbcOptions.session_settings`.
        """
        return self.options.session_settings()

    def server(self, **context: Any) -> ServerInfo:
        """Read the server's version and ``max_prepared_transactions``.

        Parameters
        ----------
        **context
            Error context.

        Returns
        -------
        ServerInfo
            The values.
        """
        from ._catalog import server_info

        return self.run("reading the server settings", server_info, **context)

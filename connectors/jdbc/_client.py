"""Statements on a pooled connection, with one retry when a pooled connection died idle.

:class:`PostgresClient` is what the executor side (:mod:`._writer`) and the
driver side (:mod:`._checks`, :mod:`._prepared`, :mod:`._markers`) have in
common: the sink's options and connection parameters (so it pickles with the
sink), the process-wide pool they select, and one way to run statements on it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import psycopg2

from ._catalog import ServerInfo, server_info
from ._config import ConnectionConfig
from ._errors import connection_error, is_connection_error, map_error
from ._options import JdbcOptions
from ._pool import ConnectionPool, pool_for

__all__ = ["PostgresClient"]

T = TypeVar("T")


class PostgresClient:
    """Options and connection parameters, and statements run on their pool.

    Picklable: values only.

    Parameters
    ----------
    options
        The sink's options.
    connection
        Connection parameters.
    """

    def __init__(self, options: JdbcOptions, connection: ConnectionConfig) -> None:
        self.options = options
        self.connection = connection

    def pool(self) -> ConnectionPool:
        """Return the process-wide pool for the sink's server and settings.

        Returns
        -------
        ConnectionPool
            The pool.
        """
        return pool_for(
            self.connection, self.options.session_settings(), self.options.connect_timeout
        )

    def session(self, doing: str, fn: Callable[[Any], T], **context: Any) -> tuple[T, Any]:
        """Run ``fn(cursor)`` on a pooled connection and hand the connection over.

        A pooled connection that turns out dead at its first statement is
        replaced once, transparently; ``fn`` must therefore be safe to run
        again after a connection failure. On any error the connection is
        rolled back and given back (or closed) before the error is raised.

        Parameters
        ----------
        doing
            What is being done, for error messages.
        fn
            The work; it receives a cursor.
        **context
            Error context (sink, batch_id, partition_id, column, setting).

        Returns
        -------
        tuple
            ``(what fn returned, connection)``; the caller owns the
            connection and gives it back to :meth:`pool`.
        """
        pool = self.pool()
        secrets = self.connection.secrets
        for try_number in (0, 1):
            try:
                conn, reused = pool.acquire()
            except psycopg2.Error as exc:
                raise connection_error(
                    exc, self.connection.describe(), secrets=secrets, **context
                ) from None
            try:
                with conn.cursor() as cur:
                    return fn(cur), conn
            except psycopg2.Error as exc:
                if is_connection_error(exc):
                    pool.discard(conn, flush=True)
                    if reused and try_number == 0:
                        continue  # it died while idle (server restart): once more, fresh
                else:
                    pool.release(conn, rollback=True)
                raise map_error(exc, doing, secrets=secrets, **context) from exc
            except BaseException:
                pool.release(conn, rollback=True)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def run(self, doing: str, fn: Callable[[Any], T], **context: Any) -> T:
        """Run ``fn(cursor)`` on a pooled connection in autocommit mode and give it back.

        Parameters
        ----------
        doing
            What is being done, for error messages.
        fn
            The work; it receives a cursor.
        **context
            Error context.

        Returns
        -------
        T
            What ``fn`` returned.
        """
        result, conn = self.session(doing, fn, **context)
        self.pool().release(conn)
        return result

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
        return self.run("reading the server settings", server_info, **context)

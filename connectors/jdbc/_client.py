"""Statements on a pooled connection, with one retry when a pooled connection died idle.

:class:`JdbcClient` is what the executor side and the driver side of every
dialect have in common: the sink's options and connection parameters (so it
pickles with the sink), the process-wide pool they select, and one way to run
statements on it. A dialect's client names its DB-API layer (:class:`~._pool.DbApi`),
how its errors map onto :mod:`twophase.errors` (:class:`~._errors.ErrorMap`) and the
settings of its sessions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

from twophase.errors import RetriableError, TwoPhaseError

from .._context import ErrorContext
from ._config import ConnectionConfig
from ._errors import ErrorMap
from ._options import JdbcOptions
from ._pool import ConnectionPool, DbApi, pool_for

__all__ = ["JdbcClient", "ServerQuery", "lost_connection", "unreachable"]

T = TypeVar("T")


class JdbcClient:
    """Options and connection parameters, and statements run on their pool.

    Picklable: values only. Subclasses set :attr:`dbapi` and :attr:`errors`
    and may override :meth:`session_settings`.

    Parameters
    ----------
    options
        The sink's options.
    connection
        Connection parameters.
    """

    dbapi: ClassVar[DbApi]
    errors: ClassVar[ErrorMap]

    def __init__(self, options: JdbcOptions, connection: ConnectionConfig) -> None:
        self.options = options
        self.connection = connection

    def session_settings(self) -> tuple[tuple[str, str], ...]:
        """Return the settings every session of the sink starts with.

        Returns
        -------
        tuple of (name, value)
            Applied by the DB-API layer when a connection opens.
        """
        return ()

    def pool(self) -> ConnectionPool:
        """Return the process-wide pool for the sink's server and settings.

        Returns
        -------
        ConnectionPool
            The pool.
        """
        return pool_for(self.connection, self.session_settings(), self.options.bounds, self.dbapi)

    def session(self, doing: str, fn: Callable[[Any], T], where: ErrorContext) -> tuple[T, Any]:
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
        where
            The sink, batch and partition, named by every error.

        Returns
        -------
        tuple
            ``(what fn returned, connection)``; the caller owns the
            connection and gives it back to :meth:`pool`.
        """
        pool = self.pool()
        secrets = self.connection.secrets
        errors = self.errors
        for try_number in (0, 1):
            try:
                conn, reused = pool.acquire()
            except errors.error as exc:
                failed = errors.connection_error(
                    exc, self.connection.describe(), secrets=secrets, where=where
                )
                raise unreachable(failed, pool) from None
            except TwoPhaseError as exc:  # the dialect refused the server (not the target)
                raise exc.with_context(**where.keywords()) from None
            try:
                cur = conn.cursor()
                try:
                    return fn(cur), conn
                finally:
                    cur.close()
            except errors.error as exc:
                hint = None
                if errors.is_connection_error(exc):
                    pool.discard(conn, flush=True)
                    if reused and try_number == 0:
                        continue  # it died while idle (server restart, partition): once more
                    doing, hint = lost_connection(doing, pool)
                else:
                    pool.release(conn, rollback=True)
                raise errors.map_error(exc, doing, secrets=secrets, hint=hint, where=where) from exc
            except BaseException:
                pool.release(conn, rollback=True)
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def run(self, doing: str, fn: Callable[[Any], T], where: ErrorContext) -> T:
        """Run ``fn(cursor)`` as :meth:`session` does, in autocommit mode; return what it returned.

        The connection is given back to the pool.
        """
        result, conn = self.session(doing, fn, where)
        self.pool().release(conn)
        return result

    def read_server(self, query: ServerQuery[T], where: ErrorContext) -> T:
        """Read what the sink needs to know about the server (a dialect's :class:`ServerQuery`).

        Parameters
        ----------
        query
            The dialect's statement and the value its row makes.
        where
            The sink, batch and partition, named by every error.

        Returns
        -------
        T
            The value, e.g. the server's version.
        """
        return self.run(query.doing, query, where)


@dataclass(frozen=True)
class ServerQuery(Generic[T]):
    """What a dialect reads of its server: one statement, and the value its one row makes.

    Callable on a cursor, as every catalog read is.

    Attributes
    ----------
    doing
        What reading it is, for error messages (``"reading the server settings"``).
    statement
        The ``SELECT`` of one row.
    parse
        Makes the value from the row's columns.
    """

    doing: str
    statement: str
    parse: Callable[..., T]

    def __call__(self, cur: Any) -> T:
        cur.execute(self.statement)
        return self.parse(*cur.fetchone())


def unreachable(error: TwoPhaseError, pool: ConnectionPool) -> TwoPhaseError:
    """Add the connect bound to a retriable failure to connect (an unreachable server).

    Parameters
    ----------
    error
        What :meth:`~._errors.ErrorMap.connection_error` returned.
    pool
        The pool that tried.

    Returns
    -------
    TwoPhaseError
        ``error``, or a copy of it whose message names ``connect_timeout``.
    """
    if not isinstance(error, RetriableError):
        return error  # credentials, a missing database: nothing to do with the network
    return RetriableError(
        f"{error.message} (connect_timeout={pool.bounds.connect_timeout} s). The server is "
        "down or unreachable (a network partition?); the query can be restarted once it is "
        "reachable",
        sink=error.sink,
        batch_id=error.batch_id,
        partition_id=error.partition_id,
        setting=error.setting,
    )


def lost_connection(doing: str, pool: ConnectionPool) -> tuple[str, str]:
    """Return what to say of a step whose connection was lost: where, and the bound.

    Parameters
    ----------
    doing
        The step (``"COMMIT PREPARED"``).
    pool
        The pool of the lost connection.

    Returns
    -------
    tuple of str
        ``(doing on the server, hint)`` for :meth:`~._errors.ErrorMap.map_error`.
    """
    return f"{doing} on {pool.config.describe()}", pool.bounds.lost_hint()

"""Connections kept per process and reused across batches, for every dialect.

One :class:`ConnectionPool` per (client library, connection parameters, session
settings) in each process, shared by every sink of that process (see
"Connections" in ``docs/jdbc.md``). Connections run in autocommit mode; a
connection is only put back when the session is idle and not in a
transaction, anything else is closed. The pools notice a ``fork()`` and never
reuse a parent's connection in a child. What differs between databases -- how
to connect, and how to tell an idle session -- is the dialect's
:class:`DbApi`; how long a session may wait on the network, :mod:`._network`.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from typing import Any, Protocol

from ._config import ConnectionConfig
from ._network import NetworkBounds

__all__ = ["ConnectionPool", "DbApi", "close_connections", "pool_for"]

_MAX_IDLE = 8


class DbApi(Protocol):
    """How one DB-API client library opens a session and tells its state.

    Attributes
    ----------
    name
        The client library's name (part of the pool's key).
    """

    name: str

    def connect(
        self, config: ConnectionConfig, settings: tuple[tuple[str, str], ...], bounds: NetworkBounds
    ) -> Any:
        """Open a bounded autocommit session with the settings; raise the client library's error."""
        ...

    def is_closed(self, conn: Any) -> bool:
        """Whether the connection is known to be closed."""
        ...

    def is_idle(self, conn: Any) -> bool:
        """Whether the session is in autocommit mode with no transaction open."""
        ...

    def rollback(self, conn: Any) -> None:
        """Roll back whatever transaction the session has open (nothing if idle)."""
        ...


class ConnectionPool:
    """Idle connections to one server with one set of session settings.

    Thread-safe: each connection is used by one caller at a time (taken out of
    the pool while in use).

    Parameters
    ----------
    config
        Connection parameters.
    settings
        ``(name, value)`` pairs set on every new session.
    bounds
        How long to wait for a connection and on a silent peer, unless the
        parameters say otherwise.
    max_idle
        Idle connections kept; more are closed when given back.
    dbapi
        The dialect's DB-API layer (its client library).
    """

    def __init__(
        self,
        config: ConnectionConfig,
        settings: tuple[tuple[str, str], ...],
        bounds: NetworkBounds,
        dbapi: DbApi,
        max_idle: int = _MAX_IDLE,
    ) -> None:
        self.dbapi = dbapi
        self.config = config
        self.settings = settings
        self.bounds = bounds
        self.max_idle = max_idle
        self._idle: list[Any] = []
        self._lock = threading.Lock()
        self.opened = 0  # connections opened by this pool (observability, tests)

    def connect(self) -> Any:
        """Open a new connection (autocommit, session settings applied).

        Returns
        -------
        Any
            The connection; the caller owns it.

        Raises
        ------
        Exception
            The client library's error: the server is unreachable or refuses the connection.
        """
        conn = self.dbapi.connect(self.config, self.settings, self.bounds)
        self.opened += 1
        return conn

    def acquire(self) -> tuple[Any, bool]:
        """Take an idle connection, or open one.

        Returns
        -------
        tuple
            ``(connection, reused)``: ``reused`` is True when the connection
            comes from the pool (it may have died while idle; the caller
            retries once on a new connection when its first statement fails).
        """
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not self.dbapi.is_closed(conn):
                    return conn, True
        return self.connect(), False

    def release(self, conn: Any, *, rollback: bool = False) -> None:
        """Give a connection back; it is closed unless idle and healthy.

        Parameters
        ----------
        conn
            A connection from :meth:`acquire` or :meth:`connect`.
        rollback
            First roll back whatever transaction the session has open (a
            connection whose ``ROLLBACK`` fails is closed).
        """
        if rollback:
            try:
                self.dbapi.rollback(conn)
            except Exception:
                self.discard(conn)
                return
        healthy = self.dbapi.is_idle(conn)
        if healthy:
            with self._lock:
                if len(self._idle) < self.max_idle:
                    self._idle.append(conn)
                    return
        _close_quietly(conn)

    def discard(self, conn: Any, *, flush: bool = False) -> None:
        """Close a connection that failed; with ``flush``, also every idle one.

        Parameters
        ----------
        conn
            The failed connection.
        flush
            Drop the idle connections too (after a connection failure: the
            server probably restarted and they are dead as well).
        """
        _close_quietly(conn)
        if flush:
            with self._lock:
                idle, self._idle = self._idle, []
            for other in idle:
                _close_quietly(other)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)

    @property
    def idle_count(self) -> int:
        """Number of idle connections (for tests and metrics).

        Returns
        -------
        int
            Connections waiting in the pool.
        """
        with self._lock:
            return len(self._idle)


def _close_quietly(conn: Any) -> None:
    with contextlib.suppress(Exception):  # closing a broken connection may fail
        conn.close()


_POOLS: dict[tuple[Any, ...], ConnectionPool] = {}
_POOLS_LOCK = threading.Lock()
_POOLS_PID = os.getpid()
# Connections inherited through fork() are kept referenced, never closed or
# garbage-collected in the child: closing would end the parent's session.
_INHERITED: list[ConnectionPool] = []


def pool_for(
    config: ConnectionConfig,
    settings: tuple[tuple[str, str], ...],
    bounds: NetworkBounds,
    dbapi: DbApi,
) -> ConnectionPool:
    """Return the process-wide pool for this client library, these parameters and settings.

    Parameters
    ----------
    config
        Connection parameters.
    settings
        Session settings.
    bounds
        How long to wait on the network.
    dbapi
        The dialect's DB-API layer.

    Returns
    -------
    ConnectionPool
        Shared by every sink of this process with the same arguments.
    """
    global _POOLS_PID
    key = (dbapi.name, config.key, settings, bounds)
    with _POOLS_LOCK:
        if os.getpid() != _POOLS_PID:
            _INHERITED.extend(_POOLS.values())
            _POOLS.clear()
            _POOLS_PID = os.getpid()
        pool = _POOLS.get(key)
        if pool is None:
            pool = _POOLS[key] = ConnectionPool(config, settings, bounds, dbapi=dbapi)
        return pool


def close_connections() -> None:
    """Close the idle connections every JDBC sink of this process keeps between batches.

    Sinks keep one pool per server and settings in each Python process (driver,
    Python workers), reused across batches and sinks. Call this in tests (after
    a test's server is stopped, or between tests that must not share
    connections) and where a long-lived process is done with its databases; it runs
    at exit anyway. The next batch opens new connections. Connections in use
    are not touched.
    """
    with _POOLS_LOCK:
        pools = list(_POOLS.values()) if os.getpid() == _POOLS_PID else []
        _POOLS.clear()
    for pool in pools:
        pool.close()


atexit.register(close_connections)

"""A throwaway MariaDB server on 127.0.0.1, for the JDBC connector's XA (MariaDB/MySQL) dialect.

The server is made with the binaries :mod:`._binaries` finds: a data directory initialised by
``mariadb-install-db`` in a throwaway directory (its option file written by :mod:`._datadir`), then
``mariadbd`` started directly (its own port, socket, pid file and option file; no system service)
so its pid is known. As root it runs as root (``--user=root``). The test helpers' XA statements and
the URLs are in :mod:`._client`; the life cycle shared with PostgreSQL is
:class:`~twophase_dev._database.DatabaseServer`'s.

XA: prepared XA transactions survive their connection's end, a clean shutdown and a crash (since
MariaDB 10.5, MDEV-742). They need no privilege of their own: any user may ``XA START`` and, once
connected, ``XA RECOVER``, ``XA COMMIT`` or ``XA ROLLBACK`` *any* prepared XA transaction (unlike
MySQL 8, which has ``XA_RECOVER_ADMIN``). The binary log is on by default, as on most production
servers: XA then goes through the binlog's two-phase logging. ``binlog=False`` gives a server
without it; both keep prepared transactions over ``kill()``.

There is no "server without XA": MariaDB has no setting like PostgreSQL's
``max_prepared_transactions = 0`` (``innodb_support_xa`` is gone since 10.3) and no privilege
withholds XA. The JDBC connector's ``markers`` protocol does not use XA at all, so it needs no
special server; there is no ``mariadb-no-xa`` service.

With ``netns=`` the server runs inside a :class:`~twophase_dev.NetworkNamespace` and listens on
its address; ``root`` is then also admitted from the namespace's peer address (an ``--init-file``
creates ``'root'@'<peer>'`` at each start), where this process's clients come from.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twophase_dev._database import DatabaseServer
from twophase_dev._host._proc import process_alive
from twophase_dev._host._process import ManagedProcess, run_logged
from twophase_dev._host._wait import wait_until
from twophase_dev._mariadb._binaries import find_mariadb_binaries
from twophase_dev._mariadb._client import parse_url, prepared_xids, rollback_prepared
from twophase_dev._mariadb._datadir import (
    DATABASE,
    SUPERUSER,
    TEST_PASSWORD,
    TEST_USER,
    install_db_argv,
    option_file_text,
    peer_root_sql,
)

if TYPE_CHECKING:
    from twophase_dev._netns._namespace import NetworkNamespace

__all__ = ["MariaDBServer"]

_STOP_SIGNALS = {
    "fast": signal.SIGTERM,  # normal shutdown: open transactions roll back, prepared XA stay
    "kill": signal.SIGKILL,  # a crash: InnoDB (and binlog) recovery at the next start
}


class MariaDBServer(DatabaseServer):
    """A throwaway MariaDB server listening on 127.0.0.1 only.

    Parameters
    ----------
    port : int, optional
        TCP port; a free one is picked if omitted. An explicit port that is taken fails with a clear
        :class:`DevInfraError`; a picked one that is taken meanwhile is retried with a new port.
    binlog : bool, optional
        Whether the binary log is on (default ``True``, the usual production setting).
    work_dir : pathlib.Path, optional
        Directory for the data (``<work_dir>/data``), socket, pid and option files; a throwaway
        ``twophase-dev-mariadb-*`` directory in the system temporary directory by default (removed
        by :meth:`stop`).
    log_dir : pathlib.Path, optional
        Where ``mariadb.log`` (server log) and ``install-db.log`` go; kept after :meth:`stop`.
        Defaults to ``<work_dir>/logs`` (removed with the work dir).
    settings : mapping of str to str, optional
        Extra ``[mariadbd]`` options of the option file, e.g. ``{"innodb_lock_wait_timeout": "5"}``.
    detach : bool, optional
        ``True`` for a server that outlives this Python process (``twophase-dev up``); ``False``
        (default) makes the kernel shut it down if this process dies first.
    startup_timeout : float, optional
        Seconds to wait for the server to accept connections.
    netns : NetworkNamespace, optional
        Run the server inside this (created) network namespace: it then listens on the
        namespace's address only, every URL names that address and ``root`` may connect from the
        namespace's peer address. :meth:`to_record` refuses such a server.

    Notes
    -----
    Authentication: ``root`` connects without password over 127.0.0.1 (with ``netns``: from the
    namespace's peer address) and the socket; user
    ``twophase`` (password ``twophase``) has all privileges on database ``twophase`` and nothing
    else, which is all XA and ``LOAD DATA LOCAL INFILE`` need (``local_infile`` is on). Durability
    is traded for speed where a server crash stays safe: InnoDB writes its log to the OS at each
    commit and prepare but does not flush it (``innodb_flush_log_at_trx_commit = 2``), no
    doublewrite buffer; an OS crash may lose data, which a throwaway server can afford.

    Examples
    --------
    >>> with MariaDBServer() as db:  # doctest: +SKIP
    ...     conn = db.connect()
    """

    kind = "mariadb"
    product = "MariaDB"
    address_env = "TWOPHASE_MARIADB_URL"
    log_name = "mariadb.log"
    stop_signals = _STOP_SIGNALS

    def __init__(
        self,
        *,
        port: int | None = None,
        binlog: bool = True,
        work_dir: Path | None = None,
        log_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        detach: bool = False,
        startup_timeout: float = 60.0,
        netns: NetworkNamespace | None = None,
    ):
        super().__init__(
            port=port,
            work_dir=work_dir,
            log_dir=log_dir,
            settings=settings,
            detach=detach,
            startup_timeout=startup_timeout,
            netns=netns,
        )
        self.binlog = binlog
        self._external: dict[str, Any] | None = None
        self._server_bin: Path | None = None
        self._install_bin: Path | None = None

    # ---------------------------------------------------------------- attaching

    @classmethod
    def external(cls, url: str) -> MariaDBServer:
        """Describe a server that this package did not start (e.g. ``$TWOPHASE_MARIADB_URL``).

        Parameters
        ----------
        url : str
            ``mysql://user[:password]@host[:port]/database`` (``mariadb://`` also accepted) of a
            user who may create tables in ``database``.

        Returns
        -------
        MariaDBServer
            A handle whose connection properties work, while :meth:`start`, :meth:`stop` and
            :meth:`restart` raise :class:`DevInfraError`.
        """
        params = parse_url(url)
        server = cls(port=int(params["port"]))
        server.host = str(params["host"])
        server._external = {**params, "url": url}
        server.managed = False
        rows = server._query("SELECT @@log_bin")
        server.binlog = bool(rows and int(rows[0][0]))
        return server

    @classmethod
    def _options_of_record(cls, record: Mapping[str, Any]) -> dict[str, Any]:
        return {"binlog": bool(record.get("binlog", True))}

    def _record_options(self) -> dict[str, Any]:
        return {"url": self.url, "binlog": self.binlog}

    def _repr_options(self) -> str:
        return f"binlog={self.binlog}"

    # ---------------------------------------------------------------- connection properties

    @property
    def url(self) -> str:
        """URL of the superuser ``root`` (no password) on database ``twophase``."""
        if self._external is not None:
            return str(self._external["url"])
        return f"mysql://{SUPERUSER}@{self.host}:{self._require_port()}/{DATABASE}"

    @property
    def password_url(self) -> str:
        """URL of the password-authenticated user ``twophase``."""
        return f"mysql://{TEST_USER}:{TEST_PASSWORD}@{self.host}:{self._require_port()}/{DATABASE}"

    @property
    def jdbc_url(self) -> str:
        """JDBC URL of database ``twophase`` for MariaDB Connector/J (user and password apart)."""
        return f"jdbc:mariadb://{self.host}:{self._require_port()}/{DATABASE}"

    def connect_kwargs(self, *, superuser: bool = True) -> dict[str, Any]:
        """Return keyword arguments for ``pymysql.connect``.

        Parameters
        ----------
        superuser : bool, optional
            ``True`` for ``root``, ``False`` for the password user ``twophase``.

        Returns
        -------
        dict
            ``host``, ``port``, ``user``, ``password``, ``database``.
        """
        if self._external is not None and superuser:
            return {k: self._external[k] for k in ("host", "port", "user", "password", "database")}
        return {
            "host": self.host,
            "port": self._require_port(),
            "user": SUPERUSER if superuser else TEST_USER,
            "password": "" if superuser else TEST_PASSWORD,
            "database": DATABASE,
        }

    def connect(self, *, superuser: bool = True, database: str | None = None, **kwargs: Any) -> Any:
        """Open a PyMySQL connection (autocommit off, as PyMySQL defaults).

        Parameters
        ----------
        superuser : bool, optional
            See :meth:`connect_kwargs`.
        database : str, optional
            Another database than ``twophase`` (``None`` keeps it).
        **kwargs
            Passed on to ``pymysql.connect``, e.g. ``local_infile=True``.

        Returns
        -------
        pymysql.connections.Connection
            The new connection; close it yourself.
        """
        import pymysql

        params = self.connect_kwargs(superuser=superuser)
        if database is not None:
            params["database"] = database
        params.setdefault("connect_timeout", 5)
        params.update(kwargs)
        return pymysql.connect(**params)

    def _query(self, sql: str) -> list[tuple[Any, ...]]:
        """Run one statement as the superuser on a connection of its own; return its rows."""
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(sql)
                return list(cur.fetchall())
        finally:
            conn.close()

    # ---------------------------------------------------------------- paths and state

    @property
    def socket_path(self) -> Path:
        """The server's Unix socket."""
        return self._require_work_dir() / "mariadbd.sock"

    @property
    def _options_file(self) -> Path:
        """The option file the server reads (``--defaults-file``)."""
        return self._require_work_dir() / "my.cnf"

    @property
    def _netns_init_file(self) -> Path:
        """SQL the server runs at each start in a network namespace (``--init-file``)."""
        return self._require_work_dir() / "netns-init.sql"

    # ---------------------------------------------------------------- lifecycle

    def _locate(self) -> None:
        self._server_bin, self._install_bin = find_mariadb_binaries()

    def _configure(self) -> None:
        work_dir = self._require_work_dir()
        self._options_file.write_text(
            option_file_text(
                host=self.host,
                work_dir=work_dir,
                socket=self.socket_path,
                binlog=self.data_dir / "binlog" if self.binlog else None,
                extra=self.extra_settings,
            )
        )
        if self.netns is not None:
            self._netns_init_file.write_text(peer_root_sql(self.netns.peer_address))

    def _initialize(self) -> None:
        assert self._install_bin is not None
        run_logged(
            install_db_argv(self._install_bin, self._options_file, self.data_dir),
            what="mariadb-install-db",
            cwd=self._require_work_dir(),
            log_file=self.log_dir / "install-db.log",
        )

    def _spawn(self) -> ManagedProcess:
        assert self._server_bin is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("MYSQL")}
        # --defaults-file must come first; datadir and port on the command line too, so that the
        # process is recognisable (ManagedProcess's marker) and the port can change on a retry.
        argv = [
            str(self._server_bin),
            f"--defaults-file={self._options_file}",
            f"--datadir={self.data_dir}",
            f"--port={self._require_port()}",
        ]
        if self.netns is not None:
            argv.append(f"--init-file={self._netns_init_file}")
        return ManagedProcess.spawn(
            argv,
            marker=self._marker(),
            log_file=self.log_file,
            cwd=self._require_work_dir(),
            env=env,
            detach=self.detach,
            death_signal=self.death_signal,
            namespace_prefix=self._namespace_prefix(),
        )

    def _is_port_race(self, log: str) -> bool:
        return "Address already in use" in log

    def _accepts_connections(self) -> bool:
        import pymysql

        try:
            conn = self.connect(database="mysql" if self.managed else None, connect_timeout=2)
        except pymysql.err.OperationalError:
            return False
        conn.close()
        return True

    def _bootstrap(self) -> None:
        conn = self.connect(database="mysql", autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute(f"CREATE DATABASE {DATABASE}")
                cur.execute(f"CREATE USER '{TEST_USER}'@'%%' IDENTIFIED BY %s", (TEST_PASSWORD,))
                cur.execute(f"GRANT ALL PRIVILEGES ON {DATABASE}.* TO '{TEST_USER}'@'%'")
        finally:
            conn.close()

    def stop(self, *, mode: str = "fast", timeout: float = 30.0, remove_data: bool = True) -> None:
        """Shut the server down and, by default, delete its data.

        Parameters
        ----------
        mode : {"fast", "kill"}, optional
            ``fast`` is MariaDB's normal shutdown (``SIGTERM``): open transactions roll back,
            prepared XA transactions stay. ``kill`` is a crash (``SIGKILL``).
        timeout : float, optional
            Seconds to wait before escalating to ``SIGKILL``.
        remove_data : bool, optional
            Delete the work directory if this handle created it (logs in an explicit ``log_dir``
            are kept).
        """
        super().stop(mode=mode, timeout=timeout, remove_data=remove_data)

    def _after_stop(self) -> None:
        # A server started by another process is judged by its command line, which is gone
        # before the process is: wait for the process and its port, so a restart can bind it.
        assert self._process is not None
        pid, port = self._process.pid, self.port
        wait_until(lambda: not process_alive(pid), timeout=10.0, interval=0.05)
        if port is not None:
            wait_until(lambda: self._port_free(port), timeout=10.0, interval=0.05)

    def kill(self) -> None:
        """Crash the server (``SIGKILL``); :meth:`start` or :meth:`restart` recovers it.

        Committed and prepared XA transactions survive; the same server comes back on the same
        port.
        """
        self.stop(mode="kill", remove_data=False)

    def restart(self, *, mode: str = "fast", timeout: float = 30.0) -> None:
        """Stop the server and start it again on the same port with the same data.

        Parameters
        ----------
        mode : {"fast", "kill"}, optional
            How to stop it, see :meth:`stop`.
        timeout : float, optional
            Seconds to wait for the shutdown.
        """
        super().restart(mode=mode, timeout=timeout)

    # ---------------------------------------------------------------- helpers

    def prepared_xids(self) -> list[str]:
        """Return the global transaction ids of all prepared XA transactions (``XA RECOVER``).

        Returns
        -------
        list of str
            The gtrids (the ``data`` column with its branch qualifier cut off), sorted.
        """
        return prepared_xids(self._query("XA RECOVER"))

    def rollback_prepared(self, xid_pattern: str = ".*") -> list[str]:
        """Roll back the prepared XA transactions whose gtrid matches a regular expression.

        Every format id and branch qualifier is matched (the xid is rolled back
        as ``XA ROLLBACK X'gtrid', X'bqual', formatID``).

        Parameters
        ----------
        xid_pattern : str, optional
            Python regular expression matched against the start of each gtrid.

        Returns
        -------
        list of str
            The gtrids rolled back.
        """
        return rollback_prepared(self.connect(autocommit=True), xid_pattern)

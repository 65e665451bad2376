"""A throwaway MariaDB server on 127.0.0.1, for the JDBC connector's XA (MariaDB/MySQL) dialect.

The server is made with the binaries of Debian's ``mariadb-server-core`` package: a data directory
initialised by ``mariadb-install-db`` in a throwaway directory, then ``mariadbd`` started directly
(its own port, socket, pid file and option file; no system service) so its pid is known. As root it
runs as root (``--user=root``).

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

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import unquote, urlsplit

from twophase_dev._common import (
    LOOPBACK,
    DevInfraError,
    ManagedProcess,
    PortRaceError,
    free_ports,
    make_work_dir,
    port_is_free,
    process_alive,
    rotate_log,
    tail,
    wait_until,
    write_owner,
)

__all__ = ["MariaDBServer", "find_mariadb_binaries"]

#: Superuser, without password, on 127.0.0.1 and the socket (``root`` of ``mariadb-install-db``).
SUPERUSER = "root"
#: Ordinary user that must authenticate with a password; owns database ``twophase``.
TEST_USER = "twophase"
TEST_PASSWORD = "twophase"
#: Database created for tests.
DATABASE = "twophase"
#: URL schemes accepted by :meth:`MariaDBServer.external`.
_SCHEMES = ("mysql", "mariadb")

_STOP_SIGNALS = {
    "fast": signal.SIGTERM,  # normal shutdown: open transactions roll back, prepared XA stay
    "kill": signal.SIGKILL,  # a crash: InnoDB (and binlog) recovery at the next start
}


def find_mariadb_binaries() -> tuple[Path, Path]:
    """Locate ``mariadbd`` and ``mariadb-install-db``.

    Returns
    -------
    tuple of pathlib.Path
        ``(mariadbd, mariadb-install-db)``, from ``$TWOPHASE_MARIADB_BIN`` (a directory holding
        both) if set, else from ``/usr/sbin`` and ``PATH``.

    Raises
    ------
    DevInfraError
        If either is missing.
    """
    explicit = os.environ.get("TWOPHASE_MARIADB_BIN")
    if explicit:
        server, install = Path(explicit) / "mariadbd", Path(explicit) / "mariadb-install-db"
        if not (server.is_file() and install.is_file()):
            raise DevInfraError(
                f"TWOPHASE_MARIADB_BIN={explicit} lacks mariadbd or mariadb-install-db"
            )
        return server, install
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"])
    server_path = shutil.which("mariadbd", path=search)
    install_path = shutil.which("mariadb-install-db", path=search)
    if server_path is None or install_path is None:
        raise DevInfraError(
            "MariaDB server binaries (mariadbd, mariadb-install-db) were not found. Install them "
            "with 'bash scripts/setup.sh' (or 'apt-get install -y mariadb-server-core "
            "mariadb-client-core'), or set TWOPHASE_MARIADB_BIN."
        )
    return Path(server_path), Path(install_path)


class MariaDBServer:
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

    Notes
    -----
    Authentication: ``root`` connects without password over 127.0.0.1 and the socket; user
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
    ):
        self.host = LOOPBACK
        self.port = port
        self.binlog = binlog
        self._fixed_port = port is not None
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir
        self._log_dir = log_dir
        self.extra_settings = dict(settings or {})
        self.detach = detach
        self.startup_timeout = startup_timeout
        self._process: ManagedProcess | None = None
        self._initialized = False
        self._external: dict[str, Any] | None = None
        #: ``False`` for a server this package did not start (see :meth:`external`).
        self.managed = True
        #: Seconds the last :meth:`start` took (``mariadb-install-db`` included on the first).
        self.startup_seconds: float | None = None

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
        conn = server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT @@log_bin")
                row = cur.fetchone()
        finally:
            conn.close()
        server.binlog = bool(row and int(row[0]))
        return server

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> MariaDBServer:
        """Re-create the handle of a server started by another process (see :meth:`to_record`).

        Parameters
        ----------
        record : mapping
            What :meth:`to_record` returned.

        Returns
        -------
        MariaDBServer
            A handle that can stop or restart that server.
        """
        server = cls(
            port=int(record["port"]),
            binlog=bool(record.get("binlog", True)),
            work_dir=Path(record["work_dir"]),
            log_dir=Path(record["log_dir"]),
            settings=dict(record.get("settings", {})),
            detach=True,
        )
        server._own_work_dir = bool(record.get("own_work_dir", True))
        server._initialized = True
        server._process = ManagedProcess(int(record["pid"]), str(server.data_dir))
        return server

    def to_record(self) -> dict[str, Any]:
        """Describe this running server as JSON-serialisable data (for ``twophase-dev`` state).

        Returns
        -------
        dict
            Enough to re-create the handle with :meth:`from_record`.
        """
        if self._process is None or self.work_dir is None:
            raise DevInfraError("the server has not been started")
        return {
            "kind": "mariadb",
            "pid": self._process.pid,
            "port": self.port,
            "url": self.url,
            "binlog": self.binlog,
            "work_dir": str(self.work_dir),
            "own_work_dir": self._own_work_dir,
            "log_dir": str(self.log_dir),
            "log_file": str(self.log_file),
            "settings": self.extra_settings,
        }

    # ---------------------------------------------------------------- connection properties

    def _require_port(self) -> int:
        if self.port is None:
            raise DevInfraError("the server has no port yet: call start() first")
        return self.port

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

    # ---------------------------------------------------------------- paths and state

    def _require_work_dir(self) -> Path:
        if self.work_dir is None:
            raise DevInfraError("the server has no work directory yet: call start() first")
        return self.work_dir

    @property
    def data_dir(self) -> Path:
        """The server's data directory (``datadir``)."""
        return self._require_work_dir() / "data"

    @property
    def socket_path(self) -> Path:
        """The server's Unix socket."""
        return self._require_work_dir() / "mariadbd.sock"

    @property
    def log_dir(self) -> Path:
        """Directory holding ``mariadb.log`` and ``install-db.log``."""
        if self._log_dir is not None:
            return self._log_dir
        return self._require_work_dir() / "logs"

    @property
    def log_file(self) -> Path:
        """The server log (its error log, written to standard error)."""
        return self.log_dir / "mariadb.log"

    @property
    def pid(self) -> int | None:
        """Process id of ``mariadbd``, ``None`` when not started."""
        return None if self._process is None else self._process.pid

    def is_running(self) -> bool:
        """Tell whether the server process is alive.

        Returns
        -------
        bool
            ``True`` while the ``mariadbd`` started by this handle runs; for an :meth:`external`
            server, whether a connection succeeds.
        """
        if not self.managed:
            return self._accepts_connections()
        return self._process is not None and self._process.alive()

    # ---------------------------------------------------------------- lifecycle

    def _require_managed(self, action: str) -> None:
        if not self.managed:
            raise DevInfraError(
                f"cannot {action} the MariaDB server at {self.host}:{self.port}: it was not "
                "started by twophase_dev in this environment (TWOPHASE_MARIADB_URL points at it)"
            )

    def _write_options(self) -> Path:
        work_dir = self._require_work_dir()
        options = {
            "bind_address": LOOPBACK,
            "skip_networking": "0",
            "skip_name_resolve": "1",
            "socket": str(self.socket_path),
            "pid_file": str(work_dir / "mariadbd.pid"),
            "local_infile": "1",
            "character_set_server": "utf8mb4",
            "collation_server": "utf8mb4_bin",
            "default_time_zone": "+00:00",
            "max_connections": "200",
            "innodb_buffer_pool_size": "64M",
            "innodb_log_file_size": "16M",
            # Log written to the OS at each commit and XA PREPARE, not flushed: a server crash
            # (SIGKILL) keeps committed and prepared transactions, an OS crash may not.
            "innodb_flush_log_at_trx_commit": "2",
            "innodb_doublewrite": "0",
            "performance_schema": "0",
        }
        if self.binlog:
            options.update(
                {"log_bin": str(self.data_dir / "binlog"), "server_id": "1", "binlog_format": "ROW"}
            )
        if os.geteuid() == 0:
            options["user"] = "root"  # mariadbd refuses to run as root unless told so
        options.update(self.extra_settings)
        path = work_dir / "my.cnf"
        path.write_text(
            "# Generated by twophase_dev\n[mariadbd]\n"
            + "".join(f"{key} = {value}\n" for key, value in options.items())
        )
        return path

    def _install_db(self, install_db: Path, options: Path) -> None:
        work_dir = self._require_work_dir()
        result = subprocess.run(
            [
                str(install_db),
                f"--defaults-file={options}",
                f"--datadir={self.data_dir}",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ],
            cwd=work_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        (self.log_dir / "install-db.log").write_text(result.stdout + result.stderr)
        if result.returncode != 0:
            raise DevInfraError(
                f"mariadb-install-db failed (exit {result.returncode}):\n"
                f"{(result.stdout + result.stderr).strip()[-2000:]}"
            )

    def start(self) -> MariaDBServer:
        """Create the data directory on the first call, start the server, wait until it accepts.

        Returns
        -------
        MariaDBServer
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If MariaDB is not installed, the port is taken (when given explicitly), or the server
            does not start in time; the message includes the end of its log.
        """
        self._require_managed("start")
        if self.is_running():
            return self
        started = time.monotonic()
        server, install_db = find_mariadb_binaries()
        created = self.work_dir is None
        if self.work_dir is None:
            self.work_dir = make_work_dir("mariadb")
        try:
            self._start_in(server, install_db)
        except BaseException:
            if created:
                if self._process is not None and self._process.alive():
                    self._process.stop([])
                shutil.rmtree(self.work_dir, ignore_errors=True)
                self.work_dir = None
                self._initialized = False
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _start_in(self, server: Path, install_db: Path) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        options = self._write_options()
        first_start = not self._initialized
        if first_start:
            self._install_db(install_db, options)
            self._initialized = True
        attempts = 1 if self._fixed_port else 3
        for attempt in range(1, attempts + 1):
            if self.port is None:
                self.port = free_ports(1)[0]
            if not port_is_free(self.port):
                if self._fixed_port:
                    raise DevInfraError(
                        f"MariaDB port {self.port} on {LOOPBACK} is already in use by another "
                        f"process (see 'ss -ltnp | grep :{self.port}'); pick another port or omit "
                        "it to get a free one"
                    )
                self.port = None
                continue
            rotate_log(self.log_file)
            try:
                self._launch(server, options)
                break
            except PortRaceError:
                if attempt == attempts:
                    raise DevInfraError(
                        f"MariaDB could not bind a port after {attempts} attempts; "
                        f"see {self.log_file}"
                    ) from None
                self.port = None
        else:
            raise DevInfraError(f"no free port found for MariaDB after {attempts} attempts")
        if first_start:
            self._bootstrap_users()

    def _launch(self, server: Path, options: Path) -> None:
        work_dir = self._require_work_dir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MYSQL")}
        # --defaults-file must come first; datadir and port on the command line too, so that the
        # process is recognisable (ManagedProcess's marker) and the port can change on a retry.
        self._process = ManagedProcess.spawn(
            [
                str(server),
                f"--defaults-file={options}",
                f"--datadir={self.data_dir}",
                f"--port={self.port}",
            ],
            marker=str(self.data_dir),
            log_file=self.log_file,
            cwd=work_dir,
            env=env,
            detach=self.detach,
            death_signal="TERM",
        )
        write_owner(work_dir, self._process.pid)

        def died() -> None:
            assert self._process is not None
            if self._process.alive():
                return
            log = tail(self.log_file, 30)
            if "Address already in use" in log and not self._fixed_port:
                raise PortRaceError()
            raise DevInfraError(
                f"MariaDB exited during startup (exit {self._process.returncode()}). "
                f"Log {self.log_file}:\n{log}"
            )

        if not wait_until(
            self._accepts_connections, timeout=self.startup_timeout, interval=0.1, abort=died
        ):
            self._process.stop([])
            raise DevInfraError(
                f"MariaDB did not accept connections within {self.startup_timeout:.0f} s. "
                f"Log {self.log_file}:\n{tail(self.log_file, 30)}"
            )

    def _accepts_connections(self) -> bool:
        import pymysql

        try:
            conn = self.connect(database="mysql" if self.managed else None, connect_timeout=2)
        except pymysql.err.OperationalError:
            return False
        conn.close()
        return True

    def _bootstrap_users(self) -> None:
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
        self._require_managed("stop")
        if mode not in _STOP_SIGNALS:
            raise ValueError(f"mode must be one of {sorted(_STOP_SIGNALS)}, got {mode!r}")
        if self._process is not None:
            self._process.stop([(_STOP_SIGNALS[mode], timeout)])
            # A server started by another process is judged by its command line, which is gone
            # before the process is: wait for the process and its port, so a restart can bind it.
            pid, port = self._process.pid, self.port
            wait_until(lambda: not process_alive(pid), timeout=10.0, interval=0.05)
            if port is not None:
                wait_until(lambda: port_is_free(port), timeout=10.0, interval=0.05)
        if remove_data and self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self._initialized = False

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
        self.stop(mode=mode, timeout=timeout, remove_data=False)
        self._fixed_port = True
        self.start()

    # ---------------------------------------------------------------- helpers

    def prepared_xids(self) -> list[str]:
        """Return the global transaction ids of all prepared XA transactions (``XA RECOVER``).

        Returns
        -------
        list of str
            The gtrids (the ``data`` column with its branch qualifier cut off), sorted.
        """
        conn = self.connect()
        try:
            with conn.cursor() as cur:
                cur.execute("XA RECOVER")
                rows = cur.fetchall()
        finally:
            conn.close()
        xids = []
        for _format_id, gtrid_length, _bqual_length, data in rows:
            raw = data if isinstance(data, bytes) else str(data).encode()
            xids.append(raw[: int(gtrid_length)].decode(errors="replace"))
        return sorted(xids)

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
        pattern = re.compile(xid_pattern)
        done = []
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cur:
                cur.execute("XA RECOVER")
                for format_id, gtrid_length, _bqual_length, data in cur.fetchall():
                    raw = data if isinstance(data, bytes) else str(data).encode()
                    gtrid, bqual = raw[: int(gtrid_length)], raw[int(gtrid_length) :]
                    name = gtrid.decode(errors="replace")
                    if pattern.match(name):
                        cur.execute(
                            f"XA ROLLBACK X'{gtrid.hex()}', X'{bqual.hex()}', {int(format_id)}"
                        )
                        done.append(name)
        finally:
            conn.close()
        return done

    def __enter__(self) -> MariaDBServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "external" if not self.managed else "running" if self.is_running() else "stopped"
        return f"MariaDBServer(port={self.port}, binlog={self.binlog}, {state})"


def parse_url(url: str) -> dict[str, Any]:
    """Split a ``mysql://`` or ``mariadb://`` URL into ``pymysql.connect`` arguments.

    Parameters
    ----------
    url : str
        ``mysql://user[:password]@host[:port]/database``.

    Returns
    -------
    dict
        ``host``, ``port`` (3306 if absent), ``user``, ``password`` (empty if absent),
        ``database``.

    Raises
    ------
    ValueError
        If the scheme is not ``mysql`` or ``mariadb``, or the user or database is missing.
    """
    parts = urlsplit(url)
    if parts.scheme not in _SCHEMES:
        raise ValueError(f"a MariaDB URL must start with mysql:// or mariadb://, got {url!r}")
    database = parts.path.lstrip("/")
    if not parts.username or not database:
        raise ValueError(
            f"a MariaDB URL needs a user and a database (mysql://user@host/db): {url!r}"
        )
    return {
        "host": parts.hostname or LOOPBACK,
        "port": parts.port or 3306,
        "user": unquote(parts.username),
        "password": unquote(parts.password or ""),
        "database": unquote(database),
    }

"""A throwaway PostgreSQL cluster on 127.0.0.1, with prepared transactions enabled or disabled.

Or on the address of a :class:`~twophase_dev.NetworkNamespace` it runs in (``netns=``), for
tests that cut it off the network.

The cluster is made with the server binaries :mod:`._binaries` finds: ``initdb`` into a throwaway
directory (whose files :mod:`._datadir` writes), then the ``postgres`` server started directly (no
``pg_ctl``) so its pid is known; as the ``postgres`` OS user when this process is root. The test
helpers' SQL is in :mod:`._admin`; the life cycle shared with MariaDB is
:class:`~twophase_dev._database.DatabaseServer`'s.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import os
import pwd
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twophase_dev._database import DatabaseServer
from twophase_dev._host._ports import LOOPBACK
from twophase_dev._host._process import ManagedProcess, run_logged
from twophase_dev._host._wait import wait_until
from twophase_dev._postgres._admin import forget_fences, prepared_transactions, rollback_prepared
from twophase_dev._postgres._binaries import check_reachable, find_postgres_bin_dir, run_user
from twophase_dev._postgres._datadir import (
    DATABASE,
    SUPERUSER,
    TEST_PASSWORD,
    TEST_ROLE,
    initdb_argv,
    write_access_rules,
    write_settings,
)

if TYPE_CHECKING:
    from twophase_dev._netns._namespace import NetworkNamespace

__all__ = ["PostgresServer"]

_STOP_SIGNALS = {
    "smart": signal.SIGTERM,  # waits for clients to disconnect
    "fast": signal.SIGINT,  # rolls back open transactions, disconnects clients, checkpoints
    "immediate": signal.SIGQUIT,  # like a crash: no checkpoint, crash recovery at next start
}


class PostgresServer(DatabaseServer):
    """A throwaway PostgreSQL cluster listening on 127.0.0.1 only.

    Parameters
    ----------
    port : int, optional
        TCP port; a free one is picked if omitted. An explicit port that is taken fails with a clear
        :class:`DevInfraError`; a picked one that is taken meanwhile is retried with a new port.
    max_prepared_transactions : int, optional
        The server setting; 64 by default, ``0`` disables ``PREPARE TRANSACTION`` (the fallback
        mode of the JDBC connector).
    work_dir : pathlib.Path, optional
        Directory for the cluster's data (``<work_dir>/data``); a throwaway
        ``twophase-dev-postgres-*`` directory in the system temporary directory by default (removed
        by :meth:`stop`). When running as root it must be reachable by the ``postgres`` user.
    log_dir : pathlib.Path, optional
        Where ``postgres.log`` (server log) and ``initdb.log`` go; kept after :meth:`stop`.
        Defaults to ``<work_dir>/logs`` (removed with the work dir).
    settings : mapping of str to str, optional
        Extra ``postgresql.conf`` settings (values are written as given, quote strings yourself).
    detach : bool, optional
        ``True`` for a server that outlives this Python process (``twophase-dev up``); ``False``
        (default) makes the kernel shut it down (immediate mode) if this process dies first.
    startup_timeout : float, optional
        Seconds to wait for the server to accept connections.
    netns : NetworkNamespace, optional
        Run the server inside this (created) network namespace: it then listens on the
        namespace's address only, and every DSN and URL names that address. Clients of this
        process come from the namespace's peer address, which ``pg_hba.conf`` admits like
        127.0.0.1. :meth:`to_record` refuses such a server.

    Notes
    -----
    Authentication: the superuser ``postgres`` connects without password over 127.0.0.1 (with
    ``netns``: from the namespace's peer address) and the Unix socket (in the data directory);
    the role ``twophase_test`` (password ``twophase_test``, owner of database ``twophase``) must
    authenticate with SCRAM over TCP. Durability is traded for
    speed where it is safe (``fsync=off``, ``full_page_writes=off``): a *server* crash keeps
    committed data (``synchronous_commit`` stays on), an OS crash may not, which is irrelevant for
    a throwaway test cluster.

    Examples
    --------
    >>> with PostgresServer(max_prepared_transactions=0) as pg:  # doctest: +SKIP
    ...     conn = psycopg2.connect(pg.dsn)
    """

    kind = "postgres"
    product = "PostgreSQL"
    address_env = "TWOPHASE_PG_DSN"
    log_name = "postgres.log"
    stop_signals = _STOP_SIGNALS
    crash_signals = ((signal.SIGQUIT, 10.0),)
    death_signal = "QUIT"

    def __init__(
        self,
        *,
        port: int | None = None,
        max_prepared_transactions: int = 64,
        work_dir: Path | None = None,
        log_dir: Path | None = None,
        settings: Mapping[str, str] | None = None,
        detach: bool = False,
        startup_timeout: float = 60.0,
        netns: NetworkNamespace | None = None,
    ):
        if max_prepared_transactions < 0:
            raise ValueError(
                f"max_prepared_transactions must be >= 0, got {max_prepared_transactions}"
            )
        super().__init__(
            port=port,
            work_dir=work_dir,
            log_dir=log_dir,
            settings=settings,
            detach=detach,
            startup_timeout=startup_timeout,
            netns=netns,
        )
        self.max_prepared_transactions = max_prepared_transactions
        self._external_dsn: str | None = None
        self._bin_dir: Path | None = None
        self._user: str | None = None

    # ---------------------------------------------------------------- attaching

    @classmethod
    def external(cls, dsn: str) -> PostgresServer:
        """Describe a server that this package did not start (e.g. ``$TWOPHASE_PG_DSN``).

        Parameters
        ----------
        dsn : str
            A libpq connection string or URL for a superuser.

        Returns
        -------
        PostgresServer
            A handle whose connection properties work, while :meth:`start`, :meth:`stop` and
            :meth:`restart` raise :class:`DevInfraError`.
        """
        from psycopg2.extensions import parse_dsn

        params = parse_dsn(dsn)
        server = cls(port=int(params.get("port", 5432)))
        server.host = str(params.get("host", LOOPBACK))
        server._external_dsn = dsn
        server.managed = False
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW max_prepared_transactions")
            row = cur.fetchone()
        conn.close()
        server.max_prepared_transactions = int(row[0]) if row else 0
        return server

    @classmethod
    def _options_of_record(cls, record: Mapping[str, Any]) -> dict[str, Any]:
        return {"max_prepared_transactions": int(record["max_prepared_transactions"])}

    def _record_options(self) -> dict[str, Any]:
        return {"dsn": self.dsn, "max_prepared_transactions": self.max_prepared_transactions}

    def _repr_options(self) -> str:
        return f"max_prepared_transactions={self.max_prepared_transactions}"

    # ---------------------------------------------------------------- connection properties

    @property
    def dsn(self) -> str:
        """Connection URL of the trusted superuser on database ``twophase``."""
        if self._external_dsn is not None:
            return self._external_dsn
        return f"postgresql://{SUPERUSER}@{self.host}:{self._require_port()}/{DATABASE}"

    @property
    def password_dsn(self) -> str:
        """Connection URL of the password-authenticated role ``twophase_test``."""
        return (
            f"postgresql://{TEST_ROLE}:{TEST_PASSWORD}@{self.host}:{self._require_port()}/"
            f"{DATABASE}"
        )

    @property
    def jdbc_url(self) -> str:
        """JDBC URL of database ``twophase`` (pass user and password separately)."""
        return f"jdbc:postgresql://{self.host}:{self._require_port()}/{DATABASE}"

    def connect_kwargs(self, *, superuser: bool = True) -> dict[str, Any]:
        """Return keyword arguments for ``psycopg2.connect``.

        Parameters
        ----------
        superuser : bool, optional
            ``True`` for the trusted superuser, ``False`` for the password role.

        Returns
        -------
        dict
            ``host``, ``port``, ``user``, ``dbname`` and, for the password role, ``password``.
        """
        if self._external_dsn is not None and superuser:
            from psycopg2.extensions import parse_dsn

            return dict(parse_dsn(self._external_dsn))
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self._require_port(),
            "dbname": DATABASE,
            "user": SUPERUSER if superuser else TEST_ROLE,
        }
        if not superuser:
            kwargs["password"] = TEST_PASSWORD
        return kwargs

    def connect(self, *, superuser: bool = True, dbname: str | None = None, **kwargs: Any) -> Any:
        """Open a psycopg2 connection (autocommit off, as psycopg2 defaults).

        Parameters
        ----------
        superuser : bool, optional
            See :meth:`connect_kwargs`.
        dbname : str, optional
            Another database than ``twophase``.
        **kwargs
            Passed on to ``psycopg2.connect``.

        Returns
        -------
        psycopg2.extensions.connection
            The new connection; close it yourself.
        """
        import psycopg2

        params = self.connect_kwargs(superuser=superuser)
        if dbname is not None:
            params["dbname"] = dbname
        params.setdefault("connect_timeout", 5)
        params.update(kwargs)
        return psycopg2.connect(**params)

    # ---------------------------------------------------------------- lifecycle

    def _locate(self) -> None:
        self._bin_dir = find_postgres_bin_dir()
        self._user = run_user()

    def _prepare_work_dir(self, work_dir: Path) -> None:
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(work_dir, entry.pw_uid, entry.pw_gid)
            check_reachable(work_dir, self._user)

    def _initialize(self) -> None:
        assert self._bin_dir is not None
        user = self._user
        run_logged(
            initdb_argv(self._bin_dir, self.data_dir),
            what="initdb",
            cwd=self._require_work_dir(),
            log_file=self.log_dir / "initdb.log",
            user=user,
            group=pwd.getpwnam(user).pw_gid if user else None,
            extra_groups=[] if user else None,
        )
        peer = None if self.netns is None else self.netns.peer_address
        write_access_rules(self.data_dir, peer)

    def _configure_port(self) -> None:
        write_settings(
            self.data_dir,
            host=self.host,
            port=self._require_port(),
            max_prepared_transactions=self.max_prepared_transactions,
            extra=self.extra_settings,
        )

    def _spawn(self) -> ManagedProcess:
        assert self._bin_dir is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        return ManagedProcess.spawn(
            [str(self._bin_dir / "postgres"), "-D", str(self.data_dir)],
            marker=self._marker(),
            log_file=self.log_file,
            cwd=self._require_work_dir(),
            env=env,
            user=self._user,
            detach=self.detach,
            death_signal=self.death_signal,
            namespace_prefix=self._namespace_prefix(),
        )

    def _is_port_race(self, log: str) -> bool:
        return "could not bind" in log and "already in use" in log

    def _accepts_connections(self) -> bool:
        import psycopg2

        try:
            conn = self.connect(dbname="postgres" if self.managed else None, connect_timeout=2)
        except psycopg2.OperationalError:
            return False
        conn.close()
        return True

    def _bootstrap(self) -> None:
        conn = self.connect(dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE ROLE {TEST_ROLE} LOGIN PASSWORD %s",
                    (TEST_PASSWORD,),
                )
                cur.execute(f"CREATE DATABASE {DATABASE} OWNER {TEST_ROLE}")
        finally:
            conn.close()

    def stop(self, *, mode: str = "fast", timeout: float = 30.0, remove_data: bool = True) -> None:
        """Shut the server down and, by default, delete the cluster.

        Parameters
        ----------
        mode : {"fast", "smart", "immediate"}, optional
            PostgreSQL's shutdown mode: ``fast`` disconnects clients and rolls back their open
            transactions (prepared ones survive), ``smart`` waits for clients, ``immediate`` is a
            crash without checkpoint.
        timeout : float, optional
            Seconds to wait before escalating to ``immediate``, then ``SIGKILL``.
        remove_data : bool, optional
            Delete the work directory if this handle created it (logs in an explicit ``log_dir``
            are kept).
        """
        super().stop(mode=mode, timeout=timeout, remove_data=remove_data)

    def _after_stop(self) -> None:
        # After the postmaster exits, its pid file is removed; wait for that so that a restart
        # does not race with the old instance.
        if self.work_dir is None:
            return
        wait_until(lambda: not (self.data_dir / "postmaster.pid").exists(), timeout=10.0)

    def kill(self) -> None:
        """Crash the server (``immediate`` shutdown: no checkpoint, recovery at next start).

        Committed and prepared transactions survive; :meth:`restart` or :meth:`start` brings the
        same cluster back on the same port.
        """
        self.stop(mode="immediate", remove_data=False)

    def restart(self, *, mode: str = "fast", timeout: float = 30.0) -> None:
        """Stop the server and start it again on the same port with the same data.

        Prepared transactions survive a restart (that is what makes them resumable).

        Parameters
        ----------
        mode : {"fast", "smart", "immediate"}, optional
            Shutdown mode, see :meth:`stop`.
        timeout : float, optional
            Seconds to wait for the shutdown.
        """
        super().restart(mode=mode, timeout=timeout)

    # ---------------------------------------------------------------- helpers

    def prepared_transactions(self) -> list[tuple[str, str]]:
        """Return all prepared transactions of the cluster (``pg_prepared_xacts``).

        Returns
        -------
        list of (str, str)
            ``(gid, database)`` pairs, sorted by gid.
        """
        return prepared_transactions(self.connect())

    def forget_fences(self) -> int:
        """Empty every ``twophase_fences`` table of the default database.

        A coordinated sink shares the server's prepared-transaction slots with
        the sinks whose fence rows moved in the last minutes; a test that wants
        a server of its own (as most do) starts from no other active sink.

        Returns
        -------
        int
            Rows deleted.
        """
        return forget_fences(self.connect())

    def rollback_prepared(self, gid_pattern: str = ".*") -> list[str]:
        """Roll back the prepared transactions whose gid matches a regular expression.

        Parameters
        ----------
        gid_pattern : str, optional
            Python regular expression matched against the start of each gid.

        Returns
        -------
        list of str
            The gids rolled back.
        """
        return rollback_prepared(self.connect, self.prepared_transactions(), gid_pattern)

"""A streaming standby of a throwaway PostgreSQL primary, and its promotion: a failover.

:class:`PostgresStandby` copies a running :class:`~twophase_dev.PostgresServer` with
``pg_basebackup -R`` (WAL streamed, ``primary_conninfo`` naming the standby by
``application_name``) and runs it as a hot standby on a port of its own. The primary makes it
synchronous with :func:`make_synchronous` (``synchronous_standby_names``: a commit, and a
``PREPARE TRANSACTION``, returns once the standby has it) or leaves it asynchronous; stopping the
standby for a while makes it lag. :meth:`PostgresStandby.promote` ends recovery: with the primary
killed, that is the failover a managed service performs, and the standby keeps what it had
received, prepared transactions included.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import pwd
from typing import Any

from twophase_dev._errors import DevInfraError
from twophase_dev._host._process import run_logged
from twophase_dev._host._wait import wait_until
from twophase_dev._postgres._datadir import SUPERUSER
from twophase_dev._postgres._server import PostgresServer

__all__ = ["PostgresStandby", "make_synchronous"]


def make_synchronous(primary: PostgresServer, standby: PostgresStandby | None) -> None:
    """Make ``standby`` the primary's synchronous standby, or (``None``) none: asynchronous.

    Parameters
    ----------
    primary : PostgresServer
        The running primary.
    standby : PostgresStandby or None
        Its standby, which every commit and prepare then waits for; ``None`` for none.
    """
    names = "" if standby is None else standby.application_name
    conn = primary.connect(dbname="postgres")
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("ALTER SYSTEM SET synchronous_standby_names = %s", (names,))
            cur.execute("SELECT pg_reload_conf()")
    finally:
        conn.close()
    if standby is not None:  # the setting takes effect once the standby streams as synchronous
        wait_until(lambda: _sync_state(primary, names) == "sync", timeout=30.0)


def _sync_state(primary: PostgresServer, name: str) -> str | None:
    conn = primary.connect(dbname="postgres")
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = %s", (name,)
            )
            row = cur.fetchone()
    finally:
        conn.close()
    return None if row is None else str(row[0])


class PostgresStandby(PostgresServer):
    """A hot standby of ``primary``, streaming its WAL, until :meth:`promote`.

    Parameters
    ----------
    primary : PostgresServer
        A running server of this package (not in a network namespace).
    application_name : str, optional
        The name it streams under (what ``synchronous_standby_names`` lists).
    **options
        As for :class:`~twophase_dev.PostgresServer` (``port``, ``log_dir``...).
    """

    kind = "postgres-standby"

    def __init__(
        self,
        primary: PostgresServer,
        *,
        application_name: str = "twophase_standby",
        **options: Any,
    ) -> None:
        if primary.netns is not None or not primary.managed:
            raise DevInfraError("a standby needs a primary started by twophase_dev on 127.0.0.1")
        options.setdefault("max_prepared_transactions", primary.max_prepared_transactions)
        super().__init__(**options)
        self.primary = primary
        self.application_name = application_name

    def _initialize(self) -> None:
        assert self._bin_dir is not None
        user = self._user
        source = (
            f"host={self.primary.host} port={self.primary.port} user={SUPERUSER} "
            f"application_name={self.application_name}"
        )
        argv = [str(self._bin_dir / "pg_basebackup"), "--pgdata", str(self.data_dir)]
        # A fast checkpoint: a spread one (the default) makes the copy wait a minute and more.
        argv += ["--checkpoint", "fast", "--write-recovery-conf", "--wal-method", "stream"]
        argv += ["--no-sync", "-d", source]
        run_logged(
            argv,
            what="pg_basebackup",
            cwd=self._require_work_dir(),
            log_file=self.log_dir / "pg_basebackup.log",
            user=user,
            group=pwd.getpwnam(user).pw_gid if user else None,
            extra_groups=[] if user else None,
        )

    def _bootstrap(self) -> None:
        """Nothing: the roles and the database come from the primary."""

    def in_recovery(self) -> bool:
        """Tell whether the server is still a standby (``pg_is_in_recovery()``)."""
        conn = self.connect(dbname="postgres")
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT pg_is_in_recovery()")
                row = cur.fetchone()
        finally:
            conn.close()
        return bool(row and row[0])

    def promote(self, *, timeout: float = 30.0) -> None:
        """End recovery: the standby becomes a primary that accepts writes.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the promotion.
        """
        conn = self.connect(dbname="postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT pg_promote(true, %s)", (int(timeout),))
        finally:
            conn.close()
        wait_until(lambda: not self.in_recovery(), timeout=timeout)

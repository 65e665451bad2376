"""A replica of a throwaway MariaDB primary, and its promotion: a failover.

:class:`MariaDBReplica` is a server of its own (a fresh data directory, ``server_id`` 2, its own
binary log) that replicates a running :class:`~twophase_dev.MariaDBServer` from the first event
of its binary log, by GTID: the primary's database and users arrive through replication, and so
does every ``XA PREPARE`` (MariaDB 10.5 and later binlog it), so a transaction prepared on the
primary is prepared on the replica too. :func:`make_semi_synchronous` makes the primary wait for
the replica's acknowledgement of each binlogged event (``AFTER_SYNC``); without it the replica is
asynchronous, and stopping it makes it lag. :meth:`MariaDBReplica.promote` stops replication and
makes it writable: with the primary killed, that is the failover a managed service performs.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

from typing import Any

from twophase_dev._errors import DevInfraError
from twophase_dev._host._wait import wait_until
from twophase_dev._mariadb._datadir import DATABASE, SUPERUSER
from twophase_dev._mariadb._server import MariaDBServer

__all__ = ["MariaDBReplica", "make_semi_synchronous"]


def _run(server: MariaDBServer, *statements: str) -> list[tuple[Any, ...]]:
    conn = server.connect(database="mysql", autocommit=True)
    rows: list[tuple[Any, ...]] = []
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
                rows = list(cur.fetchall())
    finally:
        conn.close()
    return rows


def make_semi_synchronous(primary: MariaDBServer, replica: MariaDBReplica) -> None:
    """Make the primary wait for ``replica``'s acknowledgement of every binlogged event.

    Parameters
    ----------
    primary : MariaDBServer
        The running primary.
    replica : MariaDBReplica
        Its running replica.
    """
    _run(
        primary,
        "SET GLOBAL rpl_semi_sync_master_wait_point = AFTER_SYNC",
        "SET GLOBAL rpl_semi_sync_master_timeout = 60000",  # never fall back to asynchronous
        "SET GLOBAL rpl_semi_sync_master_enabled = ON",
    )
    _run(replica, "STOP SLAVE IO_THREAD", "SET GLOBAL rpl_semi_sync_slave_enabled = ON")
    _run(replica, "START SLAVE IO_THREAD")

    def acknowledging() -> bool:
        rows = _run(primary, "SHOW STATUS LIKE 'Rpl_semi_sync_master_clients'")
        return bool(rows) and int(rows[0][1]) >= 1

    wait_until(acknowledging, timeout=30.0)


class MariaDBReplica(MariaDBServer):
    """A replica of ``primary`` by GTID from its first event, until :meth:`promote`.

    Parameters
    ----------
    primary : MariaDBServer
        A running server of this package with its binary log on (not in a network namespace).
    **options
        As for :class:`~twophase_dev.MariaDBServer` (``port``, ``log_dir``...).
    """

    kind = "mariadb-replica"

    def __init__(self, primary: MariaDBServer, **options: Any) -> None:
        if primary.netns is not None or not primary.managed or not primary.binlog:
            raise DevInfraError(
                "a replica needs a primary started by twophase_dev on 127.0.0.1, binlog on"
            )
        settings = {"server_id": "2", "log_slave_updates": "1", **options.pop("settings", {})}
        super().__init__(settings=settings, **options)
        self.primary = primary

    def _bootstrap(self) -> None:
        """Replicate the primary instead of creating the database: it arrives by replication."""
        primary = self.primary
        _run(
            self,
            "SET GLOBAL gtid_slave_pos = ''",
            f"CHANGE MASTER TO MASTER_HOST = '{primary.host}', MASTER_PORT = {primary.port}, "
            f"MASTER_USER = '{SUPERUSER}', MASTER_USE_GTID = slave_pos",
            "START SLAVE",
        )
        self.wait_caught_up()

    def wait_caught_up(self, timeout: float = 30.0) -> None:
        """Wait until the replica has applied everything the primary has binlogged.

        Parameters
        ----------
        timeout : float, optional
            Seconds.
        """
        rows = _run(self.primary, "SELECT @@gtid_binlog_pos")
        target = str(rows[0][0]) if rows else ""
        rows = _run(self, f"SELECT MASTER_GTID_WAIT('{target}', {int(timeout)})")
        if not rows or int(rows[0][0]) != 0:
            raise DevInfraError(f"the MariaDB replica did not reach {target} in {timeout} s")
        wait_until(lambda: bool(_run(self, f"SHOW DATABASES LIKE '{DATABASE}'")), timeout=timeout)

    def stop_replication(self) -> None:
        """Stop replicating (``STOP SLAVE``): from now on the replica lags."""
        _run(self, "STOP SLAVE")

    def promote(self) -> None:
        """Stop replicating for good and accept writes: the replica is the primary now."""
        _run(self, "STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = OFF")

"""Smoke test: the local MariaDB server keeps prepared XA transactions over disconnects and crashes.

Each scenario runs with the binary log on (the ``mariadb_server`` fixture, the usual production
setting, where XA goes through the binlog's two-phase logging) and off (a second server of this
module), since MariaDB recovers prepared XA transactions differently in the two cases.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pymysql
import pytest

from twophase_dev import DevInfraError, MariaDBServer, find_mariadb_binaries

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

XID_PREFIX = "twophase-smoke-"


@pytest.fixture(scope="module")
def mariadb_without_binlog(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A second server of this module, with the binary log off."""
    try:
        find_mariadb_binaries()
    except DevInfraError as exc:
        pytest.skip(f"MariaDB is not installed: {exc}")
    server = MariaDBServer(binlog=False, log_dir=tmp_path_factory.mktemp("mariadb-nobinlog-logs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(
    params=[pytest.param(p, marks=pytest.mark.mariadb) for p in ("binlog", "no-binlog")]
)
def server(request: pytest.FixtureRequest) -> MariaDBServer:
    """The server of the scenario: binary log on, then off."""
    name = "mariadb_server" if request.param == "binlog" else "mariadb_without_binlog"
    server: MariaDBServer = request.getfixturevalue(name)
    return server


@pytest.fixture
def table(server: MariaDBServer) -> Iterator[str]:
    """A fresh table; prepared XA transactions of these tests are cleaned before and after."""
    server.rollback_prepared(XID_PREFIX)
    name = f"smoke_{uuid.uuid4().hex[:12]}"
    _execute(server, f"CREATE TABLE {name} (id INT PRIMARY KEY, payload TEXT NOT NULL)")
    yield name
    # A new connection: the test may have restarted the server.
    server.rollback_prepared(XID_PREFIX)
    _execute(server, f"DROP TABLE IF EXISTS {name}")


def _execute(server: MariaDBServer, sql: str) -> None:
    conn = server.connect(autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(sql)
    finally:
        conn.close()


def _count(server: MariaDBServer, table: str) -> int:
    """Count the rows from a new connection (so it sees every commit so far)."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {table}")
            row = cur.fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0])


def _prepared(server: MariaDBServer) -> list[str]:
    return [xid for xid in server.prepared_xids() if xid.startswith(XID_PREFIX)]


def _prepare_rows(server: MariaDBServer, table: str, xid: str, ids: range) -> None:
    """Insert rows in XA transaction ``xid`` as the password user, XA PREPARE it, disconnect."""
    conn = server.connect(superuser=False)
    try:
        with conn.cursor() as cur:
            cur.execute("XA START %s", (xid,))
            cur.executemany(
                f"INSERT INTO {table} (id, payload) VALUES (%s, %s)",
                [(i, f"row-{i}") for i in ids],
            )
            cur.execute("XA END %s", (xid,))
            cur.execute("XA PREPARE %s", (xid,))
    finally:
        conn.close()


def _finish(server: MariaDBServer, command: str, xid: str) -> None:
    """Run XA COMMIT / XA ROLLBACK from yet another connection."""
    conn = server.connect(superuser=False, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"{command} %s", (xid,))
    finally:
        conn.close()


def _new_xid() -> str:
    return f"{XID_PREFIX}{uuid.uuid4().hex}"


def test_prepared_xa_survives_disconnect_and_is_invisible_until_commit(
    server: MariaDBServer, table: str
) -> None:
    xid = _new_xid()
    _prepare_rows(server, table, xid, range(10))
    # Phase 1 done and its connection gone: prepared, listed, invisible to everyone else.
    assert _prepared(server) == [xid]
    assert _count(server, table) == 0

    _finish(server, "XA COMMIT", xid)

    assert _prepared(server) == []
    assert _count(server, table) == 10


def test_rolled_back_xa_never_becomes_visible(server: MariaDBServer, table: str) -> None:
    xid = _new_xid()
    _prepare_rows(server, table, xid, range(5))
    assert _prepared(server) == [xid]

    _finish(server, "XA ROLLBACK", xid)

    assert _prepared(server) == []
    assert _count(server, table) == 0
    # The rolled-back keys are free again: nothing of that transaction is left behind.
    again = _new_xid()
    _prepare_rows(server, table, again, range(5))
    _finish(server, "XA COMMIT", again)
    assert _count(server, table) == 5


def test_finishing_an_unknown_xid_fails(server: MariaDBServer) -> None:
    with pytest.raises(pymysql.err.OperationalError) as excinfo:
        _finish(server, "XA COMMIT", _new_xid())
    assert excinfo.value.args[0] == 1397  # ER_XAER_NOTA: unknown XID


@pytest.mark.chaos
@pytest.mark.parametrize("mode", ["fast", "kill"])
def test_prepared_xa_survives_a_server_restart(
    server: MariaDBServer, table: str, mode: str
) -> None:
    if not server.managed:
        pytest.skip("the server at $TWOPHASE_MARIADB_URL was not started by twophase_dev")
    to_commit, to_roll_back = _new_xid(), _new_xid()
    _prepare_rows(server, table, to_commit, range(3))
    _prepare_rows(server, table, to_roll_back, range(3, 7))
    port = server.port

    server.restart(mode=mode)  # "kill": a crash between prepare and commit

    assert server.port == port
    assert _prepared(server) == sorted([to_commit, to_roll_back])
    assert _count(server, table) == 0
    _finish(server, "XA COMMIT", to_commit)
    _finish(server, "XA ROLLBACK", to_roll_back)
    assert _prepared(server) == []
    assert _count(server, table) == 3


def test_load_data_local_infile_works_for_the_password_user(
    server: MariaDBServer, table: str, tmp_path: Path
) -> None:
    data = tmp_path / "rows.tsv"
    data.write_text("".join(f"{i}\trow-{i}\n" for i in range(100)))
    conn = server.connect(superuser=False, local_infile=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {table}", (str(data),))
            assert cur.rowcount == 100
        conn.commit()
    finally:
        conn.close()
    assert _count(server, table) == 100


def test_password_user_needs_its_password(mariadb_server: MariaDBServer) -> None:
    if not mariadb_server.managed:
        pytest.skip("the server at $TWOPHASE_MARIADB_URL was not started by twophase_dev")
    conn = mariadb_server.connect(superuser=False)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT current_user(), @@local_infile, @@log_bin")
            row: Any = cur.fetchone()
    finally:
        conn.close()
    assert row == ("twophase@%", 1, 1)
    with pytest.raises(pymysql.err.OperationalError, match="Access denied"):
        mariadb_server.connect(superuser=False, password="wrong")


def test_start_and_stop_are_idempotent(tmp_path: Path) -> None:
    try:
        find_mariadb_binaries()
    except DevInfraError as exc:
        pytest.skip(f"MariaDB is not installed: {exc}")
    server = MariaDBServer(log_dir=tmp_path / "logs")
    server.start()
    try:
        pid, work_dir = server.pid, server.work_dir
        assert server.start() is server
        assert server.pid == pid, "a second start() must keep the running server"
        assert server.is_running()
    finally:
        server.stop()
    assert not server.is_running()
    assert work_dir is not None
    assert not work_dir.exists()
    server.stop()  # stopping a stopped server is a no-op
    assert (tmp_path / "logs" / "mariadb.log").exists(), "the log outlives the server"

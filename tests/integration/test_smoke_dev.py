"""Smoke test of the local infrastructure itself: twophase-dev's lifecycle and failure cases."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from twophase_dev import (
    DevInfraError,
    DevState,
    KafkaBroker,
    MariaDBServer,
    PostgresServer,
    attach_mariadb,
    attach_postgres,
    find_mariadb_binaries,
    free_ports,
)
from twophase_dev._host._proc import process_alive

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture
def dev_home(tmp_path: Path) -> Iterator[Path]:
    """A private state directory; whatever the test left running is stopped afterwards."""
    home = tmp_path / "dev-home"
    yield home
    DevState(home).down(["kafka", "postgres", "postgres-no-prepared", "mariadb"])


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TWOPHASE_DEV_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "twophase_dev", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def _pid(home: Path, service: str) -> int:
    return int(DevState(home).records()[service]["pid"])


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 15
    while process_alive(pid):
        assert time.monotonic() < deadline, f"process {pid} is still alive"
        time.sleep(0.1)


def test_up_is_idempotent_and_down_stops_what_up_started(dev_home: Path) -> None:
    first = _cli(dev_home, "up", "--postgres", "--max-prepared-transactions", "5")
    assert first.returncode == 0, first.stderr
    assert "postgres: started" in first.stdout
    pid = _pid(dev_home, "postgres")
    work_dir = Path(DevState(dev_home).records()["postgres"]["work_dir"])

    second = _cli(dev_home, "up", "--postgres", "--max-prepared-transactions", "5")
    assert second.returncode == 0, second.stderr
    assert "postgres: already running" in second.stdout
    assert _pid(dev_home, "postgres") == pid

    env = _cli(dev_home, "env")
    assert env.returncode == 0, env.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1) for line in env.stdout.splitlines() if line
    )
    assert set(exports) == {"TWOPHASE_PG_DSN"}
    server = attach_postgres(exports["TWOPHASE_PG_DSN"], home=dev_home)
    assert server.managed, "a server started by 'up' must be found again (restartable)"
    assert server.max_prepared_transactions == 5
    conn = psycopg2.connect(exports["TWOPHASE_PG_DSN"])
    conn.close()

    down = _cli(dev_home, "down")
    assert down.returncode == 0, down.stderr
    assert "postgres: stopped" in down.stdout
    _wait_gone(pid)
    assert not work_dir.exists()
    assert "nothing recorded" in _cli(dev_home, "status").stdout
    assert _cli(dev_home, "env").returncode == 1


def _mariadb_or_skip() -> None:
    try:
        find_mariadb_binaries()
    except DevInfraError as exc:
        pytest.skip(f"MariaDB is not installed: {exc}")


def test_mariadb_up_is_idempotent_and_survives_a_restart_by_an_attached_handle(
    dev_home: Path,
) -> None:
    _mariadb_or_skip()
    first = _cli(dev_home, "up", "--mariadb")
    assert first.returncode == 0, first.stderr
    assert "mariadb: started" in first.stdout
    pid = _pid(dev_home, "mariadb")
    work_dir = Path(DevState(dev_home).records()["mariadb"]["work_dir"])

    second = _cli(dev_home, "up", "--mariadb")
    assert second.returncode == 0, second.stderr
    assert "mariadb: already running" in second.stdout
    assert _pid(dev_home, "mariadb") == pid

    env = _cli(dev_home, "env")
    assert env.returncode == 0, env.stderr
    exports = dict(
        line.removeprefix("export ").split("=", 1) for line in env.stdout.splitlines() if line
    )
    assert set(exports) == {"TWOPHASE_MARIADB_URL"}
    url = exports["TWOPHASE_MARIADB_URL"]
    assert url.startswith("mysql://root@127.0.0.1:")
    assert url.endswith("/twophase")
    server = attach_mariadb(url, home=dev_home)
    assert server.managed, "a server started by 'up' must be found again (restartable)"
    assert server.binlog

    # A chaos test crashes and restarts it through its own handle: the state follows the new pid
    # instead of calling the server stale (which would delete its data at the next 'up').
    server.restart(mode="kill")
    assert server.pid != pid
    status = _cli(dev_home, "status")
    assert "mariadb: running" in status.stdout, status.stdout
    third = _cli(dev_home, "up", "--mariadb")
    assert "mariadb: already running" in third.stdout, third.stdout + third.stderr
    assert _pid(dev_home, "mariadb") == server.pid
    assert work_dir.exists()

    down = _cli(dev_home, "down", "--mariadb")
    assert down.returncode == 0, down.stderr
    assert "mariadb: stopped" in down.stdout
    _wait_gone(server.pid or 0)
    assert not work_dir.exists()
    assert "nothing recorded" in _cli(dev_home, "status").stdout


def test_stale_record_of_a_killed_server_is_replaced(dev_home: Path) -> None:
    assert _cli(dev_home, "up", "--postgres-no-prepared").returncode == 0
    pid = _pid(dev_home, "postgres-no-prepared")
    work_dir = Path(DevState(dev_home).records()["postgres-no-prepared"]["work_dir"])
    os.kill(pid, signal.SIGKILL)
    _wait_gone(pid)

    status = _cli(dev_home, "status")
    assert "NOT RUNNING" in status.stdout

    again = _cli(dev_home, "up", "--postgres-no-prepared")
    assert again.returncode == 0, again.stderr
    assert "removed stale record" in again.stderr
    assert "postgres-no-prepared: started" in again.stdout
    assert _pid(dev_home, "postgres-no-prepared") != pid
    assert not work_dir.exists()


def test_corrupt_state_file_is_reported(dev_home: Path) -> None:
    dev_home.mkdir(parents=True)
    (dev_home / "state.json").write_text("{not json")
    result = _cli(dev_home, "status")
    assert result.returncode == 1
    assert "state.json is not valid JSON" in result.stderr
    (dev_home / "state.json").unlink()


def _own_work_dirs() -> set[Path]:
    """Throwaway server directories created by this process (others may run tests meanwhile)."""
    mine = set()
    for work_dir in Path(tempfile.gettempdir()).glob("twophase-dev-*"):
        try:
            owner = json.loads((work_dir / "owner.json").read_text())
        except (OSError, ValueError):
            continue
        if owner.get("creator_pid") == os.getpid():
            mine.add(work_dir)
    return mine


def _installed_mariadb() -> bool:
    try:
        find_mariadb_binaries()
    except DevInfraError:
        return False
    return True


def test_taken_port_is_reported_clearly() -> None:
    before = _own_work_dirs()
    (port,) = free_ports(1)
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        with pytest.raises(DevInfraError, match=f"port {port} on 127.0.0.1 is already in use"):
            PostgresServer(port=port).start()
        with pytest.raises(DevInfraError, match=f"port {port} on 127.0.0.1 is already in use"):
            KafkaBroker(port=port).start()
        if _installed_mariadb():
            with pytest.raises(DevInfraError, match=f"port {port} on 127.0.0.1 is already in use"):
                MariaDBServer(port=port).start()
    assert _own_work_dirs() <= before, "a failed start left its work directory behind"


def test_picked_port_taken_meanwhile_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A free port that another process grabs before the server binds it is not fatal."""
    import twophase_dev._database as server_module  # picks the ports of PostgreSQL and MariaDB
    import twophase_dev._kafka._broker as kafka_module

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        handed_out: list[int] = []

        def first_one_taken(count: int) -> list[int]:
            ports = free_ports(count)
            if not handed_out:
                ports[0] = taken
            handed_out.extend(ports)
            return ports

        monkeypatch.setattr(server_module, "free_ports", first_one_taken)
        with PostgresServer() as pg:
            assert pg.port != taken
            assert pg.is_running()
        handed_out.clear()
        monkeypatch.setattr(kafka_module, "free_ports", first_one_taken)
        with KafkaBroker() as broker:
            assert broker.port != taken
            assert broker.is_running()
        assert taken in handed_out

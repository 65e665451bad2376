"""Real-time mode into each real target: rows visible inside the epoch, exactly once through kills.

A real driver process (``realtime_driver.py``) runs the query in 20-second epochs with task
retries on (``local[2,4]``). The test produces rows, sees them committed long before the epoch
ends, SIGKILLs the Python workers between two commits (Spark retries their tasks inside the
epoch: the retries skip what was committed), SIGKILLs the driver's whole process group in the
middle of an epoch, restarts it from the checkpoint (the epoch is replayed: its committed prefix
is skipped) and stops it cleanly. Every row must then be in the target exactly once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.chaos.realtime import kill_python_workers, python_workers
from tests.integration.kafka.kafka_support import read_all
from twophase._pyspark import installed_version

pytestmark = [
    pytest.mark.spark,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.skipif(
        (installed_version() or (0, 0, 0))[:2] < (4, 1),
        reason="Spark's real-time mode is in PySpark 4.1 and later",
    ),
]

ROOT = Path(__file__).resolve().parents[2]


def _produce(bootstrap: str, topic: str, keys: range, rate: float = 200.0) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in keys:
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
        producer.poll(0)
        time.sleep(1 / rate)
    assert producer.flush(30) == 0


class _Driver:
    """One run of the driver process, in its own process group."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        self.log = tmp_path / f"driver-{uuid.uuid4().hex[:6]}.log"
        self.stop_file = Path(args[-1])
        with open(self.log, "w") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.realtime.realtime_driver", *args],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_for("STARTED", 180)

    def text(self) -> str:
        return self.log.read_text()

    def _wait_for(self, line: str, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while line not in self.text():
            assert self.process.poll() is None, f"the driver ended:\n{self.text()[-3000:]}"
            assert time.monotonic() < deadline, f"no {line} in time:\n{self.text()[-3000:]}"
            time.sleep(0.2)

    def python_workers(self) -> list[int]:
        """The PySpark worker processes of this driver's JVM (the chaos harness's finder)."""
        return python_workers(self.process.pid)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        assert self.process.wait(30) == -signal.SIGKILL

    def stop(self) -> None:
        self.stop_file.touch()
        try:
            code = self.process.wait(120)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        assert code == 0, self.text()[-3000:]
        self.stop_file.unlink()


def _wait_until(read: Callable[[], list[str]], count: int, seconds: float, what: str) -> float:
    """Wait until ``read`` gives at least ``count`` rows; return how long it took."""
    started = time.monotonic()
    while True:
        seen = len(read())
        if seen >= count:
            return time.monotonic() - started
        assert time.monotonic() - started < seconds, f"{what}: {seen} of {count} rows visible"
        time.sleep(0.1)


@pytest.fixture
def drivers(tmp_path: Path) -> Iterator[Callable[[list[str]], _Driver]]:
    """Start drivers; whatever happens, kill every one left (and its JVM's Python workers)."""
    started: list[_Driver] = []

    def start(args: list[str]) -> _Driver:
        started.append(_Driver(tmp_path, args))
        return started[-1]

    yield start
    for driver in started:
        if driver.process.poll() is None:
            workers = driver.python_workers()
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.process.pid, signal.SIGKILL)
            for pid in workers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            driver.process.wait(30)


@pytest.fixture(
    params=[
        "postgres",
        # The same protocol through the other two connectors: a minute each, so in the extended
        # run (pytest -m extended), whose results docs/realtime.md records.
        pytest.param("mariadb", marks=pytest.mark.extended),
        pytest.param("kafka", marks=pytest.mark.extended),
    ]
)
def target(
    request: pytest.FixtureRequest, make_topic: Callable[..., str]
) -> Iterator[tuple[str, str, str, Callable[[], list[str]]]]:
    """``(kind, target, address, read)``: a new table or topic and a reader of its keys."""
    kind = request.param
    name = f"rt_{uuid.uuid4().hex[:10]}"
    if kind == "kafka":
        bootstrap = request.getfixturevalue("kafka_broker").bootstrap_servers
        topic = make_topic(2, prefix="rt-out")
        yield kind, topic, "-", lambda: [r.key.decode() for r in read_all(bootstrap, topic)]
        return
    server: Any = request.getfixturevalue(f"{kind}_server")
    with server.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE {name} (k VARCHAR(20) NOT NULL, v VARCHAR(20))")
        conn.commit()

    def read() -> list[str]:
        with server.connect() as conn, conn.cursor() as cur:
            cur.execute(f"SELECT k FROM {name}")
            return [row[0] for row in cur.fetchall()]

    address = server.dsn if kind == "postgres" else server.url
    yield kind, name, address, read


@pytest.mark.postgres
@pytest.mark.mariadb
@pytest.mark.kafka
def test_real_time_rows_are_visible_inside_the_epoch_and_exactly_once_through_kills(
    tmp_path: Path,
    kafka_broker: Any,
    make_topic: Callable[..., str],
    target: tuple[str, str, str, Callable[[], list[str]]],
    drivers: Callable[[list[str]], _Driver],
) -> None:
    kind, name, address, read = target
    bootstrap = kafka_broker.bootstrap_servers
    source = make_topic(2, prefix="rt-in")
    args = [kind, bootstrap, source, name, address, str(tmp_path / "chk"), str(tmp_path / "stop")]
    driver = drivers(args)

    # Once the query runs (its first rows are in), rows are visible long before the 20-second
    # epoch ends. Each partition's last row stays in the JVM until the partition's next row or
    # the epoch's end (Spark's look-ahead): 2 partitions, so 2 rows wait.
    _produce(bootstrap, source, range(0, 50))
    _wait_until(read, 48, 30, "the first rows")
    _produce(bootstrap, source, range(50, 200))
    took = _wait_until(read, 198, 15, "rows in a running query")
    assert took < 5, f"the rows took {took:.1f} s after the last was produced"

    # The Python workers SIGKILLed between two commits: Spark retries the tasks in the epoch.
    _produce(bootstrap, source, range(200, 300))
    killed, what = kill_python_workers(driver.process.pid, lambda: driver.process.poll() is None)
    assert killed, what
    _produce(bootstrap, source, range(300, 500))
    _wait_until(read, 498, 60, "after the workers were killed")

    # The driver's process group SIGKILLed in the middle of an epoch, then restarted.
    _produce(bootstrap, source, range(500, 700))
    _wait_until(read, 550, 30, "before the driver kill")
    driver.kill()
    driver = drivers(args)
    _produce(bootstrap, source, range(700, 900))
    _wait_until(read, 898, 90, "after the restart")
    driver.stop()
    assert max(Counter(read()).values()) == 1, "a clean stop wrote rows twice"

    # What the stop left uncommitted, the next run writes.
    driver = drivers(args)
    _wait_until(read, 900, 60, "after a clean stop and a start")
    driver.stop()
    counts = Counter(read())
    assert sorted(counts, key=int) == [str(i) for i in range(900)], "rows are missing"
    assert [k for k, n in counts.items() if n > 1] == [], "rows were written twice"

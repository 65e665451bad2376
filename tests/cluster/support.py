"""Test-side helpers of the cluster tests: input, the driver process, and the checks by content.

A :class:`Scenario` is one streaming query of one sink (``pg-coordinated``, ``pg-markers`` or
``kafka``) on the cluster: its input topic (2 partitions, ``batches`` micro-batches of
``rows_per_batch`` ids), its target (a fresh table, or a fresh 2-partition topic with its own
control topic), its probes' control directory, and its driver process (:mod:`tests.cluster.driver`).

The checks, by content: :meth:`Scenario.assert_exactly_once` (PostgreSQL: every id's row count is
1; Kafka: a ``read_committed`` consumer sees every id once) and :meth:`Scenario.leftovers`
(PostgreSQL: prepared transactions of the sink in ``pg_prepared_xacts``; Kafka: partitions of the
output and control topics whose last stable offset is below the high watermark, i.e. an open
transaction).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.cluster.driver import POISON_TOPIC_BYTES, make_sink
from tests.cluster.probes import Control
from tests.integration.kafka.kafka_support import read_all, unstable_partitions
from twophase.testing import assert_exactly_once
from twophase_dev import KafkaBroker, MariaDBServer, PostgresServer, SparkCluster

ROOT = Path(__file__).resolve().parents[2]
CONNECTORS = ("pg-coordinated", "pg-markers", "maria-coordinated", "maria-markers", "kafka")
#: Partitions of the input topic: one task per partition, one per worker of the cluster.
PARTITIONS = 2


@dataclass
class DriverRun:
    """A running driver process (its own session: killed as a group when done)."""

    process: subprocess.Popen[bytes]
    log: Path
    result_path: Path
    started: float = field(default_factory=time.monotonic)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout: float = 150.0) -> dict[str, Any]:
        """Wait for the driver; return its result (``rc`` and ``log_tail`` added)."""
        try:
            rc = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        result: dict[str, Any] = {}
        with contextlib.suppress(FileNotFoundError, ValueError):
            result = json.loads(self.result_path.read_text())
        result["rc"] = rc
        result["seconds"] = time.monotonic() - self.started
        result["log_tail"] = self.log_tail()
        return result

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except FileNotFoundError:
            return "(no driver log)"
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Scenario:
    """One query of one sink on the cluster, with its input, target and probes."""

    connector: str
    cluster: SparkCluster
    kafka: KafkaBroker
    server: PostgresServer | MariaDBServer | None
    work: Path
    batches: int = 3
    rows_per_batch: int = 40
    name: str = field(default_factory=lambda: f"cl{uuid.uuid4().hex[:10]}")
    expected: list[int] = field(default_factory=list)
    #: Every id ending in 7 is a row the target refuses, and the sink sets such rows aside
    #: (:data:`tests.cluster.driver.POISON_IDS`): good ids land once, poison ids as dead letters.
    poison: bool = False

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.control = Control(self.work / "control")
        self.source_topic = f"{self.name}-in"
        self.target_topic = f"{self.name}-out"
        self.control_topic = f"{self.name}-ctl"
        self.table = f"{self.name}_rows"
        self.kafka.create_topic(self.source_topic, partitions=PARTITIONS)
        if self.connector == "kafka":
            limit = {"max.message.bytes": str(POISON_TOPIC_BYTES)} if self.poison else {}
            self.kafka.create_topic(self.target_topic, partitions=PARTITIONS, config=limit)
        elif self.poison:  # the payload NOT NULL (a table the sink creates would take NULLs)
            self._sql(f"CREATE TABLE {self._quoted} (id bigint PRIMARY KEY, payload text NOT NULL)")
        self.produce(self.batches)

    @property
    def _quoted(self) -> str:
        return f"`{self.table}`" if self.connector.startswith("maria-") else f'"{self.table}"'

    def _sql(self, statement: str) -> list[Any]:
        assert self.server is not None
        maria = self.connector.startswith("maria-")
        conn = self.server.connect(autocommit=True) if maria else self.server.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(statement)
                rows = list(cur.fetchall()) if cur.description else []
            if not maria:
                conn.commit()
            return rows
        finally:
            conn.close()

    # ------------------------------------------------------------------ input
    def produce(self, batches: int) -> list[int]:
        """Append ``batches`` more batches of ids to the input topic, evenly over its partitions."""
        from confluent_kafka import Producer

        first = len(self.expected) // self.rows_per_batch
        ids = [
            batch * 1000 + i
            for batch in range(first, first + batches)
            for i in range(self.rows_per_batch)
        ]
        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers, "linger.ms": 5})
        for index, value in enumerate(ids):
            producer.produce(self.source_topic, str(value).encode(), partition=index % PARTITIONS)
        assert producer.flush(30) == 0, "the input was not delivered"
        self.expected += ids
        return ids

    # ----------------------------------------------------------------- driver
    def spec(self) -> dict[str, Any]:
        """What the driver process is told of the sink, its input and its target."""
        return {
            "master_url": self.cluster.master_url,
            "app_name": f"{self.name}-{self.connector}",
            "connector": self.connector,
            "sink_name": self.name,
            "bootstrap": self.kafka.bootstrap_servers,
            "source_topic": self.source_topic,
            "target_topic": self.target_topic,
            "control_topic": self.control_topic,
            "table": self.table,
            "dsn": getattr(self.server, "dsn", None),
            "url": getattr(self.server, "password_url", None),
            "rows_per_batch": self.rows_per_batch,
            "checkpoint": str(self.work / "checkpoint"),
            "poison": self.poison,
        }

    def start_driver(self, *, hold: str | None = None, timeout: float = 120.0) -> DriverRun:
        """Start the driver process (the query runs until the topic's end, ``availableNow``)."""
        runs = len(list(self.work.glob("driver-*.log")))
        spec = {
            **self.spec(),
            "control": str(self.control.path),
            "result": str(self.work / f"result-{runs}.json"),
            "timeout": timeout,
            "hold": hold,
        }
        spec_path = self.work / f"spec-{runs}.json"
        spec_path.write_text(json.dumps(spec, indent=2))
        log = self.work / f"driver-{runs}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.cluster.driver", str(spec_path)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return DriverRun(process, log, Path(spec["result"]))

    def run(self, timeout: float = 150.0) -> dict[str, Any]:
        """Run the driver to its end; fail with its log if the query did not finish cleanly."""
        result = self.start_driver().wait(timeout)
        assert result["rc"] == 0, f"the driver failed: {describe(result)}"
        return result

    # ----------------------------------------------------------------- target
    def visible_ids(self) -> list[int]:
        """Every id a reader of the target sees, once per time it sees it."""
        if self.connector == "kafka":
            records = read_all(self.kafka.bootstrap_servers, self.target_topic, "read_committed")
            return [int(r.value) for r in records if r.value is not None]
        if self.connector.startswith("maria-"):
            exists = self._sql(
                "SELECT COUNT(*) FROM information_schema.TABLES "
                f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = '{self.table}'"
            )[0][0]
        else:
            exists = self._sql(f"SELECT to_regclass('{self.table}') IS NOT NULL")[0][0]
        if not exists:
            return []
        rows = self._sql(f"SELECT id, count(*) FROM {self._quoted} GROUP BY id")
        counts = {int(key): int(n) for key, n in rows}
        return [key for key, n in counts.items() for _ in range(n)]

    def assert_exactly_once(self) -> None:
        """Every input id exactly once in the target (per-key counts), nothing else.

        With poison rows: every good id once in the target, every poison id once in the dead
        letters (as the sink reads them back), with the error class its poison makes.
        """
        if not self.poison:
            assert_exactly_once(self.visible_ids(), self.expected, what="ids")
            return
        bad = [i for i in self.expected if i % 10 == 7]
        assert bad, "no poison id in the input"
        good = [i for i in self.expected if i % 10 != 7]
        assert_exactly_once(self.visible_ids(), good, what="good ids")
        sink = make_sink(self.spec())
        letters = list(sink.read_dead_letters())
        column = "key" if self.connector == "kafka" else "id"
        assert_exactly_once(
            [int(d.values()[column]) for d in letters], bad, what="dead-lettered ids"
        )
        kinds = {d.error_class for d in letters}
        assert kinds == {"too_large" if self.connector == "kafka" else "not_null"}, kinds

    def leftovers(self) -> list[str]:
        """Prepared transactions of the sink (PostgreSQL, MariaDB), or open ones (Kafka)."""
        if self.connector == "kafka":
            return unstable_partitions(
                self.kafka.bootstrap_servers, [self.target_topic, self.control_topic]
            )
        assert self.server is not None
        prefix = f"tp:{self.name}."
        if self.connector.startswith("maria-"):
            return [x for x in self.server.prepared_xids() if x.startswith(prefix)]
        return [gid for gid, _db in self.server.prepared_transactions() if gid.startswith(prefix)]

    # ----------------------------------------------------------------- events
    def attempts(self, hook: str, batch: int, partition: int, outcome: str = "ok") -> list[int]:
        """Attempt numbers whose ``hook`` call for (batch, partition) ended with ``outcome``."""
        return sorted(
            e["attempt"]
            for e in self.control.events(
                event="hook", hook=hook, batch=batch, partition=partition, outcome=outcome
            )
        )

    @property
    def commit_hook(self) -> str:
        """The participant's last hook: ``pre_commit`` (coordinated) or ``commit_with_marker``."""
        return "pre_commit" if self.connector.endswith("-coordinated") else "commit_with_marker"


def eventually(condition: Callable[[], bool], timeout: float = 30.0) -> bool:
    """Poll ``condition`` every 0.1 s until it holds (True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def removed_executors(result: dict[str, Any]) -> dict[str, str]:
    """Executor id -> removal reason, for every executor the driver saw removed."""
    return {
        e["id"]: str(e["remove_reason"])
        for e in result.get("executors", [])
        if not e["active"] and e["remove_reason"]
    }


def failed_tasks(result: dict[str, Any]) -> int:
    """Failed task attempts of the application, as Spark's status tracker counted them."""
    assert "failed_task_attempts" in result, f"the driver did not count them: {describe(result)}"
    return int(result["failed_task_attempts"])


def describe(result: dict[str, Any]) -> str:
    """The driver's result for an assertion message: exception, executors and log tail."""
    shown = {k: v for k, v in result.items() if k not in ("log_tail", "metrics")}
    outcomes = Counter(m.get("outcome") for m in result.get("metrics", []))
    return (
        f"{json.dumps(shown, indent=1, default=str)[:3000]}\nbatch outcomes: {dict(outcomes)}\n"
        f"driver log (end):\n{result.get('log_tail', '')}"
    )

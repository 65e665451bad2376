"""A real driver process SIGKILLed at each protocol point, then restarted from its checkpoint."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.spark.helpers import run_driver, table_ids, write_input
from twophase.testing import FakeTarget, assert_exactly_once

pytestmark = [pytest.mark.spark, pytest.mark.chaos, pytest.mark.slow]


def drive(tmp_path: Path, protocol: str, *crash: str, target: str | None = None) -> tuple[int, str]:
    """Run the driver process once; return its exit code and the end of its log."""
    target = target or str(tmp_path / "target")
    args = [str(tmp_path / "in"), str(tmp_path / "chk"), target, protocol, *crash]
    return run_driver(tmp_path, "tests.spark.driver_process", *args)


@pytest.mark.parametrize(
    ("protocol", "step", "index"),
    # Every driver step is crashed at by the test kit's exploration
    # (tests/unit/test_crash_exploration.py) and, in real processes, by the chaos harness and
    # the connector cases below and in tests/connect/ ("decided", "phase1_done"). These are the
    # points where only a real driver process shows what happens: an executor killing it
    # mid-job, a kill between two phase-2 commits, and a kill after the log's "committed"
    # record but before Spark's own commit log.
    [
        ("A", "phase1", "-"),  # during phase 1 (an executor kills the driver)
        ("A", "committed_handle", "0"),  # between two commits of phase 2
        ("B", "phase1", "-"),
        ("B", "recorded_committed", "-"),  # after "N committed", before Spark's commits/N
    ],
)
def test_sigkilled_driver_restarts_exactly_once(
    tmp_path: Path, protocol: str, step: str, index: str
) -> None:
    expected = write_input(tmp_path / "in", 3)
    code, log = drive(tmp_path, protocol, step, "1", index)
    assert code == -signal.SIGKILL, f"the driver was not killed (rc={code}):\n{log}"
    target = FakeTarget(tmp_path / "target")
    assert len(target.committed_rows()) < len(expected), "the kill came too late to test anything"
    code, log = drive(tmp_path, protocol)
    assert code == 0, log
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []


@pytest.mark.integration
@pytest.mark.parametrize(
    ("protocol", "step", "index"),
    [
        ("pg-A", "decided", "-"),  # all prepared, none visible, decision durable
        ("pg-A", "committed_handle", "0"),  # one partition visible, the other prepared
        ("pg-B", "phase1_done", "-"),  # every partition committed with its marker
    ],
)
def test_sigkilled_driver_with_postgres_restarts_exactly_once(
    tmp_path: Path,
    postgres_server: Any,
    postgres_server_no_prepared: Any,
    protocol: str,
    step: str,
    index: str,
) -> None:
    server = postgres_server if protocol == "pg-A" else postgres_server_no_prepared
    table = f"killed_{uuid.uuid4().hex[:8]}"
    spec = f"{server.dsn}|{table}"
    expected = write_input(tmp_path / "in", 3)

    def visible() -> list[int]:
        return table_ids(server, table)

    def prepared() -> list[str]:
        return [g for g, _db in server.prepared_transactions() if ":killed." in g]

    code, log = drive(tmp_path, protocol, step, "1", index, target=spec)
    assert code == -signal.SIGKILL, f"the driver was not killed (rc={code}):\n{log}"
    assert len(visible()) < len(expected), "the kill came too late to test anything"
    if protocol == "pg-A":
        assert prepared(), "the killed driver should have left prepared transactions"
    code, log = drive(tmp_path, protocol, target=spec)
    assert code == 0, log
    assert_exactly_once(visible(), expected)
    assert prepared() == []


@pytest.mark.integration
def test_sigkilled_driver_with_kafka_restarts_exactly_once(
    tmp_path: Path, kafka_broker: Any, make_topic: Any
) -> None:
    from tests.integration.kafka.conftest import read_all

    topic = make_topic(partitions=2)
    spec = f"{kafka_broker.bootstrap_servers}|{topic}"
    expected = write_input(tmp_path / "in", 3)

    def visible() -> list[int]:
        return [int(r.value) for r in read_all(kafka_broker.bootstrap_servers, topic)]

    code, log = drive(tmp_path, "kafka-B", "phase1_done", "1", "-", target=spec)
    assert code == -signal.SIGKILL, f"the driver was not killed (rc={code}):\n{log}"
    assert 0 < len(visible()) < len(expected), "the kill did not land inside the query"
    code, log = drive(tmp_path, "kafka-B", target=spec)
    assert code == 0, log
    assert_exactly_once(visible(), expected)

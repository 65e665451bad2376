"""Every file in ``examples/`` runs, with a small input, and passes its own exactly-once check.

Each example runs as a user runs it -- ``python examples/<name>.py ...`` in a subprocess, with
its own Spark driver -- against the session's Kafka broker and PostgreSQL server (fixtures in
``tests/conftest.py``), and is judged by its exit status and its own verdict line.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from twophase_dev import KafkaBroker, PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
#: Every example and the test that runs it (test_every_example_has_a_test keeps this complete).
TESTED = {
    "crash_demo.py": "test_crash_demo",
    "custom_sink.py": "test_custom_sink",
    "jdbc_cdc.py": "test_jdbc_cdc",
    "jdbc_upsert.py": "test_jdbc_upsert",
    "kafka_chain.py": "test_kafka_chain",
    "kafka_debezium_cdc.py": "test_kafka_debezium_cdc",
    "kafka_exactly_once.py": "test_kafka_exactly_once",
    "kafka_routing_and_staging.py": "test_kafka_routing_and_staging",
    "orders_pipeline.py": "test_orders_pipeline",
    "smoke_pipeline.py": "test_smoke_pipeline",
    "sqlite_sink.py": "test_sqlite_sink",
}


def run_example(name: str, *args: str, expect: int = 0, timeout: float = 240) -> str:
    """Run ``examples/<name>``; assert its exit status; return its stdout and stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=ROOT,
        env=env,  # servers only through the arguments: the test decides which
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + "\n--- stderr ---\n" + done.stderr
    assert done.returncode == expect, f"{name} exited {done.returncode}:\n{output[-6000:]}"
    return output


def unique(prefix: str) -> str:
    """Return a table name no other test uses (the session's server is shared)."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


def test_every_example_has_a_test() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(TESTED)
    assert all(callable(globals().get(test)) for test in TESTED.values())


def test_custom_sink() -> None:
    out = run_example("custom_sink.py")
    assert "outcome=already-committed" in out
    assert "recovered_committed=2" in out  # recovery finished the decided batch
    assert "OK: ids [1, 2, 3, 4, 5, 6] committed exactly once" in out


def test_sqlite_sink() -> None:
    out = run_example("sqlite_sink.py")
    assert "skipped=2" in out  # the replay found both partitions' markers
    assert "committed exactly once" in out


def test_smoke_pipeline(kafka_broker: KafkaBroker, postgres_server: PostgresServer) -> None:
    out = run_example(
        "smoke_pipeline.py",
        *("--events", "100", "--batch-size", "100"),
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
    )
    assert "OK: every event is in the table exactly once" in out


def test_jdbc_upsert(postgres_server: PostgresServer) -> None:
    out = run_example(
        "jdbc_upsert.py", "--dsn", postgres_server.dsn, "--table", unique("upsert_orders")
    )
    assert "every order holds its latest version exactly once" in out


def test_jdbc_cdc(postgres_server: PostgresServer) -> None:
    out = run_example("jdbc_cdc.py", "--dsn", postgres_server.dsn, "--table", unique("customers"))
    assert "customers_" in out


def test_kafka_exactly_once(kafka_broker: KafkaBroker) -> None:
    out = run_example(
        "kafka_exactly_once.py",
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--orders", "200"),
    )
    assert re.search(r"300 orders in \S+: 0 missing, 0 duplicated", out), out[-3000:]


def test_kafka_routing_and_staging(kafka_broker: KafkaBroker) -> None:
    out = run_example(
        "kafka_routing_and_staging.py",
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--payments", "400"),
    )
    assert "OK: every payment exactly once, in the topic it chose" in out


def test_kafka_debezium_cdc(kafka_broker: KafkaBroker, postgres_server: PostgresServer) -> None:
    out = run_example(
        "kafka_debezium_cdc.py",
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
        *("--customers", "12", "--changes", "60"),
    )
    assert out.count("equals the source row by row") == 2  # after each of the two runs
    assert "OK: every change applied exactly once" in out


def test_kafka_debezium_cdc_refuses_a_truncate(
    kafka_broker: KafkaBroker, postgres_server: PostgresServer
) -> None:
    out = run_example(
        "kafka_debezium_cdc.py",
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
        *("--customers", "6", "--changes", "10", "--truncate"),
        expect=3,  # the DataError branch: the failed query's error is handled by class
    )
    assert "a change cannot be applied: [sink='customers_cdc'" in out
    assert "column='op'" in out


def test_kafka_chain(kafka_broker: KafkaBroker) -> None:
    out = run_example(
        "kafka_chain.py", "--bootstrap-servers", kafka_broker.bootstrap_servers, "--orders", "200"
    )
    aborted = re.search(r"\((\d+) from the aborted attempt\)", out)
    assert aborted, out[-3000:]
    assert int(aborted[1]) > 0, "the dead attempt left no aborted record to ignore"
    assert "read_committed: 300 orders, 0 missing, 0 duplicated" in out


def test_orders_pipeline(kafka_broker: KafkaBroker, postgres_server: PostgresServer) -> None:
    out = run_example(
        "orders_pipeline.py",
        *("--check", "--events", "300", "--batch-size", "100"),
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
    )
    assert "totals: 300 of 300 records out, 0 duplicates, 0 lost" in out
    assert "enriched: 300 of 300 records out, 0 duplicates, 0 lost" in out
    assert "OK: exactly once" in out


def test_crash_demo(kafka_broker: KafkaBroker, postgres_server: PostgresServer) -> None:
    out = run_example(
        "crash_demo.py",
        *("--events", "450", "--batch-size", "150", "--kills", "1", "--seed", "3"),
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
    )
    assert re.search(r"PostgreSQL upsert .* 450 +450 +0 +0 .* exactly once", out), out[-4000:]
    assert re.search(r"Kafka topic .* 450 +450 +0 +0 .* exactly once", out), out[-4000:]
    assert "driver SIGKILLs: 1" in out
    assert "driver runs: 2" in out
    assert "OK: both twophase sinks hold every event exactly once" in out


def test_demo_help_lists_its_knobs() -> None:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    for knob in ("--events", "--kills", "--seed", "--keep-servers"):
        assert knob in done.stdout

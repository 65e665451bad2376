"""Every file in ``examples/`` runs, with a small input, and passes its own exactly-once check.

Each example runs as a user runs it -- ``python examples/<name>.py ...`` in a subprocess, with
its own Spark driver -- against the session's Kafka broker and PostgreSQL server (fixtures in
``tests/conftest.py``), and is judged by its exit status and its own verdict line. Every example
but the crash demo runs without the checkout's development tools (``without_dev_tools.py``), as
after ``pip install 'twophase[all]'``: given its servers, it must not need them.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from twophase_dev import KafkaBroker, PostgresServer, spark_kafka_jars

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
DEMO = EXAMPLES / "demo"  # the crash demo's machinery, apart from the short examples
WITHOUT_DEV_TOOLS = Path(__file__).with_name("without_dev_tools.py")
#: Every example and the test that runs it (test_every_example_has_a_test keeps this complete).
TESTED = {
    "demo/crash_demo.py": "test_crash_demo",
    "custom_sink.py": "test_custom_sink",
    "jdbc_cdc.py": "test_jdbc_cdc",
    "jdbc_upsert.py": "test_jdbc_upsert",
    "kafka_chain.py": "test_kafka_chain",
    "kafka_debezium_cdc.py": "test_kafka_debezium_cdc",
    "kafka_exactly_once.py": "test_kafka_exactly_once",
    "kafka_routing_and_staging.py": "test_kafka_routing_and_staging",
    "demo/orders_pipeline.py": "test_orders_pipeline",
    "smoke_pipeline.py": "test_smoke_pipeline",
    "sqlite_sink.py": "test_sqlite_sink",
}


def run_example(
    name: str,
    *args: str,
    expect: int = 0,
    timeout: float = 240,
    dev_tools: bool = False,
    packages: bool = False,
) -> str:
    """Run ``examples/<name>``; assert its exit status; return its stdout and stderr.

    Without ``dev_tools``, ``import twophase_dev`` fails in the example's driver. With
    ``packages``, Spark's Kafka source comes from Maven as a user gets it (``spark.jars.packages``,
    resolved by Spark at every start); otherwise the jars already resolved for the tests are given
    with ``--jars`` in ``$PYSPARK_SUBMIT_ARGS``, which the examples respect, to save that time.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_")}
    if not packages:
        jars = ",".join(str(j) for j in spark_kafka_jars())
        env["PYSPARK_SUBMIT_ARGS"] = f"--jars {jars} pyspark-shell"
    runner = [] if dev_tools else [str(WITHOUT_DEV_TOOLS)]
    done = subprocess.run(
        [sys.executable, *runner, str(EXAMPLES / name), *args],
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
    examples = [
        p.relative_to(EXAMPLES).as_posix()
        for p in [*EXAMPLES.glob("*.py"), *EXAMPLES.glob("demo/*.py")]
        if not p.name.startswith("_")
    ]
    assert sorted(examples) == sorted(TESTED)
    assert all(callable(globals().get(test)) for test in TESTED.values())


@pytest.mark.parametrize(
    ("name", "args", "instead"),
    [
        ("smoke_pipeline.py", (), "--bootstrap-servers and --dsn"),
        ("jdbc_upsert.py", (), "--dsn"),
        ("jdbc_cdc.py", (), "--dsn"),
        ("kafka_exactly_once.py", ("--dev",), "--bootstrap-servers"),
        ("kafka_routing_and_staging.py", ("--dev",), "--bootstrap-servers"),
        ("kafka_debezium_cdc.py", ("--dsn", "host=unused"), "--bootstrap-servers and --dsn"),
        ("kafka_chain.py", (), "--bootstrap-servers"),
        ("demo/orders_pipeline.py", ("--check",), "--bootstrap-servers and --dsn"),
    ],
)
def test_throwaway_servers_without_dev_tools_say_what_to_do(
    name: str, args: tuple[str, ...], instead: str
) -> None:
    out = run_example(name, *args, expect=1, timeout=60)
    assert "needs the checkout's development tools: run from a checkout after" in out
    assert out.rstrip().endswith(f"scripts/setup.sh, or pass {instead}"), out[-2000:]
    assert "Traceback" not in out


def test_spark_helper_names_the_connector_of_the_installed_pyspark(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import pyspark

    from examples import _spark as helper
    from twophase_dev import spark_kafka_jars

    group, artifact, version = helper.kafka_package().split(":")
    assert (group, version) == ("org.apache.spark", pyspark.__version__)
    # The dev tools resolved the connector on their own (Maven, the Scala of PySpark's jars).
    assert f"{artifact}-{version}.jar" in {jar.name for jar in spark_kafka_jars()}
    # spark-submit's --packages (here through PYSPARK_SUBMIT_ARGS) is left to decide.
    monkeypatch.delenv("PYSPARK_SUBMIT_ARGS", raising=False)
    assert not helper._jars_configured()
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--packages g:a:1 pyspark-shell")
    assert helper._jars_configured()


def test_custom_sink() -> None:
    out = run_example("custom_sink.py")
    assert "outcome=already-committed" in out
    assert "recovered_committed=2" in out  # recovery finished the decided batch
    assert "OK: ids [1, 2, 3, 4, 5, 6] committed exactly once" in out


def test_sqlite_sink() -> None:
    out = run_example("sqlite_sink.py")
    assert "skipped=2" in out  # the replay found both partitions' markers
    assert "committed exactly once" in out
    assert "dead_lettered=1" in out
    assert "OK: 4 rows and 2 dead letters, each input row once" in out


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
        packages=True,  # Spark's Kafka source from Maven, as a user's run gets it
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


# Not in the default run (20-minute budget): the sink's refusal of a truncate ('t' in the op
# column), naming the column, is tests/integration/jdbc/test_postgres_bad_input.py's on the same
# server, and this example's own run is test_kafka_debezium_cdc above.
@pytest.mark.extended
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


@pytest.mark.extended  # test_crash_demo runs this driver and checks its sinks by content
def test_orders_pipeline(kafka_broker: KafkaBroker, postgres_server: PostgresServer) -> None:
    out = run_example(
        "demo/orders_pipeline.py",
        *("--check", "--events", "300", "--batch-size", "100"),
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
    )
    assert "totals: 300 of 300 records out, 0 duplicates, 0 lost" in out
    assert "enriched: 300 of 300 records out, 0 duplicates, 0 lost" in out
    assert "OK: exactly once" in out


def test_crash_demo(kafka_broker: KafkaBroker, postgres_server: PostgresServer) -> None:
    out = run_example(
        "demo/crash_demo.py",
        *("--events", "450", "--batch-size", "150", "--kills", "1", "--seed", "3"),
        *("--bootstrap-servers", kafka_broker.bootstrap_servers, "--dsn", postgres_server.dsn),
        dev_tools=True,  # the flagship demo keeps the servers it started: twophase-dev's state
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


def test_crash_demo_ctrl_c_is_an_interruption(tmp_path: Path) -> None:
    """Ctrl-C reaches the demo and its throwaway servers (the terminal's process group) at once."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TWOPHASE_")}
    log = tmp_path / "demo.log"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [
                sys.executable,
                str(EXAMPLES / "demo" / "crash_demo.py"),
                "--work-dir",
                str(tmp_path / "w"),
            ],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group, as the foreground job of a terminal
        )
    try:
        deadline = time.monotonic() + 120
        while "driver run 1 started" not in log.read_text():
            assert demo.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(3)  # inside the driver's start-up
        os.killpg(demo.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        code = demo.wait(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(demo.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 130, text[-3000:]
    assert "interrupted (Ctrl-C)" in text
    assert "Traceback" not in text
    assert "FAILED" not in text

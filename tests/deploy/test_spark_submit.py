"""Deployment as users do it: the wheel in a packed virtualenv, shipped with ``spark-submit``.

A fresh virtualenv gets the built wheel with the connectors' extras and no PySpark (the cluster
brings its own); ``venv-pack`` packs it; ``spark-submit`` ships it with ``--archives
env.tar.gz#environment`` to the standalone cluster, whose executors run
``./environment/bin/python``, and takes Spark's Kafka source from ``--packages``. The job
(:mod:`tests.deploy.job`) writes one Kafka topic to a topic and to a PostgreSQL table. The first
submission is killed (its whole process group: ``spark-submit`` and the Python driver) mid-run, the
second one finishes: each id is in both targets exactly once, nothing is left prepared or open, and
every executor imported twophase from the shipped environment, never from the checkout.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.kafka.kafka_support import read_all, unstable_partitions
from tests.wheel_support import ROOT, build_wheel, copy_sources, run
from twophase.testing import assert_exactly_once
from twophase_dev import (
    KafkaBroker,
    PostgresServer,
    SparkCluster,
    cluster_conf,
    pyspark_home,
    spark_kafka_jars,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.timeout(900),
]

JOB = Path(__file__).with_name("job.py")
#: The input: ROWS ids over 2 partitions, read ROWS_PER_BATCH at a time (4 batches per query).
ROWS, ROWS_PER_BATCH = 100, 25


@dataclass
class ShippedEnvironment:
    """A virtualenv with the wheel installed, and its packed copy for ``--archives``."""

    python: Path
    archive: Path


@pytest.fixture(scope="module")
def shipped_environment(tmp_path_factory: pytest.TempPathFactory) -> ShippedEnvironment:
    work = tmp_path_factory.mktemp("deploy")
    wheel = build_wheel(copy_sources(work / "src"), work / "dist", "twophase-*.whl")
    venv = work / "env"
    # The interpreter of the driver and of the cluster: PySpark needs one Python minor version.
    # No pip of its own (ensurepip took 8 s): this virtualenv's pip installs into it (--python).
    base = sys._base_executable  # type: ignore[attr-defined]
    run(base, "-m", "venv", "--without-pip", venv, cwd=work)
    python = venv / "bin" / "python"
    pip = (sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check")
    run(*pip, "install", "-q", f"{wheel}[kafka,jdbc]", cwd=work, timeout=600)
    listed = run(*pip, "list", "--format=json", cwd=work).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert "twophase" in installed, installed
    assert "pyspark" not in installed, installed  # the cluster's own PySpark serves
    archive = work / "env.tar.gz"
    # Level 1: gzip took 16 s of CPU at the default level 4 for 120 MB; the archive is read by
    # Spark the same way at any level.
    pack = (Path(sys.executable).with_name("venv-pack"), "-q", "--compress-level", "1")
    run(*pack, "-p", venv, "-o", archive, cwd=work)
    return ShippedEnvironment(python, archive)


def kafka_source_options() -> list[str]:
    """How the job gets Spark's Kafka source: ``--packages``, as users do, where Maven Central can.

    Maven Central serves ``spark-sql-kafka-0-10`` of 4.0.4 and 4.1.3 but not the token provider of
    the same version that it depends on, so ``--packages`` cannot resolve it there
    (docs/deployment.md). Then the jars go in with ``--jars``: the connector with a served token
    provider, as ``twophase_dev`` resolved them from Maven Central.
    """
    (core,) = (pyspark_home() / "jars").glob("spark-core_*.jar")
    scala, version = core.stem.removeprefix("spark-core_").split("-", 1)
    jars = spark_kafka_jars()
    if any(j.name == f"spark-token-provider-kafka-0-10_{scala}-{version}.jar" for j in jars):
        return ["--packages", f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}"]
    return ["--jars", ",".join(str(j) for j in jars)]


@dataclass
class Submission:
    """One ``spark-submit`` of the job, in a process group of its own."""

    process: subprocess.Popen[bytes]
    log: Path
    report: Path

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.kill()

    def log_tail(self) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-60:])


@dataclass
class Deployment:
    """The job's input, targets and checkpoints, and how to submit it."""

    cluster: SparkCluster
    kafka: KafkaBroker
    postgres: PostgresServer
    env: ShippedEnvironment
    work: Path
    name: str

    def __post_init__(self) -> None:
        self.source, self.target = f"{self.name}-in", f"{self.name}-out"
        self.table = f"{self.name.replace('-', '_')}_rows"
        self.kafka.create_topic(self.source, partitions=2)
        self.kafka.create_topic(self.target, partitions=2)
        self.expected = list(range(ROWS))
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.kafka.bootstrap_servers})
        for value in self.expected:
            producer.produce(self.source, str(value).encode(), partition=value % 2)
        assert producer.flush(30) == 0, "the input was not delivered"
        self.submissions = 0

    def submit(self) -> Submission:
        conf = {
            key: value
            for key, value in cluster_conf(self.cluster).items()
            if "python" not in key.lower()  # the cluster's own interpreter: not this job's
        }
        conf.update(
            {
                # Executors: the shipped environment, unpacked into their working directory.
                "spark.pyspark.python": "./environment/bin/python",
                # Driver (client mode, this machine): the environment that was packed.
                "spark.pyspark.driver.python": str(self.env.python),
            }
        )
        index = self.submissions
        self.submissions += 1
        report = self.work / f"report-{index}.json"
        command = [
            str(pyspark_home() / "bin" / "spark-submit"),
            "--master",
            self.cluster.master_url,
            "--deploy-mode",
            "client",
            *kafka_source_options(),
            "--archives",
            f"{self.env.archive}#environment",
            *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
            str(JOB),
            *("--sinks", self.name, "--bootstrap", self.kafka.bootstrap_servers),
            *("--source-topic", self.source, "--target-topic", self.target),
            *("--dsn", self.postgres.dsn, "--table", self.table),
            *("--checkpoints", str(self.work / "checkpoints")),
            *("--rows-per-batch", str(ROWS_PER_BATCH), "--report", str(report)),
        ]
        # Nothing of this test process reaches the job: no PYTHONPATH, no Spark settings.
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SPARK_", "PYSPARK_", "PYTHON", "VIRTUAL_ENV"))
        }
        log = self.work / f"submit-{index}.log"
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                cwd=self.work,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Submission(process, log, report)

    def committed(self, query: str) -> int:
        """Batches the query's checkpoint has committed."""
        commits = self.work / "checkpoints" / query / "commits"
        return len([p for p in commits.glob("[0-9]*")]) if commits.is_dir() else 0

    def planned(self, query: str) -> int:
        """Batches the query's checkpoint has planned (offsets written)."""
        offsets = self.work / "checkpoints" / query / "offsets"
        return len([p for p in offsets.glob("[0-9]*")]) if offsets.is_dir() else 0

    def table_ids(self) -> list[int]:
        conn = self.postgres.connect()
        try:
            with conn.cursor() as cur:
                cur.execute(f'SELECT id FROM "{self.table}"')
                return [int(row[0]) for row in cur.fetchall()]
        finally:
            conn.close()

    def leftovers(self) -> list[str]:
        prepared = [
            gid
            for gid, _db in self.postgres.prepared_transactions()
            if gid.startswith(f"tp:{self.name}-pg.")
        ]
        control = f"{self.name}-kafka-twophase-markers"
        return prepared + unstable_partitions(self.kafka.bootstrap_servers, [self.target, control])


@pytest.fixture
def deployment(
    spark_cluster: SparkCluster,
    kafka_broker: KafkaBroker,
    postgres_server: PostgresServer,
    shipped_environment: ShippedEnvironment,
    tmp_path: Path,
) -> Deployment:
    return Deployment(
        spark_cluster,
        kafka_broker,
        postgres_server,
        shipped_environment,
        tmp_path,
        f"dep{uuid.uuid4().hex[:8]}",
    )


def _mid_run(deployment: Deployment) -> bool:
    """Both queries committed a batch, and one of them has planned a batch it has not committed."""
    queries = ("kafka", "postgres")
    if min(deployment.committed(q) for q in queries) < 1:
        return False
    return any(deployment.planned(q) > deployment.committed(q) for q in queries)


def test_a_shipped_environment_survives_a_driver_kill_exactly_once(
    deployment: Deployment,
) -> None:
    first = deployment.submit()
    deadline = time.monotonic() + 240
    while not _mid_run(deployment):
        assert first.process.poll() is None, f"the first run ended early:\n{first.log_tail()}"
        assert time.monotonic() < deadline, f"no batch committed in time:\n{first.log_tail()}"
        time.sleep(0.02)
    first.kill()
    done = {q: deployment.committed(q) for q in ("kafka", "postgres")}
    assert min(done.values()) < ROWS // ROWS_PER_BATCH, f"the kill came after the end: {done}"
    assert json.loads(first.report.read_text())["finished"] == {}, "the first run finished"

    second = deployment.submit()
    rc = second.wait(timeout=300)
    assert rc == 0, f"the second run failed ({rc}):\n{second.log_tail()}"
    report = json.loads(second.report.read_text())
    assert report["finished"] == {"kafka": True, "postgres": True}, report

    records = read_all(deployment.kafka.bootstrap_servers, deployment.target, "read_committed")
    assert_exactly_once([int(r.value) for r in records], deployment.expected, what="ids")
    assert_exactly_once(deployment.table_ids(), deployment.expected, what="rows")
    assert deployment.leftovers() == []

    # Every executor ran the shipped interpreter and imported twophase and its dependencies
    # from the environment unpacked in its working directory; the driver, from the packed one.
    for run_report in (json.loads(first.report.read_text()), report):
        assert run_report["driver"]["twophase"].startswith(str(deployment.env.python.parents[1]))
        assert run_report["executors"], run_report
        for executor in run_report["executors"]:
            shipped = os.path.realpath(os.path.join(executor["cwd"], "environment"))
            assert os.path.realpath(executor["prefix"]) == shipped, executor
            for module in (executor["twophase"], *executor["modules"]):
                assert os.path.realpath(module).startswith(shipped + os.sep), executor
                assert not os.path.realpath(module).startswith(str(ROOT)), executor

"""Session fixtures for the tests that need servers or Spark.

Everything that starts a process lives here, so that unit tests never start anything: a fixture
only starts its server when a test asks for it.

- ``kafka_broker``: a single-node KRaft broker. Reuses ``$TWOPHASE_KAFKA_BOOTSTRAP`` when set
  (e.g. after ``eval "$(python -m twophase_dev env)"``), else starts one for the session.
- ``kafka_cluster``: three KRaft brokers as one replicated cluster (replication factor 3,
  ``min.insync.replicas`` 2), for the tests that restart or kill brokers; always started here.
- ``postgres_server``: PostgreSQL with ``max_prepared_transactions=64``; reuses
  ``$TWOPHASE_PG_DSN``.
- ``postgres_server_no_prepared``: a second cluster with ``max_prepared_transactions=0`` (the JDBC
  fallback mode); reuses ``$TWOPHASE_PG_NOPREP_DSN``.
- ``mariadb_server``: MariaDB (binary log on) for XA; reuses ``$TWOPHASE_MARIADB_URL``; the tests
  that use it skip when MariaDB is not installed.
- ``s3_endpoint``: an S3-compatible server (moto's, a process of its own) for the coordinator log on
  S3; reuses ``$TWOPHASE_S3_ENDPOINT`` (credentials then come from the usual ``AWS_*`` variables).
- ``gcs_endpoint``: a GCS-compatible server (fake-gcs-server, ``twophase_dev.FakeGcsServer``) for
  the coordinator log on GCS; reuses ``$TWOPHASE_GCS_ENDPOINT`` (its ``http://host:port``).
- ``azure_endpoint``: Azurite's blob service (``twophase_dev.AzuriteServer``) for the coordinator
  log on Azure Blob Storage; reuses ``$TWOPHASE_AZURE_CONNECTION_STRING``.
- ``spark``: a ``local[2]`` SparkSession with Spark's Kafka connector on the classpath.
- ``spark_cluster``: a Spark standalone cluster (a master and two 1-core workers, separate JVMs);
  reuses ``$TWOPHASE_SPARK_MASTER`` (``twophase-dev cluster up``). Applications connect with
  ``twophase_dev.cluster_session`` from a process of their own (one SparkContext per process).
- ``make_topic``: creates uniquely named topics on ``kafka_broker``.
- ``checkpoint_dir``: a fresh, not yet existing checkpoint location per test.

Servers started here are stopped at the end of the session; if the session is killed, the kernel
stops them (parent-death signal) and their throwaway directories are removed by the next session.
Their logs are kept under pytest's temporary directory (``kafka-logs*``, ``kafka-cluster-logs*``,
``postgres-logs*``, ``mariadb-logs*``, ``spark-cluster-logs*``, ``s3-logs*``, ``gcs-logs*``,
``azure-logs*``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from twophase_dev import (
    ENV_KAFKA_BOOTSTRAP,
    ENV_MARIADB_URL,
    ENV_PG_DSN,
    ENV_PG_NOPREP_DSN,
    ENV_SPARK_MASTER,
    SHORT_LIVED_JVM_OPTIONS,
    AzuriteServer,
    DevInfraError,
    FakeGcsServer,
    KafkaBroker,
    KafkaCluster,
    MariaDBServer,
    PostgresServer,
    SparkCluster,
    attach_kafka,
    attach_mariadb,
    attach_postgres,
    attach_spark_cluster,
    clean_stale_work_dirs,
    find_mariadb_binaries,
    free_ports,
    gcs_connector_jar,
    gcs_hadoop_conf,
    spark_jvm_options,
    spark_kafka_jars,
    spark_session,
)

#: Markers derived from the fixtures a test reaches; end-of-run sections gathered from workers.
pytest_plugins = ["tests.needs", "tests.summaries", "tests.workers"]

# Every Spark driver a test starts, also through an example's own session code, runs its JVM with
# the dev tools' options for short-lived JVMs (C1 only, serial GC: about half the CPU; Spark's
# classes from the class-data archive that setup made).
os.environ.setdefault("SPARK_SUBMIT_OPTS", spark_jvm_options())
# ... and the launcher JVM that spark-submit runs first to build the driver's command line.
os.environ.setdefault("SPARK_LAUNCHER_OPTS", SHORT_LIVED_JVM_OPTIONS)

ENV_S3_ENDPOINT = "TWOPHASE_S3_ENDPOINT"
ENV_GCS_ENDPOINT = "TWOPHASE_GCS_ENDPOINT"
ENV_AZURE_CONNECTION_STRING = "TWOPHASE_AZURE_CONNECTION_STRING"


@pytest.fixture(scope="session")
def _stale_dirs_cleaned() -> None:
    """Remove throwaway server directories left behind by killed sessions (once per session)."""
    clean_stale_work_dirs()


@pytest.fixture(scope="session")
def kafka_broker(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[KafkaBroker]:
    """A Kafka broker for the whole session (``bootstrap_servers``, ``create_topic``, ...)."""
    bootstrap = os.environ.get(ENV_KAFKA_BOOTSTRAP)
    if bootstrap:
        yield attach_kafka(bootstrap)
        return
    broker = KafkaBroker(log_dir=tmp_path_factory.mktemp("kafka-logs"))
    broker.start()
    try:
        yield broker
    finally:
        # The clients this process keeps (pooled producers, the marker reader's consumer)
        # would try to reconnect to the stopped broker until exit: close them first.
        from twophase.connectors.kafka import close_clients

        close_clients()
        broker.stop()


@pytest.fixture(scope="session")
def kafka_cluster(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[KafkaCluster]:
    """A 3-broker Kafka cluster for the session (``bootstrap_servers``, ``broker(id)``, ...).

    Always its own (no environment variable names one): its tests stop and kill its brokers.
    A test that took a broker away brings it back (``start()``) and waits for ``wait_in_sync()``.
    """
    cluster = KafkaCluster(log_dir=tmp_path_factory.mktemp("kafka-cluster-logs"))
    cluster.start()
    try:
        yield cluster
    finally:
        from twophase.connectors.kafka import close_clients

        close_clients()
        cluster.stop()


def _postgres(
    tmp_path_factory: pytest.TempPathFactory, env_var: str, max_prepared_transactions: int
) -> Iterator[PostgresServer]:
    dsn = os.environ.get(env_var)
    if dsn:
        yield attach_postgres(dsn, max_prepared_transactions=max_prepared_transactions)
        return
    server = PostgresServer(
        max_prepared_transactions=max_prepared_transactions,
        log_dir=tmp_path_factory.mktemp("postgres-logs"),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_server(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PostgresServer]:
    """PostgreSQL with prepared transactions enabled (``dsn``, ``connect()``, ``restart()``)."""
    yield from _postgres(tmp_path_factory, ENV_PG_DSN, 64)


@pytest.fixture(autouse=True)
def _postgres_to_itself(request: pytest.FixtureRequest) -> None:
    """Give a test that uses ``postgres_server`` its slots (no other sink's fence row is recent)."""
    if "postgres_server" in request.fixturenames:
        request.getfixturevalue("postgres_server").forget_fences()


@pytest.fixture(scope="session")
def postgres_server_no_prepared(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PostgresServer]:
    """A second PostgreSQL cluster with ``max_prepared_transactions = 0``."""
    yield from _postgres(tmp_path_factory, ENV_PG_NOPREP_DSN, 0)


def _mariadb_or_skip() -> None:
    """Skip the calling test when the MariaDB server binaries are not installed."""
    try:
        find_mariadb_binaries()
    except DevInfraError as exc:
        pytest.skip(f"MariaDB is not installed: {exc}")


@pytest.fixture(scope="session")
def mariadb_server(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[MariaDBServer]:
    """MariaDB with the binary log on (``url``, ``connect()``, ``restart()``, ``kill()``)."""
    url = os.environ.get(ENV_MARIADB_URL)
    if url:
        yield attach_mariadb(url)
        return
    _mariadb_or_skip()
    server = MariaDBServer(log_dir=tmp_path_factory.mktemp("mariadb-logs"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class S3Endpoint:
    """An S3-compatible endpoint: its ``url`` and the boto3 client options that reach it."""

    url: str
    options: Mapping[str, str] = field(default_factory=dict)

    def client(self) -> Any:
        """Return a new boto3 S3 client of the endpoint (one per simulated process)."""
        import boto3

        return boto3.client("s3", endpoint_url=self.url, **self.options)

    def new_bucket(self) -> str:
        """Create a bucket with a fresh name and return the name."""
        name = f"twophase-{uuid.uuid4().hex[:20]}"
        self.client().create_bucket(Bucket=name)
        return name

    def environment(self) -> dict[str, str]:
        """The ``AWS_*`` variables under which boto3's own resolution finds the endpoint."""
        names = {
            "aws_access_key_id": "AWS_ACCESS_KEY_ID",
            "aws_secret_access_key": "AWS_SECRET_ACCESS_KEY",
            "region_name": "AWS_DEFAULT_REGION",
        }
        return {"AWS_ENDPOINT_URL": self.url, **{names[k]: v for k, v in self.options.items()}}


# moto's S3 checks If-None-Match and then stores the object, which is atomic only while one
# request runs at a time; `python -m moto.server` serves each request in a thread of its own.
# Served one at a time, moto arbitrates racing conditional writes the way S3 does (one wins,
# the others get 412), so the race tests test the store's client side, not moto's threads.
_MOTO_SERVER = """
import sys
from werkzeug.serving import run_simple
from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication, MotoRequestHandler, create_backend_app,
)
app = DomainDispatcherApplication(create_backend_app)
run_simple("127.0.0.1", int(sys.argv[1]), app, threaded=False, request_handler=MotoRequestHandler)
"""


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0):
            return True
    except urllib.error.HTTPError:
        return True  # it answered, if only to refuse an unsigned request
    except OSError:
        return False


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Endpoint]:
    """An S3-compatible server for the session: moto's S3 on a free port (about 2 s to start)."""
    url = os.environ.get(ENV_S3_ENDPOINT)
    if url:
        yield S3Endpoint(url)
        return
    (port,) = free_ports(1)
    log = tmp_path_factory.mktemp("s3-logs") / "moto.log"
    setpriv = shutil.which("setpriv")  # the server dies with this process, however it ends
    prefix = [setpriv, "--pdeathsig=TERM", "--"] if setpriv else []
    with log.open("ab") as out:
        server = subprocess.Popen(
            [*prefix, sys.executable, "-c", _MOTO_SERVER, str(port)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MOTO_PORT": str(port)},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(url):
            if server.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"moto's S3 server did not start on {url}:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        options = {
            "aws_access_key_id": "testing",
            "aws_secret_access_key": "testing",
            "region_name": "us-east-1",
        }
        yield S3Endpoint(url, options)
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


@dataclass(frozen=True)
class GcsEndpoint:
    """A GCS-compatible endpoint (the JSON API at ``url``, no credentials needed)."""

    url: str

    def new_bucket(self) -> str:
        """Create a bucket with a fresh name and return the name."""
        name = f"twophase-{uuid.uuid4().hex[:20]}"
        request = urllib.request.Request(
            f"{self.url}/storage/v1/b?project=test",
            data=json.dumps({"name": name}).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10.0):
            return name

    def environment(self) -> dict[str, str]:
        """The variable under which the Google client libraries find the emulator."""
        return {"STORAGE_EMULATOR_HOST": self.url}


@pytest.fixture(scope="session")
def gcs_endpoint(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[GcsEndpoint]:
    """A GCS-compatible server for the session: fake-gcs-server in memory (well under 1 s)."""
    url = os.environ.get(ENV_GCS_ENDPOINT)
    if url:
        yield GcsEndpoint(url.rstrip("/"))
        return
    server = FakeGcsServer(log_dir=tmp_path_factory.mktemp("gcs-logs"))
    server.start()
    try:
        yield GcsEndpoint(server.url)
    finally:
        server.stop()


@dataclass(frozen=True)
class AzureEndpoint:
    """An Azure Blob endpoint: the account's blob ``url`` and its ``connection_string``."""

    url: str
    connection_string: str

    def client(self) -> Any:
        """Return a new ``BlobServiceClient`` of the account (one per simulated process)."""
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def new_container(self) -> str:
        """Create a container with a fresh name and return the name."""
        name = f"twophase-{uuid.uuid4().hex[:20]}"
        self.client().create_container(name)
        return name

    def environment(self) -> dict[str, str]:
        """The variable under which the Azure client libraries find the account."""
        return {"AZURE_STORAGE_CONNECTION_STRING": self.connection_string}


@pytest.fixture(scope="session")
def azure_endpoint(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[AzureEndpoint]:
    """Azurite's blob service for the session, development account (about 1 s to start)."""
    connection_string = os.environ.get(ENV_AZURE_CONNECTION_STRING)
    if connection_string:
        parts = dict(p.split("=", 1) for p in connection_string.split(";") if "=" in p)
        yield AzureEndpoint(parts.get("BlobEndpoint", "").rstrip("/"), connection_string)
        return
    server = AzuriteServer(log_dir=tmp_path_factory.mktemp("azure-logs"))
    server.start()
    try:
        yield AzureEndpoint(server.blob_endpoint, server.connection_string)
    finally:
        server.stop()


@pytest.fixture(scope="session")
def spark(gcs_endpoint: GcsEndpoint) -> Iterator[Any]:
    """A ``local[2,3]`` SparkSession (task retries on) with Spark's Kafka source and sink.

    Its Hadoop reads ``gs://`` from the session's GCS emulator (Google's Hadoop connector).
    """
    # TWOPHASE_SPARK_KAFKA=0: a PySpark whose Kafka connector Maven Central does not serve
    # (scripts/compat.sh); the tests of Spark's Kafka source are not run there.
    kafka = os.environ.get("TWOPHASE_SPARK_KAFKA", "1") != "0"
    jars = [*(spark_kafka_jars() if kafka else []), gcs_connector_jar()]
    conf = {**gcs_hadoop_conf(gcs_endpoint.url), "spark.jars": ",".join(str(j) for j in jars)}
    session = spark_session("twophase-tests", master="local[2,3]", kafka=kafka, extra_conf=conf)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[SparkCluster]:
    """A Spark standalone cluster: ``master_url``, ``workers``, ``processes()``, ``executor_pids``.

    Started on first use (about 10 s) and stopped, with every executor and Python worker, at the
    end of the session. Connect with ``twophase_dev.cluster_session(app, cluster)`` from a driver
    process of its own: this process may already hold the local ``spark`` session.
    """
    master_url = os.environ.get(ENV_SPARK_MASTER)
    if master_url:
        yield attach_spark_cluster(master_url)
        return
    cluster = SparkCluster(log_dir=tmp_path_factory.mktemp("spark-cluster-logs"))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def make_topic(kafka_broker: KafkaBroker) -> Callable[..., str]:
    """Return ``make(partitions=1, *, prefix="t", config=None) -> name`` creating a new topic."""

    def make(
        partitions: int = 1, *, prefix: str = "t", config: Mapping[str, str] | None = None
    ) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:12]}"
        kafka_broker.create_topic(name, partitions=partitions, config=config)
        return name

    return make


@pytest.fixture
def checkpoint_dir(tmp_path: Path) -> Path:
    """A checkpoint location unique to the test (Spark creates the directory)."""
    return tmp_path / "checkpoint"

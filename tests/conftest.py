"""Session fixtures for the tests that need servers or Spark.

Everything that starts a process lives here, so that unit tests never start anything: a fixture
only starts its server when a test asks for it.

- ``kafka_broker``: a single-node KRaft broker. Reuses ``$TWOPHASE_KAFKA_BOOTSTRAP`` when set
  (e.g. after ``eval "$(python -m twophase_dev env)"``), else starts one for the session.
- ``postgres_server``: PostgreSQL with ``max_prepared_transactions=64``; reuses
  ``$TWOPHASE_PG_DSN``.
- ``postgres_server_no_prepared``: a second cluster with ``max_prepared_transactions=0`` (the JDBC
  fallback mode); reuses ``$TWOPHASE_PG_NOPREP_DSN``.
- ``spark``: a ``local[2]`` SparkSession with Spark's Kafka connector on the classpath.
- ``spark_cluster``: a Spark standalone cluster (a master and two 1-core workers, separate JVMs);
  reuses ``$TWOPHASE_SPARK_MASTER`` (``twophase-dev cluster up``). Applications connect with
  ``twophase_dev.cluster_session`` from a process of their own (one SparkContext per process).
- ``make_topic``: creates uniquely named topics on ``kafka_broker``.
- ``checkpoint_dir``: a fresh, not yet existing checkpoint location per test.

Servers started here are stopped at the end of the session; if the session is killed, the kernel
stops them (parent-death signal) and their throwaway directories are removed by the next session.
Their logs are kept under pytest's temporary directory (``kafka-logs*``, ``postgres-logs*``,
``spark-cluster-logs*``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from twophase_dev import (
    ENV_KAFKA_BOOTSTRAP,
    ENV_PG_DSN,
    ENV_PG_NOPREP_DSN,
    ENV_SPARK_MASTER,
    KafkaBroker,
    PostgresServer,
    SparkCluster,
    attach_kafka,
    attach_postgres,
    attach_spark_cluster,
    clean_stale_work_dirs,
    spark_session,
)


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
        from twophase.connectors.kafka import _markers, _pool

        _pool.clear()
        _markers.close_idle_clients()
        broker.stop()


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


@pytest.fixture(scope="session")
def postgres_server_no_prepared(
    tmp_path_factory: pytest.TempPathFactory, _stale_dirs_cleaned: None
) -> Iterator[PostgresServer]:
    """A second PostgreSQL cluster with ``max_prepared_transactions = 0``."""
    yield from _postgres(tmp_path_factory, ENV_PG_NOPREP_DSN, 0)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A ``local[2,3]`` SparkSession (task retries on) with Spark's Kafka source and sink."""
    session = spark_session("twophase-tests", master="local[2,3]")
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

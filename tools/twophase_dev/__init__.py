"""Local infrastructure for developing and testing twophase: Kafka, PostgreSQL, MariaDB, Spark jars.

This package is the project's own tooling, a separate distribution (``tools/pyproject.toml``,
``twophase-dev``) that is not part of the ``twophase`` wheel. The core (``twophase/*.py``) and the
connectors never import it; the test suite (``tests/conftest.py``), the examples and the
``twophase-dev`` command do. It needs ``confluent-kafka``, ``psycopg2-binary``, PySpark, Java 17+,
Maven and the PostgreSQL and MariaDB server binaries (``bash scripts/setup.sh`` installs all of
them); ``PyMySQL`` for MariaDB.

What it provides:

- :class:`KafkaBroker`: a single-node KRaft broker on 127.0.0.1 (free ports, throwaway data).
- :class:`KafkaCluster`: three such brokers as one replicated cluster (a 3-voter KRaft quorum,
  replication factor 3, ``min.insync.replicas`` 2) whose brokers a test restarts or kills, with
  ``leader_of`` and ``coordinator_of`` to choose which.
- :class:`PostgresServer`: a throwaway PostgreSQL cluster on 127.0.0.1 with
  ``max_prepared_transactions`` of your choice (0 included) and ``restart()`` for chaos tests;
  :class:`PostgresStandby`, a streaming standby of one, promoted for a failover
  (:func:`make_synchronous` makes it synchronous).
- :class:`MariaDBServer`: a throwaway MariaDB server on 127.0.0.1 (binary log on or off) whose
  prepared XA transactions survive ``restart()`` and ``kill()``; :class:`MariaDBReplica`, a
  replica of one by GTID, promoted for a failover (:func:`make_semi_synchronous`).
- :class:`NetworkNamespace`: a network namespace joined to this one by a veth pair; the three
  servers above accept ``netns=`` to run inside one, and :meth:`NetworkNamespace.cut` /
  :meth:`NetworkNamespace.heal` partition them silently from the test process (root only).
- :func:`spark_session` / :func:`spark_kafka_jars`: a local SparkSession with Spark's Kafka
  connector on the classpath.
- :class:`SparkCluster` / :func:`cluster_session`: a Spark standalone cluster (a master and two
  one-core workers, separate JVMs on 127.0.0.1) and a client-mode SparkSession on it whose
  executors get the Kafka jars and the project's Python; :meth:`SparkCluster.processes` tells
  executors, Python daemons and Python workers apart for tests that kill or freeze them.
- :class:`SparkConnectServer`: a local Spark Connect server from the installed PySpark (the
  sinks' ``foreachBatch`` worker runs there), with ``kill()`` to crash it like a driver.
- :func:`resolve_classpath`: Maven-resolved, cached runtime classpaths.
- :class:`DevState`: what ``twophase-dev up`` started, so ``down`` stops exactly that.

Everything runs on the developer's machine; nothing here is shipped to Spark executors.

Examples
--------
>>> from twophase_dev import KafkaBroker, PostgresServer  # doctest: +SKIP
>>> with KafkaBroker() as kafka, PostgresServer() as pg:  # doctest: +SKIP
...     kafka.create_topic("events", partitions=2)
...     print(kafka.bootstrap_servers, pg.dsn)
"""

from twophase_dev._attach import (
    attach_kafka,
    attach_mariadb,
    attach_postgres,
    attach_spark_cluster,
)
from twophase_dev._emulators._install import (
    AZURITE_ACCOUNT_KEY,
    AZURITE_ACCOUNT_NAME,
    AZURITE_VERSION,
    FAKE_GCS_VERSION,
    install_azurite,
    install_fake_gcs,
)
from twophase_dev._emulators._servers import AzuriteServer, FakeGcsServer
from twophase_dev._errors import DevInfraError
from twophase_dev._gcs_connector import GCS_CONNECTOR_VERSION, gcs_connector_jar, gcs_hadoop_conf
from twophase_dev._host._ports import free_ports
from twophase_dev._host._workdirs import clean_stale_work_dirs
from twophase_dev._jvm import (
    SHORT_LIVED_JVM_OPTIONS,
    build_spark_class_archive,
    pyspark_home,
    spark_class_archive,
    spark_jvm_options,
)
from twophase_dev._kafka._broker import KafkaBroker
from twophase_dev._kafka._cluster import KafkaCluster
from twophase_dev._kafka._install import KAFKA_VERSION, kafka_classpath
from twophase_dev._mariadb._binaries import find_mariadb_binaries
from twophase_dev._mariadb._replica import MariaDBReplica, make_semi_synchronous
from twophase_dev._mariadb._server import MariaDBServer
from twophase_dev._maven import MavenArtifact, MavenError, resolve_classpath
from twophase_dev._netns._evidence import TcpConnection, TrafficCounters
from twophase_dev._netns._namespace import CutMode, NetworkNamespace
from twophase_dev._postgres._binaries import find_postgres_bin_dir
from twophase_dev._postgres._server import PostgresServer
from twophase_dev._postgres._standby import PostgresStandby, make_synchronous
from twophase_dev._spark._cluster import SparkCluster
from twophase_dev._spark._cluster_session import cluster_conf, cluster_session
from twophase_dev._spark._connect import CONNECT_ENV_MARKER, SparkConnectServer
from twophase_dev._spark._daemons import SparkWorker
from twophase_dev._spark._jars import spark_kafka_jars
from twophase_dev._spark._local import spark_session, spark_test_conf
from twophase_dev._spark._processes import CLUSTER_ENV_MARKER, ClusterProcess
from twophase_dev._state import (
    ENV_KAFKA_BOOTSTRAP,
    ENV_MARIADB_URL,
    ENV_PG_DSN,
    ENV_PG_NOPREP_DSN,
    ENV_SPARK_MASTER,
    DevState,
    state_home,
)

__all__ = [
    "AZURITE_ACCOUNT_KEY",
    "AZURITE_ACCOUNT_NAME",
    "AZURITE_VERSION",
    "CLUSTER_ENV_MARKER",
    "CONNECT_ENV_MARKER",
    "ENV_KAFKA_BOOTSTRAP",
    "ENV_MARIADB_URL",
    "ENV_PG_DSN",
    "ENV_PG_NOPREP_DSN",
    "ENV_SPARK_MASTER",
    "FAKE_GCS_VERSION",
    "GCS_CONNECTOR_VERSION",
    "KAFKA_VERSION",
    "SHORT_LIVED_JVM_OPTIONS",
    "AzuriteServer",
    "ClusterProcess",
    "CutMode",
    "DevInfraError",
    "DevState",
    "FakeGcsServer",
    "KafkaBroker",
    "KafkaCluster",
    "MariaDBReplica",
    "MariaDBServer",
    "MavenArtifact",
    "MavenError",
    "NetworkNamespace",
    "PostgresServer",
    "PostgresStandby",
    "SparkCluster",
    "SparkConnectServer",
    "SparkWorker",
    "TcpConnection",
    "TrafficCounters",
    "attach_kafka",
    "attach_mariadb",
    "attach_postgres",
    "attach_spark_cluster",
    "build_spark_class_archive",
    "clean_stale_work_dirs",
    "cluster_conf",
    "cluster_session",
    "find_mariadb_binaries",
    "find_postgres_bin_dir",
    "free_ports",
    "gcs_connector_jar",
    "gcs_hadoop_conf",
    "install_azurite",
    "install_fake_gcs",
    "kafka_classpath",
    "make_semi_synchronous",
    "make_synchronous",
    "pyspark_home",
    "resolve_classpath",
    "spark_class_archive",
    "spark_jvm_options",
    "spark_kafka_jars",
    "spark_session",
    "spark_test_conf",
    "state_home",
]

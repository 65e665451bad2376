"""Handles for the servers the environment names (``$TWOPHASE_*``), restartable when recorded.

A test session told by an environment variable to reuse a running server gets the handle that
``twophase-dev up`` recorded for it (so a chaos test can restart it) when there is one, else an
``external`` handle that can only talk to it.

Runs on: the developer's machine, in the test session.
"""

from __future__ import annotations

from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._kafka._broker import KafkaBroker
from twophase_dev._mariadb._server import MariaDBServer
from twophase_dev._postgres._server import PostgresServer
from twophase_dev._spark._cluster import SparkCluster
from twophase_dev._state import ENV_KAFKA_BOOTSTRAP, ENV_SPARK_MASTER, DevState

__all__ = ["attach_kafka", "attach_mariadb", "attach_postgres", "attach_spark_cluster"]


def attach_kafka(bootstrap_servers: str, *, home: Path | None = None) -> KafkaBroker:
    """Return a handle for the broker at ``bootstrap_servers`` (e.g. ``$TWOPHASE_KAFKA_BOOTSTRAP``).

    Parameters
    ----------
    bootstrap_servers : str
        ``host:port`` of a running broker.
    home : pathlib.Path, optional
        State directory to look in; :func:`state_home` by default.

    Returns
    -------
    KafkaBroker
        The recorded handle if ``twophase-dev up`` started that broker (so it can be restarted),
        else an :meth:`~KafkaBroker.external` one.

    Raises
    ------
    DevInfraError
        If nothing answers at that address.
    """
    broker = KafkaBroker.external(bootstrap_servers)
    if not broker.is_running():
        raise DevInfraError(
            f"no Kafka broker answers at {bootstrap_servers} ({ENV_KAFKA_BOOTSTRAP}); start one "
            "with 'twophase-dev up --kafka' or unset the variable to let the tests start their own"
        )
    if broker.port is not None and broker.host in ("127.0.0.1", "localhost"):
        found = DevState(home).find("kafka", broker.port)
        if isinstance(found, KafkaBroker):
            return found
    return broker


def attach_postgres(
    dsn: str, *, max_prepared_transactions: int | None = None, home: Path | None = None
) -> PostgresServer:
    """Return a handle for the server at ``dsn`` (e.g. ``$TWOPHASE_PG_DSN``).

    Parameters
    ----------
    dsn : str
        Connection string or URL of a superuser.
    max_prepared_transactions : int, optional
        If given, the server's setting must equal it (``0`` for the fallback-mode fixture).
    home : pathlib.Path, optional
        State directory to look in; :func:`state_home` by default.

    Returns
    -------
    PostgresServer
        The recorded handle if ``twophase-dev up`` started that server (so it can be restarted),
        else an :meth:`~PostgresServer.external` one.

    Raises
    ------
    DevInfraError
        If the server cannot be reached or has another ``max_prepared_transactions``.
    """
    import psycopg2

    try:
        server = PostgresServer.external(dsn)
    except psycopg2.Error as exc:
        raise DevInfraError(f"cannot connect to PostgreSQL at {dsn}: {exc}".strip()) from exc
    if (
        max_prepared_transactions is not None
        and server.max_prepared_transactions != max_prepared_transactions
    ):
        raise DevInfraError(
            f"the PostgreSQL server at {dsn} has max_prepared_transactions="
            f"{server.max_prepared_transactions}, the tests need {max_prepared_transactions}"
        )
    if server.port is not None and server.host in ("127.0.0.1", "localhost"):
        found = DevState(home).find("postgres", server.port)
        if isinstance(found, PostgresServer):
            return found
    return server


def attach_mariadb(url: str, *, home: Path | None = None) -> MariaDBServer:
    """Return a handle for the server at ``url`` (e.g. ``$TWOPHASE_MARIADB_URL``).

    Parameters
    ----------
    url : str
        ``mysql://user[:password]@host:port/database`` of a user who may create tables there.
    home : pathlib.Path, optional
        State directory to look in; :func:`state_home` by default.

    Returns
    -------
    MariaDBServer
        The recorded handle if ``twophase-dev up`` started that server (so it can be restarted),
        else an :meth:`~MariaDBServer.external` one.

    Raises
    ------
    DevInfraError
        If the server cannot be reached.
    """
    import pymysql

    try:
        server = MariaDBServer.external(url)
    except (pymysql.err.Error, ValueError) as exc:
        raise DevInfraError(f"cannot connect to MariaDB at {url}: {exc}".strip()) from exc
    if server.port is not None and server.host in ("127.0.0.1", "localhost"):
        found = DevState(home).find("mariadb", server.port)
        if isinstance(found, MariaDBServer):
            return found
    return server


def attach_spark_cluster(master_url: str, *, home: Path | None = None) -> SparkCluster:
    """Return a handle for the cluster at ``master_url`` (e.g. ``$TWOPHASE_SPARK_MASTER``).

    Parameters
    ----------
    master_url : str
        ``spark://host:port`` of a running standalone master.
    home : pathlib.Path, optional
        State directory to look in; :func:`state_home` by default.

    Returns
    -------
    SparkCluster
        The recorded handle if ``twophase-dev cluster up`` started that cluster, else an
        :meth:`~SparkCluster.external` one (its workers found by their command lines).

    Raises
    ------
    DevInfraError
        If nothing answers at that address.
    """
    cluster = SparkCluster.external(master_url)
    if not cluster.is_running():
        raise DevInfraError(
            f"no Spark master answers at {master_url} ({ENV_SPARK_MASTER}); start one with "
            "'twophase-dev cluster up' or unset the variable to let the tests start their own"
        )
    found = DevState(home).find("spark-cluster", cluster.port or 0)
    if isinstance(found, SparkCluster):
        return found
    return cluster

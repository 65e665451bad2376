"""The client session's settings on a Spark standalone cluster, and the session itself.

:func:`cluster_conf` is what a driver on this machine adds to
:func:`~twophase_dev.spark_test_conf` to run on a :class:`~twophase_dev.SparkCluster` (client
mode, one one-core executor per worker, task retries, fast loss detection), each key explained
beside it; :func:`cluster_session` creates that session and waits for its executors.

Runs on: the Spark driver's machine (the developer's or test session's Python process).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from twophase_dev._errors import DevInfraError
from twophase_dev._host._wait import wait_until
from twophase_dev._jvm import spark_jvm_options
from twophase_dev._spark._cluster import SparkCluster
from twophase_dev._spark._local import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["cluster_conf", "cluster_session"]


def cluster_conf(cluster: SparkCluster, *, python_path: Sequence[str] = ()) -> dict[str, str]:
    """Return the settings :func:`cluster_session` adds to :func:`~twophase_dev.spark_test_conf`.

    Parameters
    ----------
    cluster : SparkCluster
        The cluster (its Python and size).
    python_path : sequence of str, optional
        Directories the executors' Python workers must import from besides the installed packages
        (e.g. the repository root, for classes defined in test modules).

    Returns
    -------
    dict of str to str
        Configuration keys and values, each explained in the source.
    """
    conf = {
        # Client mode: the driver is this process, the executors run on the workers.
        "spark.submit.deployMode": "client",
        # One executor per worker core, each running one task at a time: with 2 one-core workers a
        # batch of 2 partitions runs one task on each executor, and a retry lands on the survivor.
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.cores.max": str(cluster.total_cores),
        # Task retries on (local mode has none): a task that fails -- its Python worker killed,
        # its executor lost -- runs again, 4 attempts in all (Spark's default on a cluster, set
        # explicitly because the tests rely on it).
        "spark.task.maxFailures": "4",
        # Speculative attempts are refused by twophase (docs/guarantees.md); a cluster is where
        # someone would turn them on, so the tests pin them off.
        "spark.speculation": "false",
        # Executors send a heartbeat every second...
        "spark.executor.heartbeatInterval": "1s",
        # ...and the driver declares an executor lost after 10 s without one (Spark's default is
        # 120 s). A SIGKILLed executor is noticed at once anyway (its connection drops); this one
        # is for a frozen (SIGSTOPped) executor, the zombie tests' case. It is also the default of
        # the RPC ask and shuffle timeouts, which 10 s on loopback leaves ample room for.
        "spark.network.timeout": "10s",
        # The driver checks for expired heartbeats every second instead of every minute.
        "spark.network.timeoutInterval": "1s",
        # A block (a broadcast piece) held by an executor that was just killed is fetched from
        # elsewhere after 1 s instead of 5 s.
        "spark.shuffle.io.retryWait": "1s",
        # Tasks go to any free executor at once: with executors coming and going, waiting 3 s for
        # a "preferred" one (Kafka partitions have preferred executors) only slows retries down.
        "spark.locality.wait": "0s",
        # The first job waits until every executor has registered (at most a minute), so that a
        # test's first batch already runs on both workers.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        # A failed task may be retried on the executor where it failed; Spark's default, pinned
        # because excluding an executor of a two-executor cluster would stall retries.
        "spark.excludeOnFailure.enabled": "false",
        # Short-lived test JVMs: the C1 compiler alone warms up faster than tiered compilation,
        # the serial collector needs no GC threads on a 2-core machine, and Spark's classes come
        # from the class-data archive (twophase_dev._jvm).
        "spark.executor.extraJavaOptions": spark_jvm_options(),
        "spark.driver.extraJavaOptions": spark_jvm_options(),
        # The executors' Python workers run the cluster's interpreter (the project's .venv).
        "spark.pyspark.python": cluster.python,
        "spark.executorEnv.PYSPARK_PYTHON": cluster.python,
    }
    if python_path:
        conf["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(python_path)
    return conf


def cluster_session(
    app_name: str,
    cluster: SparkCluster,
    *,
    extra_conf: Mapping[str, str] | None = None,
    python_path: Sequence[str] = (),
    kafka: bool = True,
    wait_for_executors: bool = True,
    timeout: float = 90.0,
    log_level: str = "WARN",
) -> SparkSession:
    """Create a client-mode SparkSession on ``cluster`` with Spark's Kafka jars on the executors.

    The settings are :func:`~twophase_dev.spark_test_conf` plus :func:`cluster_conf`; Spark ships
    ``spark.jars`` (the Kafka connector) to every executor.

    Parameters
    ----------
    app_name : str
        Spark application name.
    cluster : SparkCluster
        A running cluster.
    extra_conf : mapping of str to str, optional
        Overrides and additions.
    python_path : sequence of str, optional
        See :func:`cluster_conf`.
    kafka : bool, optional
        Put Spark's Kafka connector on the driver's and the executors' classpaths.
    wait_for_executors : bool, optional
        Return only once one executor per worker core has registered.
    timeout : float, optional
        Seconds to wait for them.
    log_level : str, optional
        Log level of the driver's Spark logger.

    Returns
    -------
    pyspark.sql.SparkSession
        The session; ``spark.sparkContext.applicationId`` names its executors in
        :meth:`SparkCluster.processes`.

    Raises
    ------
    DevInfraError
        If another SparkContext already runs in this process (one per process: run the
        cluster's driver in a process of its own), or the executors do not register in time.
    """
    conf = cluster_conf(cluster, python_path=python_path)
    conf.update(extra_conf or {})
    session = spark_session(
        app_name, master=cluster.master_url, extra_conf=conf, kafka=kafka, log_level=log_level
    )
    master = session.sparkContext.master
    if master != cluster.master_url:
        raise DevInfraError(
            f"a SparkContext with master {master!r} already runs in this process (one per "
            f"process); stop it first, or run the driver for {cluster.master_url} in a process "
            "of its own"
        )
    if wait_for_executors:
        wanted = cluster.total_cores
        tracker = session.sparkContext._jsc.sc().statusTracker()

        def registered() -> bool:
            return len(tracker.getExecutorInfos()) - 1 >= wanted  # the driver is listed too

        if not wait_until(registered, timeout=timeout, interval=0.25):
            raise DevInfraError(
                f"only {len(tracker.getExecutorInfos()) - 1} of {wanted} executors registered "
                f"within {timeout:.0f} s; see the worker logs in {cluster.log_dir}"
            )
    return session

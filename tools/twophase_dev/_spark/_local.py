"""A local SparkSession set up for fast, quiet tests, with Spark's Kafka connector on its classpath.

:func:`spark_test_conf` is the configuration every Spark of the dev tools starts from (the local
session, the cluster's client session, the Connect server), each key explained beside it.

Runs on: the Spark driver's machine (the developer's or test session's Python process).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from twophase_dev._errors import DevInfraError
from twophase_dev._host._ports import LOOPBACK
from twophase_dev._jvm import spark_jvm_options
from twophase_dev._spark._jars import spark_kafka_jars

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["spark_session", "spark_test_conf"]


def spark_test_conf(*, kafka: bool = True) -> dict[str, str]:
    """Return the Spark configuration used for local tests and examples.

    Parameters
    ----------
    kafka : bool, optional
        Include ``spark.jars`` with the Kafka connector (resolved with Maven on first use).

    Returns
    -------
    dict of str to str
        Configuration keys and values; each is explained in the source.
    """
    conf = {
        # No web UI: saves a port and a second or two per session.
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        # Test data is tiny; Spark's default of 200 shuffle partitions only costs time.
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        # Loopback only, whatever the machine's hostname resolves to.
        "spark.driver.bindAddress": LOOPBACK,
        "spark.driver.host": LOOPBACK,
        "spark.driver.memory": "1g",
        # C1 only and the serial collector (most of a short test JVM's CPU is otherwise C2's), and
        # Spark's classes mapped from the class-data archive once setup has made it.
        "spark.driver.extraJavaOptions": spark_jvm_options(),
        "spark.executor.extraJavaOptions": spark_jvm_options(),
        "spark.sql.session.timeZone": "UTC",
        # Keep Spark's files out of the working tree.
        "spark.sql.warehouse.dir": str(Path(tempfile.gettempdir()) / "twophase-spark-warehouse"),
        # Python workers must use this interpreter (the project's virtualenv), not "python3".
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # query.stop() gives up after a minute instead of possibly hanging a test run forever.
        "spark.sql.streaming.stopTimeout": "60s",
    }
    if kafka:
        conf["spark.jars"] = ",".join(str(j) for j in spark_kafka_jars())
    return conf


def spark_session(
    app_name: str = "twophase-test",
    *,
    master: str = "local[2]",
    extra_conf: Mapping[str, str] | None = None,
    kafka: bool = True,
    log_level: str = "WARN",
) -> SparkSession:
    """Create (or return the running) local SparkSession configured by :func:`spark_test_conf`.

    Parameters
    ----------
    app_name : str, optional
        Spark application name.
    master : str, optional
        Spark master; ``local[2]`` matches the 2-core test machines. ``local[N,F]`` enables task
        retries.
    extra_conf : mapping of str to str, optional
        Overrides and additions to :func:`spark_test_conf`.
    kafka : bool, optional
        Put Spark's Kafka connector on the classpath.
    log_level : str, optional
        Log level of Spark's JVM logger (``WARN`` keeps test output readable).

    Returns
    -------
    pyspark.sql.SparkSession
        The session; stop it with ``spark.stop()``.

    Raises
    ------
    DevInfraError
        If a SparkContext already runs in this process without the Kafka jars: jars can only be
        added when the JVM starts, so the session must be created through this function first.
    """
    from pyspark.sql import SparkSession

    # Spark would otherwise pick the first non-loopback interface address for its RPC endpoints.
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    conf = spark_test_conf(kafka=kafka)
    conf.update(extra_conf or {})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    if kafka:
        active_jars = session.sparkContext.getConf().get("spark.jars", "")
        missing = [j for j in conf["spark.jars"].split(",") if j and j not in active_jars]
        if missing:
            raise DevInfraError(
                "a SparkContext was already running without Spark's Kafka jars (jars can only be "
                "added when the JVM starts); create the first session of the process with "
                "twophase_dev.spark_session()"
            )
    session.sparkContext.setLogLevel(log_level)
    return session

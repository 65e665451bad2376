"""Local SparkSession with Spark's Kafka source/sink jars, set up for fast, quiet tests.

``pip install pyspark`` ships Spark without its Kafka connector. :func:`spark_kafka_jars` resolves
``org.apache.spark:spark-sql-kafka-0-10_2.13:<installed PySpark version>`` with Maven (cached) and
drops every jar that PySpark already ships (Scala, SLF4J, compression codecs, ...) so that no class
exists twice on the classpath; what remains is the connector, its token provider, ``kafka-clients``
and ``commons-pool2``.

The Spark Connect server is in the PySpark wheel from 4.0 on; PySpark 3.5's wheel has none, and
:func:`spark_connect_jars` resolves ``org.apache.spark:spark-connect_2.12:<installed version>``
instead (that jar carries gRPC, protobuf and Guava shaded inside, and needs nothing else that
PySpark does not ship). This module is where the dev tools' Spark-version differences live.

Runs on: the Spark driver's machine (the developer's or test session's Python process).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from twophase_dev._common import LOOPBACK, DevInfraError
from twophase_dev._jvm import spark_jvm_options
from twophase_dev._maven import (
    MavenArtifact,
    MavenError,
    artifact_of_jar,
    cached_classpath,
    resolve_classpath,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "pyspark_jars_dir",
    "spark_connect_jars",
    "spark_kafka_jars",
    "spark_session",
    "spark_test_conf",
]

#: Version of ``spark-token-provider-kafka-0-10`` used when the one matching PySpark is not on
#: Maven Central (true for every Spark release after 4.0.0 when this was written). It holds a few
#: helper classes whose signatures used by spark-sql-kafka are unchanged since 4.0.0; only its
#: Kerberos delegation-token provider (unused locally) refers to a logging key that moved in 4.1.
TOKEN_PROVIDER_FALLBACK = "4.0.0"

#: Unreachable repository declared by Spark's parent pom; mapped to Maven Central instead.
_SPARK_POM_MIRROR_ID = "gcs-maven-central-mirror"
_MAVEN_CENTRAL = "https://repo.maven.apache.org/maven2"


def pyspark_jars_dir() -> Path:
    """Return the directory of the jars Spark runs with (``$SPARK_HOME/jars`` or PySpark's own).

    Returns
    -------
    pathlib.Path
        The jars directory.
    """
    spark_home = os.environ.get("SPARK_HOME")
    if spark_home and (Path(spark_home) / "jars").is_dir():
        return Path(spark_home) / "jars"
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise DevInfraError("PySpark is not installed: run 'bash scripts/setup.sh'")
    return Path(next(iter(spec.submodule_search_locations))) / "jars"


def _scala_binary_version(jars_dir: Path) -> str:
    for jar in jars_dir.glob("spark-core_*.jar"):
        match = re.match(r"spark-core_(\d+\.\d+)-", jar.name)
        if match:
            return match.group(1)
    return "2.13"


def _already_shipped(jar: Path, shipped: set[str]) -> bool:
    artifact, _version = artifact_of_jar(jar)
    prefix = artifact + "-"
    return any(
        name.startswith(prefix) and name[len(prefix) : len(prefix) + 1].isdigit()
        for name in shipped
    )


def _beyond_the_wheel(resolved: list[Path], jars_dir: Path) -> list[Path]:
    """Return the resolved jars whose artifact the PySpark wheel does not already ship."""
    shipped = {p.name for p in jars_dir.glob("*.jar")}
    return [jar for jar in resolved if not _already_shipped(jar, shipped)]


def spark_kafka_jars(spark_version: str | None = None, *, refresh: bool = False) -> list[Path]:
    """Return the jars to add to ``spark.jars`` for Spark's Kafka source and sink.

    Parameters
    ----------
    spark_version : str, optional
        Spark version of the connector; the installed PySpark's version by default.
    refresh : bool, optional
        Run Maven again even if a cached classpath exists.

    Returns
    -------
    list of pathlib.Path
        Jar files (in the local Maven repository) that PySpark does not already ship.

    Raises
    ------
    MavenError
        If Maven cannot resolve the connector.
    """
    version = spark_version or importlib.metadata.version("pyspark")
    jars_dir = pyspark_jars_dir()
    scala = _scala_binary_version(jars_dir)
    connector = MavenArtifact("org.apache.spark", f"spark-sql-kafka-0-10_{scala}", version)
    token_provider = MavenArtifact(
        "org.apache.spark", f"spark-token-provider-kafka-0-10_{scala}", TOKEN_PROVIDER_FALLBACK
    )
    mirrors = {_SPARK_POM_MIRROR_ID: _MAVEN_CENTRAL}
    exact_name = f"spark-sql-kafka-{version}"
    fallback_name = f"{exact_name}-tp{TOKEN_PROVIDER_FALLBACK}"
    resolved = None
    if not refresh:
        resolved = cached_classpath(
            [connector], name=exact_name, repositories=mirrors
        ) or cached_classpath(
            [connector], name=fallback_name, managed=[token_provider], repositories=mirrors
        )
    if resolved is None:
        try:
            resolved = resolve_classpath(
                [connector], name=exact_name, repositories=mirrors, refresh=refresh
            )
        except MavenError as exc:
            if "spark-token-provider-kafka" not in str(exc):
                raise
            resolved = resolve_classpath(
                [connector],
                name=fallback_name,
                managed=[token_provider],
                repositories=mirrors,
                refresh=refresh,
            )
    return _beyond_the_wheel(resolved, jars_dir)


def spark_connect_jars(spark_version: str | None = None, *, refresh: bool = False) -> list[Path]:
    """Return the jars that the Spark Connect server needs beyond PySpark's own.

    None where the wheel carries the server (``jars/spark-connect_*.jar``, PySpark 4.0 on). The
    3.5 wheel does not: the server is then ``spark-connect_<scala>`` of the same version, from
    Maven Central, whose only runtime dependency is Spark's empty ``unused`` marker (left out:
    the server jar carries its class, and gRPC, protobuf and Guava, shaded); what it declares as
    provided (Spark, Netty) is in the wheel.

    Parameters
    ----------
    spark_version : str, optional
        Spark version of the server; the installed PySpark's version by default.
    refresh : bool, optional
        Run Maven again even if a cached classpath exists.

    Returns
    -------
    list of pathlib.Path
        Jar files to add with ``--jars``; empty when PySpark ships the server.

    Raises
    ------
    MavenError
        If Maven cannot resolve the server (Maven Central serves ``spark-connect_2.12`` of
        3.5.0, 3.5.1, 3.5.4, 3.5.5 and 3.5.7 only).
    """
    jars_dir = pyspark_jars_dir()
    if spark_version is None and any(jars_dir.glob("spark-connect_*.jar")):
        return []
    version = spark_version or importlib.metadata.version("pyspark")
    server = MavenArtifact(
        "org.apache.spark",
        f"spark-connect_{_scala_binary_version(jars_dir)}",
        version,
        exclusions=("org.spark-project.spark:unused",),
    )
    resolved = resolve_classpath(
        [server],
        name=f"spark-connect-{version}",
        repositories={_SPARK_POM_MIRROR_ID: _MAVEN_CENTRAL},
        refresh=refresh,
    )
    return _beyond_the_wheel(resolved, jars_dir)


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

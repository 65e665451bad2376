"""Spark's jars beyond the PySpark wheel: the Kafka connector, and the Connect server for 3.5.

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
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._maven import (
    MavenArtifact,
    MavenError,
    artifact_of_jar,
    cached_classpath,
    resolve_classpath,
)

__all__ = ["pyspark_jars_dir", "spark_connect_jars", "spark_kafka_jars"]


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

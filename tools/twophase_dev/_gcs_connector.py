"""Spark's own checkpoint on ``gs://`` in tests: Google's Hadoop GCS connector on an emulator.

A query whose checkpoint is ``gs://bucket/chk`` needs Spark itself to write its offset
and commit logs there, through a Hadoop file system for ``gs``; twophase's coordinator log
below it goes through twophase's own GCS store. :func:`gcs_connector_jar` fetches the
connector's shaded jar from Maven Central (once, into ``~/.m2``) and :func:`gcs_hadoop_conf`
gives the Spark settings that point it at an emulator, without credentials.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from twophase_dev._maven import MavenError, _maven_executable

__all__ = ["GCS_CONNECTOR_VERSION", "gcs_connector_jar", "gcs_hadoop_conf"]

#: The connector for Hadoop 3.4 and later (Spark 4), checked against fake-gcs-server v1.56.1:
#: parquet written and read back, a streaming query's checkpoint written and resumed.
GCS_CONNECTOR_VERSION = "4.0.0"
_GROUP = "com.google.cloud.bigdataoss"
_ARTIFACT = "gcs-connector"


def gcs_connector_jar(version: str = GCS_CONNECTOR_VERSION) -> Path:
    """Return the connector's shaded jar, downloaded from Maven Central if missing.

    Parameters
    ----------
    version
        The connector's version.

    Returns
    -------
    pathlib.Path
        ``gcs-connector-<version>-shaded.jar`` in the local Maven repository.

    Raises
    ------
    MavenError
        Maven could not fetch it.
    """
    jar = (
        Path.home()
        / ".m2/repository"
        / _GROUP.replace(".", "/")
        / _ARTIFACT
        / version
        / f"{_ARTIFACT}-{version}-shaded.jar"
    )
    if jar.is_file():
        return jar
    argv = [
        _maven_executable(),
        "-q",
        "-B",
        "dependency:get",
        f"-Dartifact={_GROUP}:{_ARTIFACT}:{version}:jar:shaded",
        "-Dtransitive=false",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0 or not jar.is_file():
        raise MavenError(
            f"could not fetch {_GROUP}:{_ARTIFACT}:{version} (shaded):\n"
            f"{(done.stdout + done.stderr)[-2000:]}"
        )
    return jar


def gcs_hadoop_conf(url: str) -> dict[str, str]:
    """Return the Spark settings under which Hadoop's ``gs`` file system is the emulator at ``url``.

    Parameters
    ----------
    url
        The emulator's endpoint, ``http://host:port``.

    Returns
    -------
    dict of str to str
        ``spark.hadoop.*`` settings: the connector's classes, the endpoint, no
        credentials, no server-side move (the emulator answers it with 400), and
        plain byte sizes (Hadoop 3.5's own defaults, such as ``64m``, are not
        numbers the connector reads).
    """
    hadoop = {
        "fs.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem",
        "fs.AbstractFileSystem.gs.impl": "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFS",
        "fs.gs.storage.root.url": f"{url.rstrip('/')}/",
        "fs.gs.project.id": "test",
        "fs.gs.auth.type": "UNAUTHENTICATED",
        "fs.gs.operation.move.enable": "false",
        "fs.gs.block.size": "67108864",
        "fs.gs.rewrite.max.chunk.size": "536870912",
        "fs.gs.outputstream.buffer.size": "8388608",
        "fs.gs.inputstream.inplace.seek.limit": "8388608",
        "fs.gs.inputstream.min.range.request.size": "2097152",
    }
    return {f"spark.hadoop.{key}": value for key, value in hadoop.items()}

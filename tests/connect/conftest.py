"""The Spark Connect server of the session: local mode, Kafka jars, this checkout on its path.

Its Hadoop reads ``gs://`` from the session's GCS emulator (``gcs_endpoint``) through Google's
GCS connector, and its Python workers reach the emulator too (``STORAGE_EMULATOR_HOST``): a
query's checkpoint can be ``gs://``, Spark's own logs and twophase's alike.

One server serves every Connect test; a test that crashes it (``server.kill()``) starts it
again (``server.restart()``, same port) before it ends, and a test that finds it dead (an
earlier test failed half-way) restarts it first.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twophase_dev import SparkConnectServer, gcs_connector_jar, gcs_hadoop_conf

ROOT = Path(__file__).resolve().parents[2]


# Package scope: the Connect tests are one work unit of one worker (tests/workers.py), so the
# server starts once and stops after the last of them instead of idling to the end of the run.
@pytest.fixture(scope="package")
def _connect_server(_stale_dirs_cleaned: None, gcs_endpoint: Any) -> Iterator[SparkConnectServer]:
    # local[2,2]: a failed task is retried once, as on a cluster.
    # TWOPHASE_SPARK_KAFKA=0: no Kafka connector (a PySpark whose connector is not served).
    kafka = os.environ.get("TWOPHASE_SPARK_KAFKA", "1") != "0"
    server = SparkConnectServer(
        master="local[2,2]",
        python_path=(str(ROOT),),
        kafka=kafka,
        jars=(gcs_connector_jar(),),
        conf=gcs_hadoop_conf(gcs_endpoint.url),
        env=gcs_endpoint.environment(),
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _classic_mode_kept() -> Iterator[None]:
    """Undo what a Connect session does to the process: PySpark marks it as a Connect client.

    ``SparkSession.builder.remote(...).create()`` sets ``SPARK_CONNECT_MODE_ENABLED=1`` in
    ``os.environ`` for good; every later classic session of the test process, and every driver
    process a later test starts, would then be built as a Connect client.
    """
    saved = {key: os.environ.get(key) for key in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def connect_server(_connect_server: SparkConnectServer) -> SparkConnectServer:
    """The session's Connect server, running."""
    if _connect_server.pid is None:
        _connect_server.start()
    return _connect_server

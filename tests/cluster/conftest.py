"""Fixtures of the cluster tests: ``make_scenario(connector, **kwargs) -> Scenario``.

The cluster (``spark_cluster``), the broker and the PostgreSQL servers are the session fixtures of
``tests/conftest.py``; ``pg-coordinated`` uses ``postgres_server`` (prepared transactions),
``pg-markers`` ``postgres_server_no_prepared`` (none). Kafka is also every scenario's input.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.cluster.support import CONNECTORS, Scenario
from twophase_dev import KafkaBroker, SparkCluster


@pytest.fixture
def make_scenario(
    spark_cluster: SparkCluster,
    kafka_broker: KafkaBroker,
    request: pytest.FixtureRequest,
    tmp_path: Path,
) -> Callable[..., Scenario]:
    def make(connector: str, **kwargs: Any) -> Scenario:
        assert connector in CONNECTORS, connector
        server = None
        if connector == "pg-coordinated":
            server = request.getfixturevalue("postgres_server")
        elif connector == "pg-markers":
            server = request.getfixturevalue("postgres_server_no_prepared")
        elif connector.startswith("maria-"):
            server = request.getfixturevalue("mariadb_server")
        return Scenario(
            connector, spark_cluster, kafka_broker, server, tmp_path / connector, **kwargs
        )

    return make

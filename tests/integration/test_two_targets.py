"""One query, two exactly-once targets: PostgreSQL and Kafka, with a driver SIGKILL between them.

The driver (:mod:`tests.integration.two_targets_driver`) writes each batch first to PostgreSQL
(the coordinated protocol) and then to Kafka, the batch computed once. The first run kills itself
right after PostgreSQL recorded batch 1 committed, before Kafka saw it; the restart finds batch 1
committed in PostgreSQL (skipped there) and writes it to Kafka. Both targets end with every id
exactly once.
"""

from __future__ import annotations

import json
import signal
import uuid
from pathlib import Path

import pytest

from tests.integration.kafka.kafka_support import read_all, unstable_partitions
from tests.spark.helpers import run_driver, table_ids, write_input
from twophase.testing import assert_exactly_once
from twophase_dev import KafkaBroker, PostgresServer

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.chaos, pytest.mark.slow]


def test_a_driver_killed_between_the_two_targets_leaves_each_exactly_once(
    kafka_broker: KafkaBroker, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    name = f"two{uuid.uuid4().hex[:8]}"
    topic = f"{name}-out"
    kafka_broker.create_topic(topic, partitions=2)
    expected = write_input(tmp_path / "in", 3)
    spec = {
        "name": name,
        "source": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "chk"),
        "table": f"{name}_rows",
        "dsn": postgres_server.dsn,
        "topic": topic,
        "bootstrap": kafka_broker.bootstrap_servers,
    }

    def drive(kill_after: int | None) -> tuple[int, str]:
        path = tmp_path / f"spec-{kill_after}.json"
        path.write_text(json.dumps({**spec, "kill_after": kill_after}))
        return run_driver(tmp_path, "tests.integration.two_targets_driver", str(path))

    def kafka_ids() -> list[int]:
        records = read_all(kafka_broker.bootstrap_servers, topic, "read_committed")
        return [int(r.key) for r in records]

    code, log = drive(kill_after=1)
    assert code == -signal.SIGKILL, f"the driver was not killed (rc={code}):\n{log}"
    # Killed between the targets: batch 1 is in PostgreSQL, not in Kafka.
    assert sorted(table_ids(postgres_server, spec["table"])) == sorted(expected[:40])
    assert sorted(kafka_ids()) == sorted(expected[:20])

    code, log = drive(kill_after=None)
    assert code == 0, log
    assert_exactly_once(table_ids(postgres_server, spec["table"]), expected, what="rows")
    assert_exactly_once(kafka_ids(), expected, what="records")
    assert [g for g, _ in postgres_server.prepared_transactions() if name in g] == []
    assert unstable_partitions(kafka_broker.bootstrap_servers, [topic]) == []

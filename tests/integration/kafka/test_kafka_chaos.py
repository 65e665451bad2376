"""The broker restarts (cleanly, or killed) while a batch's transactions are open.

The transaction of partition 1 has produced its first rows when the broker goes
away; the task blocks in ``write`` until it is back. Whatever happens next -- the
transaction survives the restart and commits, or librdkafka gives up and the
task is retried -- a ``read_committed`` consumer must see every row exactly once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twophase.connectors.kafka import KafkaSink, KafkaTransaction
from twophase.testing import LocalRunner, assert_exactly_once
from twophase_dev import KafkaBroker

pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.timeout(240),
]

#: Set by the test, run once by the sink copy writing partition 1 (same process).
_DISRUPT: dict[str, Callable[[], None]] = {}


class DisruptedKafkaSink(KafkaSink):
    """A KafkaSink whose partition 1 disrupts the broker after its first rows."""

    def write(self, txn: KafkaTransaction, batch: pa.RecordBatch) -> None:
        super().write(txn, batch)
        if txn.context.partition_id == 1 and "now" in _DISRUPT:
            _DISRUPT.pop("now")()


def batch(ids: range) -> list[pa.RecordBatch]:
    ids_ = list(ids)
    half = len(ids_) // 2
    return [
        pa.record_batch(
            {"key": pa.array([str(i) for i in part]), "value": pa.array([f"{i}" for i in part])}
        )
        for part in (ids_[:half], ids_[half:])
    ]


@pytest.mark.parametrize(
    "how",
    [
        # Not in the default run (20-minute budget): a clean restart is the gentler form of the
        # kill beside it (the broker gone in the middle of the batch, then back on its log).
        pytest.param("restart", marks=pytest.mark.extended),
        "kill",
    ],
)
def test_broker_restart_in_the_middle_of_a_batch_loses_and_duplicates_nothing(
    how: str,
    kafka_broker: KafkaBroker,
    make_topic: Callable[..., str],
    read_topic: Callable[..., list[Any]],
    tmp_path: Path,
) -> None:
    if not kafka_broker.managed:
        pytest.skip("needs a broker this test session started (it restarts it)")
    topic = make_topic(3, prefix="chaos")
    sink = DisruptedKafkaSink(
        "chaos",
        bootstrap_servers=kafka_broker.bootstrap_servers,
        topic=topic,
        control_topic=f"ctl-{uuid.uuid4().hex[:12]}",
        operation_timeout=30.0,
    )
    runner = LocalRunner(sink, tmp_path, max_task_failures=3)
    runner.run_batch(0, [batch(range(p * 100, p * 100 + 50)) for p in range(3)])

    fired: list[str] = []

    def disrupt() -> None:
        fired.append(how)
        if how == "restart":
            kafka_broker.restart()
        else:
            kafka_broker.kill()
            kafka_broker.start()

    _DISRUPT["now"] = disrupt
    runner.run_batch(1, [batch(range(1000 + p * 100, 1000 + p * 100 + 50)) for p in range(3)])
    runner.run_batch(2, [batch(range(2000 + p * 100, 2000 + p * 100 + 50)) for p in range(3)])
    assert fired == [how]
    expected = [b * 1000 + p * 100 + i for b in range(3) for p in range(3) for i in range(50)]
    assert_exactly_once([int(r.value) for r in read_topic(topic)], expected)

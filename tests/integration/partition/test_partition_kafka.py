"""Silent network partitions between ``KafkaSink`` and its broker: librdkafka's bounds hold.

The broker runs in a network namespace of its own; a "wire" cut loses every frame both ways.
The sink runs through the production coordinator (``LocalRunner``) with
``operation_timeout=2`` and ``local_retries=1``, so that every step -- the fence
(``init_transactions``), produce, the commit with its marker, the driver's recovery -- is bounded
by about ``local_retries * operation_timeout`` plus librdkafka's own reconnect. A long partition
fails the batch with a restartable error naming the sink and the batch, well before the partition
ends; once healed, the batch run again is exactly once with no transaction left open. A short
one is a pause.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.integration.kafka.kafka_support import read_all, unstable_partitions
from twophase import RetryPolicy
from twophase.connectors.kafka import KafkaSink
from twophase.errors import TwoPhaseError, find_error
from twophase.testing import LocalRunner, assert_exactly_once

from .support import Cut, cut_before

pytestmark = [pytest.mark.root, pytest.mark.integration]

OPERATION_TIMEOUT = 2.0
#: A long step fails within the operation timeout plus librdkafka's reconnect and the
#: driver's cleanup of the failed batch.
LIMIT = 4 * OPERATION_TIMEOUT + 4.0
SHORT = 0.8
RETRY = RetryPolicy(max_attempts=2, initial_backoff=0.1, max_backoff=0.1, deadline=30.0)


class Scenario:
    """A sink on a fresh topic, batch 0 committed, and what a reader sees."""

    def __init__(self, kafka: Any, checkpoint: Path, *, defaults: bool = False) -> None:
        self.netns = kafka.netns
        self.bootstrap = kafka.server.bootstrap_servers
        self.topic = f"part-{uuid.uuid4().hex[:10]}"
        self.control = f"ctl-{uuid.uuid4().hex[:10]}"
        kafka.server.create_topic(self.topic, partitions=2)
        bounds: dict[str, Any] = {}
        if not defaults:  # else the sink's default bounds and retry policy
            bounds = {"operation_timeout": OPERATION_TIMEOUT, "local_retries": 1, "retry": RETRY}
        self.sink = KafkaSink(
            "kpart",
            bootstrap_servers=self.bootstrap,
            topic=self.topic,
            control_topic=self.control,
            producer_lanes=1,
            **bounds,
        )
        self.runner = LocalRunner(self.sink, checkpoint)
        self.runner.run_batch(0, batch(0))

    def keys(self) -> list[int]:
        return [int(r.key) for r in read_all(self.bootstrap, self.topic)]  # type: ignore[arg-type]

    def fail(self, batch_id: int) -> tuple[TwoPhaseError, float]:
        started = time.monotonic()
        with pytest.raises(Exception) as caught:  # noqa: PT011  -- the class is asserted below
            self.runner.run_batch(batch_id, batch(batch_id))
        took = time.monotonic() - started
        error = caught.value if isinstance(caught.value, TwoPhaseError) else None
        error = error or find_error(caught.value)
        assert error is not None, f"not a twophase error: {caught.value!r}"
        assert error.restartable, error
        assert error.sink == "kpart", error
        assert error.batch_id == batch_id, error
        assert self.bootstrap in str(error), error  # the brokers it could not reach
        return error, took

    def finish_after_heal(self, batch_id: int) -> None:
        """Heal, restart the driver, run the batch again: exactly once, nothing left open."""
        self.netns.heal()
        self.runner.restart()
        started = time.monotonic()
        assert self.runner.run_batch(batch_id, batch(batch_id)).outcome == "committed"
        took = time.monotonic() - started
        assert took < 15, f"the first attempt after the heal took {took:.1f} s"
        assert_exactly_once(self.keys(), ids(*range(batch_id + 1)))
        assert unstable_partitions(self.bootstrap, [self.topic, self.control]) == []


def batch(batch_id: int) -> list[list[pa.RecordBatch]]:
    parts = []
    for p in range(2):
        keys = [batch_id * 1000 + p * 100 + i for i in range(20)]
        parts.append(
            [
                pa.record_batch(
                    {
                        "key": pa.array([str(k) for k in keys]),
                        "value": pa.array([f"v{k}" for k in keys]),
                    }
                )
            ]
        )
    return parts


def ids(*batch_ids: int) -> list[int]:
    return [int(k) for b in batch_ids for part in batch(b) for k in part[0].column(0).to_pylist()]


@pytest.fixture
def scenario(kafka_partition: Any, tmp_path: Path) -> Iterator[Scenario]:
    found = Scenario(kafka_partition, tmp_path)
    yield found
    kafka_partition.netns.heal()


@pytest.mark.parametrize("hook", ["begin_transaction", "write", "commit_with_marker"])
def test_a_long_partition_in_a_task_fails_the_batch_within_the_bound(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, hook: str
) -> None:
    with cut_before(monkeypatch, KafkaSink, hook, scenario.netns) as cut:
        _, took = scenario.fail(1)
        cut.heal()
    cut.assert_blocked()
    assert took < LIMIT, f"the batch failed after {took:.1f} s (bound {LIMIT} s)"
    scenario.finish_after_heal(1)


def test_a_long_partition_in_recovery_fails_the_start_within_the_bound(
    scenario: Scenario,
) -> None:
    scenario.runner.restart()
    cut = Cut(scenario.netns)
    cut.start()
    _, took = scenario.fail(1)
    cut.heal()
    cut.assert_blocked()
    limit = LIMIT + RETRY.max_attempts * 2 * OPERATION_TIMEOUT
    assert took < limit, f"the start failed after {took:.1f} s (bound {limit} s)"
    scenario.finish_after_heal(1)


@pytest.mark.parametrize("hook", ["write", "commit_with_marker"])
def test_a_short_partition_is_a_pause(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch, hook: str
) -> None:
    with cut_before(monkeypatch, KafkaSink, hook, scenario.netns, heal_after=SHORT) as cut:
        metrics = scenario.runner.run_batch(1, batch(1))
    cut.assert_blocked()
    assert metrics.outcome == "committed"
    assert_exactly_once(scenario.keys(), ids(0, 1))

"""The issue's experiment at default settings: a 240 s partition fails, a 20 s one is a pause.

Every sink at its factory's defaults (JDBC: ``network_timeout=60``, ``connect_timeout=10``,
``RetryPolicy()``; Kafka: ``operation_timeout=30``, ``local_retries=3``), through the production
coordinator. A "240-second" partition is cut at the step and healed as soon as the batch failed:
the test asserts that the failure came well before 240 s (the partition would still be on), then
that the batch run again after the heal is exact with nothing left prepared or open. A 20-second
partition is healed by a timer and the batch commits.

Minutes per case, so these run with ``-m extended`` (``bash scripts/partition.sh``), not in the
default suite, whose partition tests use bounds of a few seconds; the measured times are in
``docs/guarantees.md`` ("Network failures").
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from twophase.connectors.jdbc._base import JdbcSinkMixin
from twophase.connectors.kafka import KafkaSink
from twophase.errors import RetriableError
from twophase.testing import LocalRunner

from .support import cut_before
from .test_partition_jdbc import (
    TARGETS,
    Target,
    batch,
    expected_ids,
    open_target,
    phase_2_hook,
    run_failing,
)
from .test_partition_kafka import Scenario, ids
from .test_partition_kafka import batch as kafka_batch

pytestmark = [
    pytest.mark.root,
    pytest.mark.integration,
    pytest.mark.extended,
    pytest.mark.timeout(900),
]

#: The long partition of the issue; every failure must come well before it ends.
LONG = 240.0
#: The short one: a pause at the defaults.
SHORT = 20.0


def _report(what: str, took: float) -> None:
    print(f"\n[partition at defaults] {what}: {took:.1f} s")


@pytest.fixture(params=TARGETS, ids=[f"{k}-{p}" for k, p in TARGETS])
def target(request: pytest.FixtureRequest) -> Iterator[Target]:
    yield from open_target(request)


@pytest.mark.parametrize("phase", ["phase1", "phase2"])
def test_jdbc_at_defaults(target: Target, monkeypatch: pytest.MonkeyPatch, phase: str) -> None:
    runner = LocalRunner(target.sink("defaults", defaults=True))
    runner.run_batch(0, batch(0))
    cls, hook = (JdbcSinkMixin, "write") if phase == "phase1" else phase_2_hook(target)
    with cut_before(monkeypatch, cls, hook, target.netns) as cut:
        error, took = run_failing(runner, 1)
        cut.heal()
    cut.assert_blocked()
    _report(f"{target.kind} {target.protocol} {phase}, long partition failed after", took)
    assert took < LONG - 30, f"failed only after {took:.0f} s of a {LONG:.0f} s partition"
    assert error.restartable, error
    runner.restart()
    runner.run_batch(1, batch(1))
    assert target.ids() == expected_ids(0, 1)
    assert target.prepared() == []
    with cut_before(monkeypatch, cls, hook, target.netns, heal_after=SHORT) as cut:
        started = time.monotonic()
        assert runner.run_batch(2, batch(2)).outcome == "committed"
        took = time.monotonic() - started
    cut.assert_blocked()
    _report(f"{target.kind} {target.protocol} {phase}, short partition: batch took", took)
    assert target.ids() == expected_ids(0, 1, 2)
    assert target.prepared() == []


@pytest.mark.parametrize("hook", ["write", "commit_with_marker"])
def test_kafka_at_defaults(
    kafka_partition: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hook: str
) -> None:
    scenario = Scenario(kafka_partition, tmp_path, defaults=True)
    try:
        with cut_before(monkeypatch, KafkaSink, hook, scenario.netns) as cut:
            error, took = scenario.fail(1)
            cut.heal()
        cut.assert_blocked()
        _report(f"kafka {hook}, long partition failed after", took)
        assert took < LONG - 30, f"failed only after {took:.0f} s of a {LONG:.0f} s partition"
        assert isinstance(error, RetriableError), error
        scenario.finish_after_heal(1)
        with cut_before(monkeypatch, KafkaSink, hook, scenario.netns, heal_after=SHORT) as cut:
            started = time.monotonic()
            assert scenario.runner.run_batch(2, kafka_batch(2)).outcome == "committed"
            took = time.monotonic() - started
        cut.assert_blocked()
        _report(f"kafka {hook}, short partition: batch took", took)
        assert sorted(scenario.keys()) == sorted(ids(0, 1, 2))
    finally:
        kafka_partition.netns.heal()

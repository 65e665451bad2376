"""Exhaustive crash-point exploration of the coordinator, both protocols, no Spark.

Every scenario runs three batches through the production coordinator (via
LocalRunner), crashes the driver at a chosen step (or two, the second during
the recovery of the first), restarts, replays the batch -- in the same or
another partition layout -- and checks exactly-once after every batch and that
no transaction is left prepared or open at the end. Executor-side faults at
every hook and attempt are explored too.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from tests.unit.conftest import EXPLORED
from twophase import CommitFailedError, NondeterministicBatchError, RecoveryContext
from twophase.testing import (
    COORDINATED_STEPS,
    MARKER_STEPS,
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once,
)

pytestmark = pytest.mark.unit

BATCHES = 3
ROWS = 9


def ids_of(batch_id: int) -> list[int]:
    return [batch_id * 100 + i for i in range(ROWS)]


def layout(batch_id: int, partitions: int) -> list[list[dict[str, int]]]:
    parts: list[list[dict[str, int]]] = [[] for _ in range(partitions)]
    for index, row_id in enumerate(ids_of(batch_id)):
        parts[index % partitions].append({"id": row_id})
    return parts


@dataclass(frozen=True)
class Scenario:
    protocol: str  # "A" or "B"
    crash_batch: int
    crashes: tuple[tuple[str, int | None], ...]
    replay_layout: str  # "same" or "different"
    staging: bool = False


def run_scenario(s: Scenario) -> None:
    target = FakeTarget.in_memory()
    sink = (
        FakeSink("explore", target)
        if s.protocol == "A"
        else FakeMarkerSink("explore", target, staging=s.staging)
    )
    runner = LocalRunner(sink)
    expected: list[int] = []
    for batch_id in range(BATCHES):
        first = layout(batch_id, 3)
        replay = first if s.replay_layout == "same" else layout(batch_id, 2)
        if batch_id == s.crash_batch:
            parts = first
            for step, index in s.crashes:
                runner.crash_at(step, batch_id, index)
                parts = _run_refusal_aware(s, runner, target, batch_id, parts, first, expected)
                runner.restart()
                parts = replay if parts is not first or s.replay_layout == "same" else first
            runner.sink._step_listener = None
            _run_refusal_aware(s, runner, target, batch_id, parts, first, expected)
        else:
            runner.run_batch(batch_id, layout(batch_id, 3))
        expected += ids_of(batch_id)
        assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == [], "prepared transactions left behind"
    assert target.open_transactions() == [], "open transactions left behind"
    assert not sink.list_in_doubt(RecoveryContext(runner.identity.token, 3))


def _run_refusal_aware(
    s: Scenario,
    runner: LocalRunner,
    target: FakeTarget,
    batch_id: int,
    parts: list[list[dict[str, int]]],
    first: list[list[dict[str, int]]],
    expected: list[int],
) -> list[list[dict[str, int]]]:
    """Run the batch; return the layout the next replay must use."""
    before = sorted(r["id"] for r in target.committed_rows())
    try:
        runner.run_batch(batch_id, parts)
    except SimulatedCrash:
        return parts
    except NondeterministicBatchError:
        # Only protocol B without staging may refuse a changed layout, and it
        # must refuse before writing anything.
        assert s.protocol == "B"
        assert not s.staging
        assert s.replay_layout == "different"
        assert sorted(r["id"] for r in target.committed_rows()) == before
        runner.restart()
        runner.run_batch(batch_id, first)  # the deterministic replay completes
        return first
    return parts


def _points(steps: Sequence[str]) -> list[tuple[str, int | None]]:
    points: list[tuple[str, int | None]] = []
    for step in steps:
        if step == "committed_handle":
            points += [(step, i) for i in range(3)]
        else:
            points.append((step, None))
    return points


def scenarios() -> list[Scenario]:
    out = []
    for protocol, steps in (("A", COORDINATED_STEPS), ("B", MARKER_STEPS)):
        points = _points(steps)
        sequences = [(p,) for p in points] + list(itertools.product(points, repeat=2))
        for crash_batch in range(2):
            for crashes in sequences:
                for replay_layout in ("same", "different"):
                    stagings = (False, True) if protocol == "B" else (False,)
                    for staging in stagings:
                        out.append(Scenario(protocol, crash_batch, crashes, replay_layout, staging))
    return out


ALL = scenarios()


@pytest.mark.parametrize("protocol", ["A", "B"])
def test_every_driver_crash_point_and_pair_recovers_exactly_once(protocol: str) -> None:
    checked = 0
    for scenario in ALL:
        if scenario.protocol != protocol:
            continue
        try:
            run_scenario(scenario)
        except AssertionError as exc:
            raise AssertionError(f"violation in {scenario}: {exc}") from exc
        checked += 1
    EXPLORED[f"driver crash points, protocol {protocol}"] += checked
    assert checked > 100


HOOKS_A = (
    "begin_transaction",
    "write",
    "pre_commit",
    "commit",
    "list_in_doubt",
    "recover_and_abort",
)
HOOKS_B = ("begin_transaction", "write", "write_marker", "pre_commit", "commit", "read_markers")


@pytest.mark.parametrize("protocol", ["A", "B"])
def test_every_executor_fault_then_retry_or_restart_is_exactly_once(protocol: str) -> None:
    checked = 0
    hooks = HOOKS_A if protocol == "A" else HOOKS_B
    for hook, partition, attempt_fails in itertools.product(hooks, range(3), (1, 2, 3)):
        target = FakeTarget.in_memory()
        sink = FakeSink("faults", target) if protocol == "A" else FakeMarkerSink("faults", target)
        runner = LocalRunner(sink, max_task_failures=2)
        runner.run_batch(0, layout(0, 3))
        for attempt in range(attempt_fails):
            target.fail(hook, batch_id=1, partition_id=partition, attempt=attempt)
        try:
            runner.run_batch(1, layout(1, 3))
        except CommitFailedError:
            # phase 2 gave up after the decision: partly visible, finished on restart
            assert protocol == "A"
            assert hook == "commit"
            decided = runner.log.read_decision(1)
            assert sorted(h.partition_id for h in decided) == [0, 1, 2]
            # phase 2 commits in partition order and stopped at the failing handle:
            # it and the ones after it are still prepared, the decision stands
            prepared = sorted(t.split(":")[2] for t in target.prepared())
            assert prepared == [str(p) for p in range(partition, 3)]
            target.clear_faults()
            runner.restart()
            runner.run_batch(1, layout(1, 3))
        except Exception:
            if protocol == "A":  # all-or-nothing before the decision
                assert_exactly_once([r["id"] for r in target.committed_rows()], ids_of(0))
            target.clear_faults()
            runner.restart()
            runner.run_batch(1, layout(1, 3))
        runner.run_batch(2, layout(2, 3))
        assert_exactly_once(
            [r["id"] for r in target.committed_rows()], ids_of(0) + ids_of(1) + ids_of(2)
        )
        assert target.prepared() == []
        assert target.open_transactions() == []
        checked += 1
    EXPLORED[f"executor faults, protocol {protocol}"] += checked

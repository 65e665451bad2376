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
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from tests.unit.conftest import explored
from twophase import CommitFailedError, NondeterministicBatchError, RecoveryContext, TwoPhaseError
from twophase.testing import (
    COORDINATED_STEPS,
    MARKER_STEPS,
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once,
    install_step_listener,
)

pytestmark = pytest.mark.unit

BATCHES = 3
ROWS = 9
FIRED: Counter[bool] = Counter()  # crashes that fired / were unreachable, across scenarios


def ids_of(batch_id: int) -> list[int]:
    return [batch_id * 100 + i for i in range(ROWS)]


def layout(batch_id: int, partitions: int) -> list[list[dict[str, int]]]:
    parts: list[list[dict[str, int]]] = [[] for _ in range(partitions)]
    for index, row_id in enumerate(ids_of(batch_id)):
        parts[index % partitions].append({"id": row_id})
    return parts


@dataclass(frozen=True)
class Scenario:
    protocol: str  # "coordinated" or "markers"
    crash_batch: int
    crashes: tuple[tuple[str, int | None], ...]
    replay_layout: str  # "same" or "different"
    staging: bool = False


def run_scenario(s: Scenario) -> None:
    target = FakeTarget.in_memory()
    sink = (
        FakeSink("explore", target)
        if s.protocol == "coordinated"
        else FakeMarkerSink("explore", target, staging=s.staging)
    )
    runner = LocalRunner(sink)
    expected: list[int] = []
    for batch_id in range(BATCHES):
        first = layout(batch_id, 3)
        replay = first if s.replay_layout == "same" else layout(batch_id, 2)
        if batch_id == s.crash_batch:
            parts = first
            for number, (step, index) in enumerate(s.crashes):
                crash = runner.crash_at(step, batch_id, index)
                parts, outcome = _run_refusal_aware(
                    s, runner, target, batch_id, parts, first, expected
                )
                # The first crash always fires. A second one may only miss because the
                # first left nothing to do at its step: the batch was already committed,
                # a refused replay restarted the driver, or the layout has fewer handles.
                assert crash.fired or (
                    number > 0
                    and (
                        outcome in ("already-committed", "refused")
                        or (step == "committed_handle" and index is not None and index >= 2)
                    )
                ), f"crash at {step}/{index} did not fire (outcome {outcome})"
                FIRED[crash.fired] += 1
                runner.restart()
                parts = replay if parts is not first or s.replay_layout == "same" else first
            install_step_listener(runner.sink, None)
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
) -> tuple[list[list[dict[str, int]]], str]:
    """Run the batch; return the layout the next replay must use, and the outcome."""
    before = sorted(r["id"] for r in target.committed_rows())
    try:
        metrics = runner.run_batch(batch_id, parts)
    except SimulatedCrash:
        return parts, "crashed"
    except NondeterministicBatchError:
        # Only the markers protocol without staging may refuse a changed layout, and it
        # must refuse before writing anything.
        assert s.protocol == "markers"
        assert not s.staging
        assert s.replay_layout == "different"
        assert sorted(r["id"] for r in target.committed_rows()) == before
        runner.restart()
        runner.run_batch(batch_id, first)  # the deterministic replay completes
        return first, "refused"
    return parts, metrics.outcome


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
    for protocol, steps in (("coordinated", COORDINATED_STEPS), ("markers", MARKER_STEPS)):
        points = _points(steps)
        sequences = [(p,) for p in points] + list(itertools.product(points, repeat=2))
        for crash_batch in range(2):
            for crashes in sequences:
                for replay_layout in ("same", "different"):
                    stagings = (False, True) if protocol == "markers" else (False,)
                    for staging in stagings:
                        out.append(Scenario(protocol, crash_batch, crashes, replay_layout, staging))
    return out


ALL = scenarios()


@pytest.mark.parametrize("protocol", ["coordinated", "markers"])
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
    explored(f"driver crash points, {protocol} protocol", checked)
    points = len(_points(COORDINATED_STEPS if protocol == "coordinated" else MARKER_STEPS))
    stagings = 2 if protocol == "markers" else 1
    # (single crash + every ordered pair) x crash batch 0 or 1 x same/other layout x staging
    assert checked == (points + points**2) * 2 * 2 * stagings
    assert FIRED[True] > FIRED[False], "most crashes must fire"


# Hooks called once per partition attempt: a rule for (batch 1, partition p) failing k times in all
# fires k times, whatever attempt numbers the retries and restarts use.
PARTITION_HOOKS = {
    "coordinated": ("begin_transaction", "write", "pre_commit"),
    "markers": ("begin_transaction", "write", "commit_with_marker"),
}
MAX_RUNS = 4


def _run_until_done(runner: LocalRunner, target: FakeTarget, batch_id: int) -> int:
    """Run a batch, restarting after each injected failure; return the number of failed runs."""
    for failed in range(MAX_RUNS):
        try:
            runner.run_batch(batch_id, layout(batch_id, 3))
        except TwoPhaseError as exc:
            error: TwoPhaseError = exc
        else:
            return failed
        assert "injected fault" in str(error), f"not the injected fault: {error!r}"
        runner.restart()
    raise AssertionError(f"batch {batch_id} never went through in {MAX_RUNS} runs")


def _check_exact(target: FakeTarget, *batches: int) -> None:
    expected = [i for b in batches for i in ids_of(b)]
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == [], "prepared transactions left behind"
    assert target.open_transactions() == [], "open transactions left behind"


def _new(protocol: str, max_task_failures: int = 2) -> tuple[FakeTarget, LocalRunner]:
    target = FakeTarget.in_memory()
    sink = (
        FakeSink("faults", target)
        if protocol == "coordinated"
        else FakeMarkerSink("faults", target)
    )
    runner = LocalRunner(sink, max_task_failures=max_task_failures)
    runner.run_batch(0, layout(0, 3))
    return target, runner


@pytest.mark.parametrize("protocol", ["coordinated", "markers"])
def test_every_partition_hook_failing_then_retry_or_restart_is_exactly_once(protocol: str) -> None:
    checked = 0
    for hook, partition, failures in itertools.product(
        PARTITION_HOOKS[protocol], range(3), (1, 2, 3)
    ):
        target, runner = _new(protocol)
        rule = target.fail(hook, batch_id=1, partition_id=partition, times=failures)
        failed_runs = _run_until_done(runner, target, 1)
        assert target.fired(rule) == failures, f"{hook} x{failures}: the fault did not fire"
        # two attempts per run: one failure is absorbed by Spark's task retry
        assert failed_runs == failures // 2
        runner.run_batch(2, layout(2, 3))
        _check_exact(target, 0, 1, 2)
        checked += 1
    assert checked == len(PARTITION_HOOKS[protocol]) * 3 * 3
    explored(f"executor faults, {protocol} protocol", checked)


@pytest.mark.parametrize("partition", range(3))
def test_phase2_commit_that_fails_for_good_is_finished_by_the_restart(partition: int) -> None:
    target, runner = _new("coordinated")
    rule = target.fail("commit", batch_id=1, partition_id=partition)
    with pytest.raises(CommitFailedError):
        runner.run_batch(1, layout(1, 3))
    assert target.fired(rule) == 1
    # the decision stands; phase 2 commits in partition order and stopped at the failing handle
    assert sorted(
        h.partition_id for h in runner.log.read_decision(1, runner.sink.decode_handle)
    ) == [0, 1, 2]
    prepared = sorted(t.split(":")[2] for t in target.prepared())
    assert prepared == [str(p) for p in range(partition, 3)]
    runner.restart()
    runner.run_batch(1, layout(1, 3))
    runner.run_batch(2, layout(2, 3))
    _check_exact(target, 0, 1, 2)
    explored("executor faults, coordinated protocol", 1)


@pytest.mark.parametrize("failures", [1, 2, 3])
def test_transient_phase2_commit_failures_are_retried_in_place(failures: int) -> None:
    target, runner = _new("coordinated")
    rule = target.fail("commit", batch_id=1, partition_id=1, times=failures, error="RetriableError")
    metrics = runner.run_batch(1, layout(1, 3))
    assert target.fired(rule) == failures
    assert metrics.commit_retries == failures
    _check_exact(target, 0, 1)
    explored("executor faults, coordinated protocol", 1)


# Driver-side hooks get no partition: their rules name the hook only, and each scenario
# sets up the state in which the hook runs (an orphan to abort, a batch to replay).
DRIVER_HOOK_SCENARIOS = [
    ("coordinated", "list_in_doubt", None),  # the orphan sweep after phase 2 fails
    ("coordinated", "recover_and_abort", "phase1_done"),  # rolling back an undecided batch fails
    ("markers", "list_in_doubt", "phase1_done"),  # fencing at recovery fails
    ("markers", "read_markers", "phase1_done"),  # reading the markers of a replay fails
]


@pytest.mark.parametrize(("protocol", "hook", "crash"), DRIVER_HOOK_SCENARIOS)
def test_every_driver_hook_failing_then_restart_is_exactly_once(
    protocol: str, hook: str, crash: str | None
) -> None:
    target, runner = _new(protocol)
    if crash is not None:
        fired = runner.crash_at(crash, 1)
        with pytest.raises(SimulatedCrash):
            runner.run_batch(1, layout(1, 3))
        assert fired.fired
        runner.restart()
    rule = target.fail(hook)
    assert _run_until_done(runner, target, 1) == 1
    assert target.fired(rule) == 1, f"{hook}: the fault did not fire"
    runner.run_batch(2, layout(2, 3))
    _check_exact(target, 0, 1, 2)
    explored(f"executor faults, {protocol} protocol", 1)

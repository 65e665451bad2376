"""Property-based sequences of task failures, driver crashes and restarts (hypothesis)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.unit.conftest import explored
from twophase import NondeterministicBatchError, TwoPhaseError
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

HOOKS = {
    "coordinated": ("begin_transaction", "write", "pre_commit", "commit", "abort"),
    "markers": ("begin_transaction", "write", "commit_with_marker", "abort"),
}


def ids_of(batch_id: int, rows: int) -> list[int]:
    return [batch_id * 1000 + i for i in range(rows)]


def layout(batch_id: int, rows: int, partitions: int) -> list[list[dict[str, int]]]:
    parts: list[list[dict[str, int]]] = [[] for _ in range(partitions)]
    for index, row_id in enumerate(ids_of(batch_id, rows)):
        parts[index % partitions].append({"id": row_id})
    return parts


# (index into the protocol's hooks, partition, attempt)
fault = st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 2))
batch_plan = st.fixed_dictionaries(
    {
        "rows": st.integers(0, 12),
        "partitions": st.integers(1, 4),
        "faults": st.lists(fault, max_size=3),
        "crash": st.one_of(st.none(), st.integers(0, 20)),
        "replay_partitions": st.integers(1, 4),
    }
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    protocol=st.sampled_from(["coordinated", "markers"]),
    staging=st.booleans(),
    plans=st.lists(batch_plan, min_size=1, max_size=4),
)
def test_any_sequence_of_failures_and_restarts_is_exactly_once(
    protocol: str, staging: bool, plans: list[dict[str, Any]]
) -> None:
    target = FakeTarget.in_memory()
    sink = (
        FakeSink("prop", target)
        if protocol == "coordinated"
        else FakeMarkerSink("prop", target, staging=staging)
    )
    steps = COORDINATED_STEPS if protocol == "coordinated" else MARKER_STEPS
    runner = LocalRunner(sink, max_task_failures=2)
    expected: list[int] = []
    for batch_id, plan in enumerate(plans):
        first = layout(batch_id, plan["rows"], plan["partitions"])
        schema = None if plan["rows"] else pa.schema([("id", pa.int64())])
        hooks = HOOKS[protocol]
        for hook, partition, attempt in plan["faults"]:
            target.fail(
                hooks[hook % len(hooks)], batch_id=batch_id, partition_id=partition, attempt=attempt
            )
        if plan["crash"] is not None:
            step = steps[plan["crash"] % len(steps)]
            runner.crash_at(step, batch_id, 0 if step == "committed_handle" else None)
        parts = first
        for _ in range(6):  # restarts until the batch is through
            try:
                runner.run_batch(batch_id, parts, schema=schema)
                break
            except SimulatedCrash:
                parts = layout(batch_id, plan["rows"], plan["replay_partitions"])
            except NondeterministicBatchError:
                assert protocol == "markers"
                parts = first  # a deterministic replay
            except TwoPhaseError:
                target.clear_faults()  # the operator fixes the cause
            runner.restart()
        else:
            raise AssertionError("the batch never went through")
        target.clear_faults()
        expected += ids_of(batch_id, plan["rows"])
        assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []
    explored(f"hypothesis sequences, {protocol} protocol", 1)

"""A participant of another twophase release than its driver's refuses before writing."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

import twophase
from twophase import CommitProtocol, ConfigurationError
from twophase._engine._participant import TaskPlan, run_participant
from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget

pytestmark = pytest.mark.unit


def _plan(protocol: CommitProtocol, version: str | None) -> TaskPlan:
    """A plan as a driver of ``version`` sends it (None: a driver before 0.3.0)."""
    plan = TaskPlan("orders", "orders.0123456789abcdef", 4, protocol, epoch=1)
    assert plan.twophase_version == twophase.__version__
    shipped = pickle.loads(pickle.dumps(plan))
    if version is None:
        del shipped.__dict__["twophase_version"]
    else:
        object.__setattr__(shipped, "twophase_version", version)
    return shipped


@pytest.mark.parametrize("protocol", list(CommitProtocol))
@pytest.mark.parametrize("driver", ["0.2.9", "9.0.0", None])
def test_a_participant_refuses_a_driver_of_another_release(
    protocol: CommitProtocol, driver: str | None
) -> None:
    target = FakeTarget.in_memory()
    sink = (FakeSink if protocol is CommitProtocol.COORDINATED else FakeMarkerSink)(
        "orders", target
    )
    rows = pa.RecordBatch.from_pylist([{"id": 1}, {"id": 2}])
    with pytest.raises(ConfigurationError) as err:
        run_participant(sink, _plan(protocol, driver), 3, 0, [rows])
    message = str(err.value)
    assert f"the driver runs twophase {driver or 'older than 0.3.0'}" in message
    assert f"this executor has twophase {twophase.__version__}" in message
    assert "Install the same twophase wheel on the driver and on every executor" in message
    assert err.value.sink == "orders"
    assert err.value.batch_id == 4
    assert err.value.partition_id == 3
    assert target.prepared() == []
    assert target.committed_rows() == []


def test_the_same_release_writes() -> None:
    target = FakeTarget.in_memory()
    rows = pa.RecordBatch.from_pylist([{"id": 1}])
    plan = _plan(CommitProtocol.COORDINATED, twophase.__version__)
    result = run_participant(FakeSink("orders", target), plan, 0, 0, [rows])
    assert result.rows == 1
    assert len(target.prepared()) == 1

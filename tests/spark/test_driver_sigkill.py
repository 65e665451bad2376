"""A real driver process SIGKILLed at each protocol point, then restarted from its checkpoint."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.spark.helpers import run_driver, write_input
from twophase.testing import FakeTarget, assert_exactly_once

pytestmark = [pytest.mark.spark, pytest.mark.chaos, pytest.mark.slow]


def drive(tmp_path: Path, protocol: str, *crash: str, target: str | None = None) -> tuple[int, str]:
    """Run the driver process once; return its exit code and the end of its log."""
    target = target or str(tmp_path / "target")
    args = [str(tmp_path / "in"), str(tmp_path / "chk"), target, protocol, *crash]
    return run_driver(tmp_path, "tests.spark.driver_process", *args)


@pytest.mark.parametrize(
    ("protocol", "step", "index"),
    # Every driver step is crashed at by the test kit's exploration
    # (tests/unit/test_crash_exploration.py); real drivers of the real connectors are killed by
    # tests/chaos/test_target_faults.py (after the decision, between two commits, with one
    # partition committed, after "N committed") and under Spark Connect by tests/connect/.
    # These two are what only a real driver process of this kind shows: an executor killing it
    # in the middle of the job, and a kill between two phase-2 commits.
    [
        ("coordinated", "phase1", "-"),  # during phase 1 (an executor kills the driver)
        # between two commits of phase 2. Not in the default run (20-minute budget): the same
        # kill of a driver process is tests/integration/jdbc/test_postgres_chaos.py's
        # committed_handle-0, and the restart from Spark's checkpoint is the case above.
        pytest.param("coordinated", "committed_handle", "0", marks=pytest.mark.extended),
    ],
)
def test_sigkilled_driver_restarts_exactly_once(
    tmp_path: Path, protocol: str, step: str, index: str
) -> None:
    expected = write_input(tmp_path / "in", 3)
    code, log = drive(tmp_path, protocol, step, "1", index)
    assert code == -signal.SIGKILL, f"the driver was not killed (rc={code}):\n{log}"
    target = FakeTarget(tmp_path / "target")
    assert len(target.committed_rows()) < len(expected), "the kill came too late to test anything"
    code, log = drive(tmp_path, protocol)
    assert code == 0, log
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []

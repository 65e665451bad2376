"""The chaos summary fails a run on driver-log findings that need not happen (issue 53)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import TrialResult, draw_plan, scan_log, summarize

pytestmark = pytest.mark.unit

OVERFLOW = (
    'Exception in thread "stream execution thread for [id = 6c4cee2c, runId = 69e97ab7]" '
    "java.lang.StackOverflowError\n\tat java.base/java.util.regex.Pattern$Loop.match\n"
)
VALIDATION = (
    "[STATE_STORE_COMMIT_VALIDATION_FAILED] State store commit validation failed for batch 1. "
    "Expected 2 commits but got 0.\n"
)


def _trial(tmp_path: Path, log: str) -> TrialResult:
    path = tmp_path / "driver-0.log"
    path.write_text(log)
    result = TrialResult(draw_plan("53", 0), outcome="exact")
    result.log_findings = scan_log(path)
    return result


@pytest.mark.parametrize(
    ("log", "finding"),
    [
        pytest.param(OVERFLOW, "StackOverflowError", id="stack-overflow"),
        pytest.param(VALIDATION, "STATE_STORE_COMMIT_VALIDATION_FAILED", id="state-validation"),
    ],
)
def test_an_exact_trial_whose_driver_log_shows_a_needless_failure_fails_the_run(
    tmp_path: Path, log: str, finding: str
) -> None:
    result = _trial(tmp_path, log)
    assert finding in result.failing_findings
    assert not result.ok
    table, ok = summarize([result], "53", 60.0)
    assert not ok
    assert "| findings that fail the run" in table
    assert f"{finding}: 1" in table.split("findings that fail the run", 1)[1].splitlines()[0]


def test_an_exact_trial_with_a_clean_driver_log_passes(tmp_path: Path) -> None:
    result = _trial(tmp_path, "INFO MicroBatchExecution: query stopped\n")
    assert result.failing_findings == []
    table, ok = summarize([result], "53", 60.0)
    assert ok
    assert "| findings that fail the run" in table
    assert table.split("findings that fail the run", 1)[1].splitlines()[0].endswith("| none |")

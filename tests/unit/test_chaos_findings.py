"""The chaos summary fails a run on driver-log findings that need not happen (issue 53), and on
dead letters that are not each poison row once (issue 52)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.chaos.harness import (
    BAD_ROW_CLASSES,
    TrialResult,
    _check,
    draw_plan,
    expected_output,
    scan_log,
    summarize,
)

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


class _Target:
    """What a trial's target holds: its rows and its dead letters, as counters."""

    def __init__(self, rows: Counter[tuple[int, str]], letters: Counter[tuple[int, str]]) -> None:
        self.rows, self.letters = rows, letters

    def counts(self) -> Counter[tuple[int, str]]:
        return self.rows

    def dead_letters(self) -> Counter[tuple[int, str]]:
        return self.letters

    def leftovers(self) -> list[str]:
        return []


def _bad_trial(letters: Counter[tuple[int, str]]) -> TrialResult:
    """A finished trial with poison rows whose target holds every good row once."""
    plan = draw_plan("52", 1, ("pg-markers",), bad_rows=1.0)
    assert plan.bad_rows
    result = TrialResult(plan, exit_codes=[0])
    rows = Counter(expected_output(plan).items())
    _check(result, _Target(rows, letters))  # type: ignore[arg-type]
    return result


def _letters(plan_bad_rows: dict[int, str]) -> Counter[tuple[int, str]]:
    return Counter({(k, BAD_ROW_CLASSES[kind]): 1 for k, kind in plan_bad_rows.items()})


def test_every_poison_row_once_in_the_dead_letters_is_exact() -> None:
    plan = draw_plan("52", 1, ("pg-markers",), bad_rows=1.0)
    result = _bad_trial(_letters(plan.bad_rows))
    assert result.outcome == "exact"
    assert result.ok
    assert result.dead_letters == len(plan.bad_rows)
    assert f"dead_letters={len(plan.bad_rows)}/{len(plan.bad_rows)} " in result.line()
    table, ok = summarize([result], "52", 60.0)
    assert ok
    n = len(plan.bad_rows)
    assert f"| {n} / {n} in 1 trials with bad rows (" in table
    assert "|   duplicates, losses, wrong      | 0, 0, 0 |" in table


def test_the_summary_counts_the_letters_found_and_expected_by_class() -> None:
    """Trials of every JDBC kind: a letter lost of one class shows as found/expected of it."""
    results = []
    for index in range(12):
        plan = draw_plan("52", index, ("pg-markers", "maria-coordinated"), bad_rows=1.0)
        letters = _letters(plan.bad_rows)
        if index == 0:
            key, kind = next(iter(plan.bad_rows.items()))
            del letters[(key, BAD_ROW_CLASSES[kind])]
            lost = BAD_ROW_CLASSES[kind]
        result = TrialResult(plan, exit_codes=[0])
        _check(result, _Target(Counter(expected_output(plan).items()), letters))  # type: ignore[arg-type]
        results.append(result)
    expected = Counter(BAD_ROW_CLASSES[k] for r in results for k in r.plan.bad_rows.values())
    assert set(expected) == {
        "not_null",
        "too_long",
        "check",
        "invalid_value",
        "foreign_key",
        "unique",
    }
    table, ok = summarize(results, "52", 60.0)
    assert not ok
    row = table.split("dead letters found / poison keys", 1)[1].splitlines()[0]
    for error_class, n in expected.items():
        found = n - 1 if error_class == lost else n
        assert f"{error_class}: {found}/{n}" in row, row


@pytest.mark.parametrize(
    ("change", "outcome"),
    [
        pytest.param("twice", "DEAD-LETTER-DUPLICATES(1)", id="a-letter-twice"),
        pytest.param("lost", "DEAD-LETTER-LOSSES(1)", id="a-letter-lost"),
        pytest.param("good-row", "DEAD-LETTER-WRONG(1)", id="a-good-row-set-aside"),
        pytest.param("class", "DEAD-LETTER-LOSSES(1)+DEAD-LETTER-WRONG(1)", id="another-class"),
    ],
)
def test_a_dead_letter_twice_lost_or_wrong_fails_the_trial(change: str, outcome: str) -> None:
    plan = draw_plan("52", 1, ("pg-markers",), bad_rows=1.0)
    letters = _letters(plan.bad_rows)
    key, kind = next(iter(plan.bad_rows.items()))
    if change == "twice":
        letters[(key, BAD_ROW_CLASSES[kind])] += 1
    elif change == "lost":
        del letters[(key, BAD_ROW_CLASSES[kind])]
    elif change == "good-row":
        letters[(next(iter(expected_output(plan))), "not_null")] += 1
    else:
        del letters[(key, BAD_ROW_CLASSES[kind])]
        letters[(key, "check" if BAD_ROW_CLASSES[kind] != "check" else "unique")] += 1
    result = _bad_trial(letters)
    assert result.outcome == outcome
    assert not result.ok
    table, ok = summarize([result], "52", 60.0)
    assert not ok
    assert "|   duplicates, losses, wrong" in table

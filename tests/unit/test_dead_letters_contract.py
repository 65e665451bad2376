"""The dead-letter contract run against the kit's fake sinks, and catching broken sinks."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from twophase import DeadLetter
from twophase.testing import (
    DeadLetterContract,
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    FakeTransaction,
    MarkerSinkContract,
    TwoPhaseSinkContract,
)

pytestmark = pytest.mark.unit


class _Fixtures:
    @pytest.fixture
    def target(self) -> FakeTarget:
        target = FakeTarget.in_memory()
        target.reject("payload", [None], error_class="not_null", code="23502")
        return target

    @pytest.fixture
    def read_ids(self, target: FakeTarget) -> Callable[[], list[int]]:
        return lambda: [row["id"] for row in target.committed_rows()]

    @pytest.fixture
    def read_dead_letters(self, target: FakeTarget) -> Callable[[], list[DeadLetter]]:
        return target.dead_letters


class TestFakeSinkDeadLetters(_Fixtures, DeadLetterContract, TwoPhaseSinkContract):
    @pytest.fixture
    def make_sink(self, target: FakeTarget) -> Callable[[str], Any]:
        return lambda name: FakeSink(name, target, bad_rows="dead_letter")


class TestFakeMarkerSinkDeadLetters(_Fixtures, DeadLetterContract, MarkerSinkContract):
    @pytest.fixture
    def make_sink(self, target: FakeTarget) -> Callable[[str], Any]:
        return lambda name: FakeMarkerSink(name, target, bad_rows="dead_letter")


class TestFakeSinkDeadLettersOnDirectory(TestFakeSinkDeadLetters):
    """The directory-backed target (the one Spark tests use) keeps the same contract."""

    @pytest.fixture
    def target(self, tmp_path: Any) -> FakeTarget:
        target = FakeTarget(tmp_path / "target")
        target.reject("payload", [None])
        return target


def test_only_the_dead_letter_tests_that_apply_are_generated() -> None:
    shared = {n for n in dir(TwoPhaseSinkContract) if n.startswith("test_")}
    added = {n for n in dir(TestFakeSinkDeadLetters) if n.startswith("test_")} - shared
    assert added == {
        "test_dead_letters_hold_each_refused_row_once_with_its_place_and_error",
        "test_dead_letters_exact_after_a_driver_crash_at_each_step",
        "test_dead_letters_exact_after_task_retries",
        "test_dead_letters_over_max_bad_rows_fail_the_batch",
    }
    assert not any(n.startswith("test_dead") for n in dir(TwoPhaseSinkContract))


# ------------------------------------------------ the contract catches broken sinks
class DeadLettersOutsideTheTransaction(FakeSink):
    """Writes its dead letters in a transaction of their own, committed at once."""

    def write_dead_letters(self, txn: FakeTransaction, letters: Sequence[DeadLetter]) -> None:
        side = txn.transaction_id + "-dlq"
        self.target.begin(side)
        self.target.add_dead_letters(side, list(letters))
        self.target.commit_open(side)


class KeepsRefusedRows(FakeMarkerSink):
    """Hands refused rows back but writes them to the target too."""

    def write(self, txn: FakeTransaction, batch: Any) -> Any:
        refused = super().write(txn, batch)
        rows = batch.to_pylist()
        self.target.append(txn.transaction_id, [rows[e.row] for e in refused])
        return refused


@pytest.mark.parametrize(
    ("broken", "contract", "test"),
    [
        (
            DeadLettersOutsideTheTransaction,
            TestFakeSinkDeadLetters,
            "test_dead_letters_over_max_bad_rows_fail_the_batch",
        ),
        (
            KeepsRefusedRows,
            TestFakeMarkerSinkDeadLetters,
            "test_dead_letters_hold_each_refused_row_once_with_its_place_and_error",
        ),
    ],
)
def test_the_dead_letter_contract_rejects_a_broken_sink(
    broken: type[Any], contract: type[Any], test: str, tmp_path: Any
) -> None:
    target = FakeTarget.in_memory()
    target.reject("payload", [None])
    suite = contract()
    with pytest.raises(AssertionError):
        getattr(suite, test)(
            lambda name: broken(name, target, bad_rows="dead_letter"),
            lambda: [row["id"] for row in target.committed_rows()],
            target.dead_letters,
            tmp_path,
        )

"""The contract suite must fail for broken sinks: each mutant here breaks one rule."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from twophase import Marker, TransactionHandle, TwoPhaseError
from twophase.testing import (
    FakeMarkerSink,
    FakeSink,
    FakeTarget,
    FakeTransaction,
    MarkerSinkContract,
    SinkContract,
    TwoPhaseSinkContract,
)

pytestmark = pytest.mark.unit


class LosesDecidedCommits(FakeSink):
    def recover_and_commit(self, handle: TransactionHandle) -> None:
        pass  # forgets the decided batch after a crash


class CommitsAtPrepare(FakeSink):
    def pre_commit(self, txn: FakeTransaction) -> TransactionHandle:
        handle = super().pre_commit(txn)
        self.target.commit_prepared(handle.transaction_id)  # visible too early
        return handle


@dataclass(frozen=True)
class TaggedHandle(TransactionHandle):
    tag: str = "x"


class UndeclaredHandleClass(FakeSink):
    # Returns a subclass with a field of its own but declares TransactionHandle: the log
    # would give back a TransactionHandle without the tag.
    def pre_commit(self, txn: FakeTransaction) -> TransactionHandle:
        h = super().pre_commit(txn)
        return TaggedHandle(h.transaction_id, h.batch_id, h.partition_id, h.attempt, "y")


class DecodesAnotherHandle(FakeSink):
    def decode_handle(self, data: Mapping[str, Any]) -> TransactionHandle:
        h = super().decode_handle(data)
        return TransactionHandle(h.transaction_id, h.batch_id, h.partition_id, h.attempt + 1)


class NeverAborts(FakeSink):
    def recover_and_abort(self, handle: TransactionHandle) -> None:
        pass

    def abort(self, txn: FakeTransaction) -> None:
        pass


class ForgetsMarkers(FakeMarkerSink):
    def read_markers(self, identity: str, batch_id: int) -> list[Marker]:
        return []


class TrustsItsOwnCommit(FakeMarkerSink):
    def needs_marker_check(self, txn: FakeTransaction) -> bool:
        return False  # claims no other attempt can commit, which FakeTarget does not ensure


def _contract(cls: type[Any]) -> SinkContract:
    return TwoPhaseSinkContract() if issubclass(cls, FakeSink) else MarkerSinkContract()


def _fixtures(cls: type[Any]) -> tuple[Callable[[str], Any], Callable[[], list[int]]]:
    target = FakeTarget.in_memory()
    return (lambda name: cls(name, target)), (
        lambda: [row["id"] for row in target.committed_rows()]
    )


@pytest.mark.parametrize(
    ("mutant", "test", "args"),
    [
        (LosesDecidedCommits, "test_contract_driver_crash_at_each_step_then_restart", ("decided",)),
        (CommitsAtPrepare, "test_contract_handles_survive_the_coordinator_log", ()),
        (UndeclaredHandleClass, "test_contract_handles_survive_the_coordinator_log", ()),
        (DecodesAnotherHandle, "test_contract_handles_survive_the_coordinator_log", ()),
        (CommitsAtPrepare, "test_contract_failed_batch_then_restart_is_exact", ()),
        (NeverAborts, "test_contract_orphan_of_dead_attempt_is_aborted", ()),
        (NeverAborts, "test_contract_failed_batch_then_restart_is_exact", ()),
        (ForgetsMarkers, "test_contract_driver_crash_at_each_step_then_restart", ("phase1_done",)),
        (ForgetsMarkers, "test_contract_replay_with_another_partition_layout", ()),
        (
            TrustsItsOwnCommit,
            "test_contract_a_zombie_committing_after_the_replay_check_is_not_written_twice",
            (),
        ),
    ],
)
def test_contract_fails_for_broken_sink(
    mutant: type[Any], test: str, args: tuple[Any, ...], tmp_path: Path
) -> None:
    make_sink, read_ids = _fixtures(mutant)
    with pytest.raises((AssertionError, TwoPhaseError, pytest.fail.Exception)):
        getattr(_contract(mutant), test)(make_sink, read_ids, tmp_path, *args)


@pytest.mark.parametrize("cls", [FakeSink, FakeMarkerSink])
def test_contract_passes_for_the_unbroken_fakes(cls: type[Any], tmp_path: Path) -> None:
    # the same calls as above do not raise for correct sinks
    make_sink, read_ids = _fixtures(cls)
    _contract(cls).test_contract_failed_batch_then_restart_is_exact(make_sink, read_ids, tmp_path)

"""The dead-letter contract: rows a sink refuses land in its dead letters exactly once.

Add :class:`DeadLetterContract` to a sink's contract suite when the sink supports
``bad_rows="dead_letter"`` -- ``class TestMySink(DeadLetterContract,
TwoPhaseSinkContract)`` or with :class:`MarkerSinkContract` -- and give it, besides
``make_sink`` (now building the sink with ``bad_rows="dead_letter"``) and ``read_ids``:

* ``read_dead_letters`` -- a callable ``() -> list[DeadLetter]`` returning every dead
  letter a reader of the sink's dead letters sees now (committed only).

Rows whose ``payload`` is null must be refused by the target (a ``NOT NULL`` column);
override :meth:`DeadLetterContract.make_poisoned_batch` for another poison. A sink
without dead letters does not subclass it, so none of its tests is generated.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import pyarrow as pa
import pytest

from .._values import CommitProtocol, DeadLetter, RecoveryContext
from ..errors import DataError
from ._assertions import assert_exactly_once_or_dead_lettered
from ._contract import MakeSink, ReadIds, SinkContract
from ._crash import SimulatedCrash
from ._faults import with_faults
from ._local import AnySinkLike, LocalRunner
from ._target import FakeTarget

__all__ = ["DeadLetterContract"]

ReadDeadLetters = Callable[[], list[DeadLetter]]


class DeadLetterContract(SinkContract):
    """The dead-letter contract of a sink that sets refused rows aside (see module docstring)."""

    #: Positions, in each contract batch, of the rows made bad (one in each of its partitions).
    poisoned_positions: tuple[int, ...] = (1, 5, 6)

    def make_poisoned_batch(self, ids: Sequence[int], bad: Collection[int]) -> pa.RecordBatch:
        """Build the rows of ``ids``, those of ``bad`` refused by the target (a null payload).

        Parameters
        ----------
        ids
            Unique row ids.
        bad
            The ids of the rows the target must refuse.

        Returns
        -------
        pyarrow.RecordBatch
            One row per id.
        """
        batch = self.make_batch(ids)
        index = batch.schema.get_field_index("payload")
        payload = [
            None if i in bad else v
            for i, v in zip(ids, batch.column(index).to_pylist(), strict=True)
        ]
        column = pa.array(payload, batch.schema.field(index).type)
        return batch.set_column(index, batch.schema.field(index), column)

    def bad_ids(self, batch_id: int) -> list[int]:
        """Return the ids of contract batch ``batch_id`` the target refuses."""
        ids = self.batch_ids(batch_id)
        return [ids[p] for p in self.poisoned_positions]

    def poisoned_partitions(self, batch_id: int) -> list[list[pa.RecordBatch]]:
        """Split batch ``batch_id`` round-robin into partitions, its bad rows poisoned."""
        count = self.partitions_per_batch
        bad = set(self.bad_ids(batch_id))
        parts: list[list[int]] = [[] for _ in range(count)]
        for index, row_id in enumerate(self.batch_ids(batch_id)):
            parts[index % count].append(row_id)
        return [[self.make_poisoned_batch(p, bad)] if p else [] for p in parts]

    def _run_poisoned(self, runner: LocalRunner, batch_id: int) -> None:
        runner.run_batch(batch_id, self.poisoned_partitions(batch_id))

    def _dead_sink(self, make_sink: MakeSink) -> AnySinkLike:
        sink = self._sink(make_sink)
        assert sink.bad_rows == "dead_letter", (
            f"make_sink built a sink with bad_rows={sink.bad_rows!r}: the dead-letter contract "
            "needs bad_rows='dead_letter'"
        )
        return sink

    def _check_exact(self, read_ids: ReadIds, read_dead: ReadDeadLetters, batches: int) -> None:
        ids = [i for b in range(batches) for i in self.batch_ids(b)]
        bad = [i for b in range(batches) for i in self.bad_ids(b)]
        dead = [letter.values()["id"] for letter in read_dead()]
        assert_exactly_once_or_dead_lettered(read_ids(), dead, ids, refused=bad)

    # -------------------------------------------------------- the tests
    def test_dead_letters_hold_each_refused_row_once_with_its_place_and_error(
        self,
        make_sink: MakeSink,
        read_ids: ReadIds,
        read_dead_letters: ReadDeadLetters,
        tmp_path: Any,
    ) -> None:
        runner = self._runner(self._dead_sink(make_sink), tmp_path)
        for batch_id in range(2):
            metrics = runner.run_batch(batch_id, self.poisoned_partitions(batch_id))
            assert metrics.dead_lettered == len(self.poisoned_positions)
            assert metrics.rows == self.rows_per_batch - len(self.poisoned_positions)
            self._check_exact(read_ids, read_dead_letters, batch_id + 1)
        count = self.partitions_per_batch
        for letter in read_dead_letters():
            row_id = letter.values()["id"]
            at = self.batch_ids(letter.batch_id).index(row_id)
            assert (letter.sink, letter.partition_id, letter.position) == (
                "contract",
                at % count,
                at // count,
            ), f"dead letter of row {row_id} names the wrong place: {letter}"
            assert letter.error_class, letter
            assert letter.message, letter
            assert letter.values()["payload"] is None, letter.row

    def test_dead_letters_exact_after_a_driver_crash_at_each_step(
        self,
        make_sink: MakeSink,
        read_ids: ReadIds,
        read_dead_letters: ReadDeadLetters,
        tmp_path: Any,
        step: str,
    ) -> None:
        runner = self._runner(self._dead_sink(make_sink), tmp_path)
        self._run_poisoned(runner, 0)
        crash = runner.crash_at(step, 1)
        with pytest.raises(SimulatedCrash):
            self._run_poisoned(runner, 1)
        assert crash.fired
        runner.restart()
        self._run_poisoned(runner, 1)
        self._check_exact(read_ids, read_dead_letters, 2)

    def test_dead_letters_exact_after_task_retries(
        self,
        make_sink: MakeSink,
        read_ids: ReadIds,
        read_dead_letters: ReadDeadLetters,
        tmp_path: Any,
    ) -> None:
        rules = FakeTarget.in_memory()
        sink = with_faults(self._dead_sink(make_sink), rules)
        runner = self._runner(sink, tmp_path, max_task_failures=3)
        injected = [
            rules.fail("write_dead_letters", batch_id=0, partition_id=0, attempt=0),
            rules.fail(self.finishing_hook, batch_id=0, partition_id=1, attempt=0),
        ]
        self._run_poisoned(runner, 0)
        assert [rules.fired(rule) for rule in injected] == [1, 1], "a fault did not fire"
        self._check_exact(read_ids, read_dead_letters, 1)

    def test_dead_letters_over_max_bad_rows_fail_the_batch(
        self,
        make_sink: MakeSink,
        read_ids: ReadIds,
        read_dead_letters: ReadDeadLetters,
        tmp_path: Any,
    ) -> None:
        sink = self._dead_sink(make_sink)
        runner = self._runner(sink, tmp_path)
        self._run_poisoned(runner, 0)
        # Each partition refuses one row, within the bound; the batch's three are over it.
        sink.max_bad_rows = len(self.poisoned_positions) - 1
        with pytest.raises(DataError, match="max_bad_rows") as failed:
            self._run_poisoned(runner, 1)
        assert failed.value.batch_id == 1
        assert str(len(self.poisoned_positions)) + " rows were refused" in str(failed.value)
        self.check_over_max_bad_rows(sink, runner, read_ids, read_dead_letters)
        sink.max_bad_rows = len(self.poisoned_positions)
        runner.restart()
        self._run_poisoned(runner, 1)
        self._check_exact(read_ids, read_dead_letters, 2)

    def check_over_max_bad_rows(
        self,
        sink: AnySinkLike,
        runner: LocalRunner,
        read_ids: ReadIds,
        read_dead: ReadDeadLetters,
    ) -> None:
        """Check what batch 1, failed over ``max_bad_rows``, left (batch 0 committed)."""
        if self.protocol is CommitProtocol.COORDINATED:
            # Held on the driver before the decision: nothing of the batch commits.
            self._check_exact(read_ids, read_dead, 1)
            in_doubt = sink.list_in_doubt(RecoveryContext(runner.identity.token, 3))
            assert not in_doubt, f"the failed batch left prepared transactions: {in_doubt}"
        else:
            # Markers: each partition committed on its executor before the driver saw the
            # total; rows and dead letters are there once, and the replay skips both.
            self._check_exact(read_ids, read_dead, 2)

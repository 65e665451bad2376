"""A reusable pytest suite that proves a sink keeps the exactly-once guarantee.

Subclass :class:`SinkContract` in a test module and provide two fixtures:

* ``make_sink`` -- a callable ``name -> sink`` building a fresh sink that writes
  to a fresh, empty target (a table, a topic, a fake);
* ``read_ids`` -- a callable ``() -> list[int]`` returning the ``id`` of every
  row a reader of the target sees now (committed data only).

Override :meth:`SinkContract.make_batch` when the sink needs other columns
than ``id`` (int64) and ``payload`` (string). Every test drives the sink
through :class:`~twophase.testing.LocalRunner` -- the production coordinator
without Spark -- and ends with :func:`assert_exactly_once`.

Example::

    class TestMySink(SinkContract):
        @pytest.fixture
        def make_sink(self, tmp_path):
            return lambda name: MySink(name, directory=tmp_path / "out")

        @pytest.fixture
        def read_ids(self, tmp_path):
            return lambda: [row["id"] for row in read_everything(tmp_path / "out")]
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pytest

from .._coordinator import COORDINATED_STEPS, MARKER_STEPS
from .._sink import TwoPhaseCommitSink, _SinkBase
from .._types import CommitProtocol, RecoveryContext, TaskContext
from ..errors import NondeterministicBatchError
from ._assertions import assert_exactly_once
from ._crash import SimulatedCrash
from ._faults import with_faults
from ._local import LocalRunner
from ._target import FakeTarget

__all__ = ["SinkContract"]

MakeSink = Callable[[str], _SinkBase[Any, Any]]
ReadIds = Callable[[], list[int]]

_ALL_STEPS = sorted(
    set(COORDINATED_STEPS) | set(MARKER_STEPS),
    key=lambda s: (COORDINATED_STEPS + MARKER_STEPS).index(s),
)


class SinkContract:
    """The exactly-once contract every sink must pass (see module docstring)."""

    #: Rows per batch in the contract tests.
    rows_per_batch = 12
    #: Partitions per batch in the contract tests.
    partitions_per_batch = 3

    # ------------------------------------------------------------ inputs
    def make_batch(self, ids: Sequence[int]) -> pa.RecordBatch:
        """Build the input rows for ``ids``; override for other schemas.

        Parameters
        ----------
        ids
            Unique row ids.

        Returns
        -------
        pyarrow.RecordBatch
            One row per id.
        """
        return pa.record_batch(
            {
                "id": pa.array(list(ids), pa.int64()),
                "payload": pa.array([f"row-{i}" for i in ids], pa.string()),
            }
        )

    def batch_ids(self, batch_id: int) -> list[int]:
        """Return the row ids of contract batch ``batch_id``."""
        start = batch_id * 1000
        return list(range(start, start + self.rows_per_batch))

    def partitions(
        self, ids: Sequence[int], count: int | None = None
    ) -> list[list[pa.RecordBatch]]:
        """Split ``ids`` round-robin into ``count`` partitions of record batches."""
        count = count or self.partitions_per_batch
        parts: list[list[int]] = [[] for _ in range(count)]
        for index, row_id in enumerate(ids):
            parts[index % count].append(row_id)
        return [[self.make_batch(p)] if p else [] for p in parts]

    def _runner(self, sink: _SinkBase[Any, Any], tmp_path: Any, **kwargs: Any) -> LocalRunner:
        return LocalRunner(sink, tmp_path / "checkpoint", **kwargs)

    def _run(self, runner: LocalRunner, batch_id: int, count: int | None = None) -> None:
        runner.run_batch(batch_id, self.partitions(self.batch_ids(batch_id), count))

    # -------------------------------------------------------- the tests
    def test_contract_batches_commit_exactly_once(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(make_sink("contract"), tmp_path)
        expected: list[int] = []
        for batch_id in range(3):
            self._run(runner, batch_id)
            expected += self.batch_ids(batch_id)
            assert_exactly_once(read_ids(), expected)

    def test_contract_replayed_committed_batch_writes_nothing(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(make_sink("contract"), tmp_path)
        self._run(runner, 0)
        runner.restart()
        metrics = runner.run_batch(0, self.partitions(self.batch_ids(0), 2))
        assert metrics.outcome == "already-committed"
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_empty_batches_and_partitions(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(make_sink("contract"), tmp_path)
        metrics = runner.run_batch(0, [[], []], schema=self.make_batch([1]).schema)
        assert metrics.transactions == 0
        ids = self.batch_ids(1)[:2]
        metrics = runner.run_batch(1, [[], [self.make_batch(ids)], []])
        assert metrics.transactions == 1
        assert_exactly_once(read_ids(), ids)

    @pytest.mark.parametrize("step", _ALL_STEPS)
    def test_contract_driver_crash_at_each_step_then_restart(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any, step: str
    ) -> None:
        sink = make_sink("contract")
        steps = COORDINATED_STEPS if sink.protocol is CommitProtocol.COORDINATED else MARKER_STEPS
        if step not in steps:
            pytest.skip(f"{step} is not a step of the {sink.protocol.value} protocol")
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)
        crash = runner.crash_at(step, 1)
        with pytest.raises(SimulatedCrash):
            self._run(runner, 1)
        assert crash.fired
        visible = read_ids()
        if step in ("start", "recovered", "phase1_done", "decided", "staged") and (
            sink.protocol is CommitProtocol.COORDINATED
        ):
            # prepared or not, nothing of batch 1 is visible before phase 2
            assert_exactly_once(visible, self.batch_ids(0))
        runner.restart()
        self._run(runner, 1)
        self._run(runner, 2)
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1) + self.batch_ids(2))

    def test_contract_task_failure_is_retried(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        rules = FakeTarget.in_memory()
        sink = with_faults(make_sink("contract"), rules)
        runner = self._runner(sink, tmp_path, max_task_failures=3)
        rules.fail("write", batch_id=0, partition_id=1, attempt=0)
        rules.fail("pre_commit", batch_id=0, partition_id=2, attempt=0)
        rules.fail("pre_commit", batch_id=0, partition_id=2, attempt=1)
        self._run(runner, 0)
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_failed_batch_then_restart_is_exact(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        rules = FakeTarget.in_memory()
        sink = with_faults(make_sink("contract"), rules)
        runner = self._runner(sink, tmp_path, max_task_failures=2)
        self._run(runner, 0)
        rules.fail("pre_commit", batch_id=1, partition_id=2, times=-1)
        with pytest.raises(Exception, match="injected fault"):
            self._run(runner, 1)
        if sink.protocol is CommitProtocol.COORDINATED:
            # all-or-nothing: no partition of the failed batch is visible
            assert_exactly_once(read_ids(), self.batch_ids(0))
            assert not [h for h in sink.list_in_doubt(RecoveryContext(runner.identity.token, 3))], (
                "a failed batch left prepared transactions behind"
            )
        rules.clear_faults()
        runner.restart()
        self._run(runner, 1)
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1))

    def test_contract_replay_with_another_partition_layout(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        sink = make_sink("contract")
        runner = self._runner(sink, tmp_path)
        runner.crash_at("phase1_done", 0)
        with pytest.raises(SimulatedCrash):
            self._run(runner, 0, count=3)
        runner.restart()
        if sink.protocol is CommitProtocol.COORDINATED:
            self._run(runner, 0, count=2)  # undecided: aborted and rewritten whole
            assert_exactly_once(read_ids(), self.batch_ids(0))
        else:
            before = sorted(read_ids())
            with pytest.raises(NondeterministicBatchError):
                self._run(runner, 0, count=2)
            assert sorted(read_ids()) == before, "a refused replay wrote rows"
            self._run(runner, 0, count=3)  # the same layout again: completes
            assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_orphan_of_dead_attempt_is_aborted(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        sink = make_sink("contract")
        if not isinstance(sink, TwoPhaseCommitSink):
            pytest.skip("orphaned prepared transactions exist only in protocol A")
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)
        # A dead attempt of batch 1 left a prepared transaction behind.
        executor = pickle.loads(pickle.dumps(sink))
        ctx = TaskContext(sink.name, runner.identity.token, 1, 0, 0)
        txn = executor.begin_transaction(ctx)
        executor.write(txn, self.make_batch([999_999]))
        handle = executor.pre_commit(txn)
        in_doubt = sink.list_in_doubt(RecoveryContext(runner.identity.token, 3))
        assert [h.transaction_id for h in in_doubt] == [handle.transaction_id]
        assert 999_999 not in read_ids(), "a prepared transaction is visible"
        runner.restart()
        self._run(runner, 1)
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1))
        assert not sink.list_in_doubt(RecoveryContext(runner.identity.token, 3))

    def test_contract_handles_are_picklable(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        sink = make_sink("contract")
        if not isinstance(sink, TwoPhaseCommitSink):
            pytest.skip("protocol B handles never leave the executor")
        runner = self._runner(sink, tmp_path)
        runner.crash_at("decided", 0)
        with pytest.raises(SimulatedCrash):
            self._run(runner, 0)
        handles = runner.log.read_decision(0)
        assert handles, "the decision recorded no handle"
        for handle in handles:
            assert pickle.loads(pickle.dumps(handle)) == handle
        assert read_ids() == [], "rows became visible before phase 2"
        runner.restart()
        self._run(runner, 0)
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_checkpoint_reset_is_a_new_identity(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(make_sink("contract"), tmp_path)
        self._run(runner, 0)
        first_identity = runner.identity.token
        runner.reset_checkpoint()
        assert runner.identity.token != first_identity
        metrics = runner.run_batch(0, [[self.make_batch([5_000_000])]])
        assert metrics.outcome == "committed", "a reset made new data look committed"
        assert_exactly_once(read_ids(), [*self.batch_ids(0), 5_000_000])

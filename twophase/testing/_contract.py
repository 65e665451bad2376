"""A reusable pytest suite that proves a sink keeps the exactly-once guarantee.

Subclass :class:`TwoPhaseSinkContract` (for a :class:`~twophase.TwoPhaseCommitSink`)
or :class:`MarkerSinkContract` (for a :class:`~twophase.MarkerCommitSink`) in a
test module -- both are :class:`SinkContract`, and each generates only the
tests that apply to its protocol -- and provide two fixtures:

* ``make_sink`` -- a callable ``name -> sink`` building a fresh sink that writes
  to a fresh, empty target (a table, a topic, a fake);
* ``read_ids`` -- a callable ``() -> list[int]`` returning the ``id`` of every
  row a reader of the target sees now (committed data only).

Override :meth:`SinkContract.make_batch` when the sink needs other columns
than ``id`` (int64) and ``payload`` (string). Every test drives the sink
through :class:`~twophase.testing.LocalRunner` -- the production coordinator
without Spark -- and ends with :func:`assert_exactly_once`.

Example::

    class TestMySink(MarkerSinkContract):
        @pytest.fixture
        def make_sink(self, tmp_path):
            return lambda name: MySink(name, directory=tmp_path / "out")

        @pytest.fixture
        def read_ids(self, tmp_path):
            return lambda: [row["id"] for row in read_everything(tmp_path / "out")]
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
import pyarrow as pa
import pytest

from .._arrow import binary_array
from .._engine._participant import TaskPlan
from .._engine._realtime import RealtimeSettings, run_realtime_partition
from .._engine._steps import COORDINATED_STEPS, MARKER_STEPS, Step
from .._fingerprint import fingerprint_batches
from .._sinks._two_phase_commit_sink import TwoPhaseCommitSink
from .._values import CommitProtocol, Marker, RecoveryContext, TaskContext
from ..errors import NondeterministicBatchError
from ._assertions import assert_exactly_once
from ._crash import SimulatedCrash
from ._faults import with_faults
from ._local import AnySinkLike, LocalRunner, install_step_listener
from ._target import FakeTarget

__all__ = ["MarkerSinkContract", "SinkContract", "TwoPhaseSinkContract"]

MakeSink = Callable[[str], AnySinkLike]
ReadIds = Callable[[], list[int]]


class SinkContract:
    """The exactly-once contract every sink must pass (see module docstring).

    Subclass :class:`TwoPhaseSinkContract` or :class:`MarkerSinkContract`;
    this base holds the tests both protocols share.
    """

    #: The protocol the sink under test must speak (set by the two subclasses).
    protocol: ClassVar[CommitProtocol | None] = None
    #: The coordinator steps of that protocol (each a crash point).
    steps: ClassVar[tuple[str, ...]] = ()
    #: The executor hook that ends phase 1 (where a failure is injected).
    finishing_hook: ClassVar[str] = ""
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
        id_values = pa.py_buffer(np.array(list(ids), dtype=np.int64))
        payloads = binary_array([f"row-{i}".encode() for i in ids], pa.string())
        return pa.RecordBatch.from_arrays(
            [pa.Array.from_buffers(pa.int64(), len(ids), [None, id_values]), payloads],
            names=["id", "payload"],
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

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize the crash test with this protocol's steps only."""
        if self.protocol is None:
            raise TypeError(
                f"{type(self).__name__} subclasses SinkContract directly: subclass "
                "TwoPhaseSinkContract or MarkerSinkContract, after your sink's protocol"
            )
        if "step" in metafunc.fixturenames:
            metafunc.parametrize("step", self.steps)

    def _sink(self, make_sink: MakeSink) -> AnySinkLike:
        sink = make_sink("contract")
        assert sink.protocol is self.protocol, (
            f"{type(self).__name__} checks {self.protocol} sinks, but make_sink built a "
            f"{sink.protocol} sink ({type(sink).__name__})"
        )
        return sink

    def _runner(self, sink: AnySinkLike, tmp_path: Any, **kwargs: Any) -> LocalRunner:
        return LocalRunner(sink, tmp_path / "checkpoint", **kwargs)

    def _run(self, runner: LocalRunner, batch_id: int, count: int | None = None) -> None:
        runner.run_batch(batch_id, self.partitions(self.batch_ids(batch_id), count))

    # -------------------------------------------------------- the tests
    def test_contract_batches_commit_exactly_once(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(self._sink(make_sink), tmp_path)
        expected: list[int] = []
        for batch_id in range(3):
            self._run(runner, batch_id)
            expected += self.batch_ids(batch_id)
            assert_exactly_once(read_ids(), expected)

    def test_contract_replayed_committed_batch_writes_nothing(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(self._sink(make_sink), tmp_path)
        self._run(runner, 0)
        runner.restart()
        metrics = runner.run_batch(0, self.partitions(self.batch_ids(0), 2))
        assert metrics.outcome == "already-committed"
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_empty_batches_and_partitions(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(self._sink(make_sink), tmp_path)
        metrics = runner.run_batch(0, [[], []], schema=self.make_batch([1]).schema)
        assert metrics.transactions == 0
        ids = self.batch_ids(1)[:2]
        metrics = runner.run_batch(1, [[], [self.make_batch(ids)], []])
        assert metrics.transactions == 1
        assert_exactly_once(read_ids(), ids)

    def test_contract_driver_crash_at_each_step_then_restart(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any, step: str
    ) -> None:
        sink = self._sink(make_sink)
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)
        crash = runner.crash_at(step, 1)
        with pytest.raises(SimulatedCrash):
            self._run(runner, 1)
        assert crash.fired
        self.check_after_crash(step, read_ids())
        runner.restart()
        self._run(runner, 1)
        self._run(runner, 2)
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1) + self.batch_ids(2))

    def check_after_crash(self, step: str, visible: list[int]) -> None:
        """Check what a reader sees after a driver crash at ``step`` of batch 1."""

    def test_contract_task_failure_is_retried(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        rules = FakeTarget.in_memory()
        sink = with_faults(self._sink(make_sink), rules)
        runner = self._runner(sink, tmp_path, max_task_failures=3)
        injected = [
            rules.fail("write", batch_id=0, partition_id=1, attempt=0),
            rules.fail(self.finishing_hook, batch_id=0, partition_id=2, attempt=0),
            rules.fail(self.finishing_hook, batch_id=0, partition_id=2, attempt=1),
        ]
        self._run(runner, 0)
        assert [rules.fired(rule) for rule in injected] == [1, 1, 1], "a fault did not fire"
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_failed_batch_then_restart_is_exact(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        rules = FakeTarget.in_memory()
        sink = with_faults(self._sink(make_sink), rules)
        runner = self._runner(sink, tmp_path, max_task_failures=2)
        self._run(runner, 0)
        rule = rules.fail(self.finishing_hook, batch_id=1, partition_id=2, times=-1)
        with pytest.raises(Exception, match="injected fault"):
            self._run(runner, 1)
        assert rules.fired(rule) == 2, "both attempts of the partition should have failed"
        self.check_after_failed_batch(sink, runner, read_ids())
        rules.clear_faults()
        runner.restart()
        self._run(runner, 1)
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1))

    def check_after_failed_batch(
        self, sink: AnySinkLike, runner: LocalRunner, visible: list[int]
    ) -> None:
        """Check what a failed batch 1 (after a committed batch 0) left behind."""

    def test_contract_replay_with_another_partition_layout(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(self._sink(make_sink), tmp_path)
        crash = runner.crash_at(Step.PHASE1_DONE, 0)
        with pytest.raises(SimulatedCrash):
            self._run(runner, 0, count=3)
        assert crash.fired
        runner.restart()
        self.replay_in_another_layout(runner, read_ids)

    def replay_in_another_layout(self, runner: LocalRunner, read_ids: ReadIds) -> None:
        """Replay batch 0, crashed after phase 1 in 3 partitions, in 2 partitions."""
        raise NotImplementedError

    def test_contract_checkpoint_reset_is_a_new_identity(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(self._sink(make_sink), tmp_path)
        self._run(runner, 0)
        first_identity = runner.identity.token
        runner.reset_checkpoint()
        assert runner.identity.token != first_identity
        metrics = runner.run_batch(0, [[self.make_batch([5_000_000])]])
        assert metrics.outcome == "committed", "a reset made new data look committed"
        assert_exactly_once(read_ids(), [*self.batch_ids(0), 5_000_000])


class TwoPhaseSinkContract(SinkContract):
    """The contract of a coordinated sink (:class:`~twophase.TwoPhaseCommitSink`)."""

    protocol = CommitProtocol.COORDINATED
    steps = COORDINATED_STEPS
    finishing_hook = "pre_commit"

    def check_after_crash(self, step: str, visible: list[int]) -> None:
        """Before phase 2, prepared or not, nothing of batch 1 is visible."""
        if COORDINATED_STEPS.index(step) <= COORDINATED_STEPS.index(Step.DECIDED):
            assert_exactly_once(visible, self.batch_ids(0))

    def check_after_failed_batch(
        self, sink: AnySinkLike, runner: LocalRunner, visible: list[int]
    ) -> None:
        """All-or-nothing: nothing of the failed batch is visible or left prepared."""
        assert_exactly_once(visible, self.batch_ids(0))
        in_doubt = sink.list_in_doubt(RecoveryContext(runner.identity.token, 3))
        assert not in_doubt, f"a failed batch left prepared transactions behind: {in_doubt}"

    def replay_in_another_layout(self, runner: LocalRunner, read_ids: ReadIds) -> None:
        """Check that an undecided batch is aborted and rewritten whole, in any layout."""
        self._run(runner, 0, count=2)
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_orphan_of_dead_attempt_is_aborted(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        sink = self._sink(make_sink)
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)
        # A dead attempt of batch 1 left a prepared transaction behind.
        executor: Any = pickle.loads(pickle.dumps(sink))
        ctx = TaskContext(sink.name, runner.identity.token, 1, 0, 0, runner.log.epoch or 0)
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

    def test_contract_handles_survive_the_coordinator_log(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        runner = self._runner(self._sink(make_sink), tmp_path)
        crash = runner.crash_at(Step.DECIDED, 0)
        with pytest.raises(SimulatedCrash):
            self._run(runner, 0)
        assert crash.fired
        record = runner.log.read_record(0, "decision")
        assert record is not None
        assert record["transactions"], "the decision recorded no handle"
        json.loads(json.dumps(record, allow_nan=False))  # plain JSON: no pickle, no code
        sink = runner.sink
        assert isinstance(sink, TwoPhaseCommitSink)
        handles = runner.log.read_decision(0, sink.decode_handle)
        assert [h.transaction_id for h in handles] == record["transaction_ids"]
        for handle in handles:
            assert sink.decode_handle(sink.encode_handle(handle)) == handle
            assert pickle.loads(pickle.dumps(handle)) == handle  # it travels to the driver too
        assert read_ids() == [], "rows became visible before phase 2"
        runner.restart()
        self._run(runner, 0)
        assert_exactly_once(read_ids(), self.batch_ids(0))


class MarkerSinkContract(SinkContract):
    """The contract of a markers sink (:class:`~twophase.MarkerCommitSink`)."""

    protocol = CommitProtocol.MARKERS
    steps = MARKER_STEPS
    finishing_hook = "commit_with_marker"

    def replay_in_another_layout(self, runner: LocalRunner, read_ids: ReadIds) -> None:
        """Check that the replay is refused before writing; the same layout completes."""
        before = sorted(read_ids())
        assert before, "phase 1 of the markers protocol commits on the executors"
        with pytest.raises(NondeterministicBatchError):
            self._run(runner, 0, count=2)
        assert sorted(read_ids()) == before, "a refused replay wrote rows"
        self._run(runner, 0, count=3)
        assert_exactly_once(read_ids(), self.batch_ids(0))

    def test_contract_partition_committed_before_a_driver_crash_is_skipped(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        # The driver records its intent for batch 1 and dies; the executor of
        # partition 1 had already committed its rows and marker. The replay must
        # find the marker and write partition 1 no second time.
        sink = self._sink(make_sink)
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)
        crash = runner.crash_at(Step.INTENT_RECORDED, 1)
        parts = self.partitions(self.batch_ids(1))
        with pytest.raises(SimulatedCrash):
            runner.run_batch(1, parts)
        assert crash.fired
        executor: Any = pickle.loads(pickle.dumps(sink))
        ctx = TaskContext(sink.name, runner.identity.token, 1, 1, 0)
        txn = executor.begin_transaction(ctx)
        for batch in parts[1]:
            executor.write(txn, batch)
        fingerprint = fingerprint_batches(parts[1])
        executor.commit_with_marker(txn, Marker(ctx.identity, 1, 1, 0, fingerprint))
        assert fingerprint.count, "the contract layout left partition 1 empty"
        assert len(read_ids()) == len(self.batch_ids(0)) + fingerprint.count
        runner.restart()
        metrics = runner.run_batch(1, parts)
        assert metrics.skipped_partitions == 1
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1))

    def test_contract_a_zombie_committing_after_the_replay_check_is_not_written_twice(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        # The driver records its intent for batch 1 and dies. A task of that run lives on and
        # commits partition 1 only after the restarted driver checked the batch's markers: the
        # new attempt of partition 1 must find that marker before it commits, and step aside.
        sink = self._sink(make_sink)
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)
        old_epoch = runner.log.epoch or 0
        crash = runner.crash_at(Step.INTENT_RECORDED, 1)
        parts = self.partitions(self.batch_ids(1))
        with pytest.raises(SimulatedCrash):
            runner.run_batch(1, parts)
        assert crash.fired
        runner.restart()
        zombie: Any = pickle.loads(pickle.dumps(sink))
        committed: list[int] = []

        def resume_the_zombie(step: str, batch_id: int, index: int | None) -> None:
            if step != Step.INTENT_RECORDED or committed:
                return
            ctx = TaskContext(sink.name, runner.identity.token, 1, 1, 1, old_epoch)
            txn = zombie.begin_transaction(ctx)
            for batch in parts[1]:
                zombie.write(txn, batch)
            fingerprint = fingerprint_batches(parts[1])
            zombie.commit_with_marker(txn, Marker(ctx.identity, 1, 1, 1, fingerprint))
            committed.append(fingerprint.count)

        install_step_listener(runner.sink, resume_the_zombie)
        metrics = runner.run_batch(1, parts)
        assert committed, "the zombie did not commit partition 1"
        assert committed[0], "the contract layout left partition 1 empty"
        assert metrics.skipped_partitions == 1
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1))

    def test_contract_real_time_commits_in_steps_and_a_replay_skips_them(
        self, make_sink: MakeSink, read_ids: ReadIds, tmp_path: Any
    ) -> None:
        # Real-time mode (docs/realtime.md): one task commits a partition's rows two at a time,
        # each marker longer than the one before, and dies; its retry skips what was committed.
        sink = self._sink(make_sink)
        runner = self._runner(sink, tmp_path)
        self._run(runner, 0)  # opens the sink, as write_stream does before a real-time query
        rows = [
            batch.slice(i, 1)
            for part in self.partitions(self.batch_ids(1))
            for batch in part
            for i in range(batch.num_rows)
        ]
        assert len(rows) > 4, "the contract layout has too few rows"
        plan = TaskPlan(
            sink.name, runner.identity.token, 1, self.protocol, epoch=runner.log.epoch or 0
        )
        executor: Any = pickle.loads(pickle.dumps(sink))
        every_two = RealtimeSettings(commit_interval=3600.0, commit_rows=2)

        def dying() -> Any:
            yield from rows[:-1]
            raise RuntimeError("the executor died")

        with pytest.raises(RuntimeError, match="executor died"):
            run_realtime_partition(executor, plan, 0, 0, dying(), every_two)
        written = len(read_ids()) - len(self.batch_ids(0))
        assert 2 <= written < len(rows), f"{written} rows committed before the death"
        result = run_realtime_partition(executor, plan, 0, 1, iter(rows), every_two)
        assert result.skipped == written
        assert_exactly_once(read_ids(), self.batch_ids(0) + self.batch_ids(1))

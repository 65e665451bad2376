"""Run a sink through the real coordinator without Spark.

:class:`LocalRunner` plays Spark's part: it holds the batch's partitions in
memory, runs one participant per partition (each on a freshly unpickled copy of
the sink, as an executor would), retries failed tasks with a new attempt
number, and can crash the driver at any coordinator step and restart it.
Everything else -- the coordinator, its log, recovery, markers -- is the
production code.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from .._arrow import bool_array
from .._engine._coordinator import Coordinator
from .._engine._execution import StepListener
from .._engine._hooks import AnySink
from .._engine._participant import TaskPlan, TaskResult, run_participant
from .._engine._runtime import runtime_of
from .._fingerprint import fingerprint_batches
from .._log._coordinator_log import CoordinatorLog
from .._log._identity import SinkIdentity
from .._log._sink_log import open_sink_log
from .._metrics._batch import BatchMetrics
from .._sinks._marker_commit_sink import MarkerCommitSink
from .._sinks._two_phase_commit_sink import TwoPhaseCommitSink
from .._spark._serde import dumps, loads
from .._stores._store import open_store
from .._values import FINGERPRINT_VERSION, Fingerprint
from ._crash import CrashAt

__all__ = ["AnySinkLike", "LocalRunner", "PartitionsLike", "install_step_listener"]

#: Any sink the kit can drive: a subclass of either base class.
AnySinkLike = TwoPhaseCommitSink[Any, Any] | MarkerCommitSink[Any]

_log = logging.getLogger("twophase.testing")

#: Partitions of a batch: each a list of record batches, a table, or a list of row dicts.
PartitionsLike = Sequence[Sequence[pa.RecordBatch] | pa.Table | Sequence[Mapping[str, Any]]]


def _normalise(partitions: PartitionsLike, schema: pa.Schema | None) -> list[list[pa.RecordBatch]]:
    out: list[list[pa.RecordBatch]] = []
    for part in partitions:
        if isinstance(part, pa.Table):
            out.append(part.to_batches())
        elif len(part) and isinstance(part[0], pa.RecordBatch):
            out.append(list(part))
        elif len(part):
            out.append([pa.RecordBatch.from_pylist(list(part), schema=schema)])
        else:
            out.append([])
    return out


def _key_slot(key: tuple[Any, ...], partitions: int) -> int:
    digest = hashlib.blake2b(repr(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % partitions


class _LocalExecution:
    def __init__(
        self,
        batch_id: int,
        partitions: list[list[pa.RecordBatch]],
        schema: pa.Schema,
        max_task_failures: int,
    ) -> None:
        self._batch_id = batch_id
        self.partitions = partitions
        self._schema = schema
        self.max_task_failures = max_task_failures

    @property
    def batch_id(self) -> int:
        return self._batch_id

    def schema(self) -> pa.Schema:
        return self._schema

    def num_partitions(self) -> int:
        return len(self.partitions)

    def limit_partitions(self, limit: int) -> None:
        # Coalesce like Spark: adjacent partitions merged into `limit` groups.
        n = len(self.partitions)
        groups: list[list[pa.RecordBatch]] = [[] for _ in range(limit)]
        for index, part in enumerate(self.partitions):
            groups[index * limit // n].extend(part)
        self.partitions = groups

    def key_by(self, columns: tuple[str, ...], limit: int | None) -> None:
        # Like Spark: a stable hash of the key picks one of at most as many partitions
        # as there are (and at most `limit`); each keeps the batch's row order.
        n = len(self.partitions) if limit is None else min(len(self.partitions), limit)
        if n <= 1 and len(self.partitions) <= 1:
            return
        rows = [b for part in self.partitions for b in part if b.num_rows]
        groups: list[list[pa.RecordBatch]] = [[] for _ in range(max(1, n))]
        for batch in rows:
            keys = zip(*(batch.column(c).to_pylist() for c in columns), strict=True)
            slots = [_key_slot(key, len(groups)) for key in keys]
            for slot in sorted(set(slots)):
                mask = bool_array(np.array([s == slot for s in slots], dtype=bool))
                groups[slot].append(batch.filter(mask))
        self.partitions = groups

    def stage(self, location: str) -> None:
        complete = os.path.join(location, "_COMPLETE")
        if not os.path.exists(complete):
            shutil.rmtree(location, ignore_errors=True)
            os.makedirs(location)
            for index, part in enumerate(self.partitions):
                with ipc.new_file(
                    os.path.join(location, f"part-{index:05d}.arrow"), self._schema
                ) as w:
                    for batch in part:
                        w.write_batch(batch)
            with open(complete, "w") as fh:
                fh.write(str(len(self.partitions)))
        names = sorted(n for n in os.listdir(location) if n.endswith(".arrow"))
        staged = []
        for name in names:
            with ipc.open_file(os.path.join(location, name)) as reader:
                staged.append([reader.get_batch(i) for i in range(reader.num_record_batches)])
        self.partitions = staged

    def drop_staged(self, location: str) -> None:
        shutil.rmtree(location, ignore_errors=True)

    def fingerprints(self, version: int = FINGERPRINT_VERSION) -> dict[int, Fingerprint]:
        result = {}
        for index, part in enumerate(self.partitions):
            fp = fingerprint_batches(part, version)
            if fp.count:
                result[index] = fp
        return result

    def run_participants(self, sink: AnySink, plan: TaskPlan) -> list[TaskResult]:
        payload = dumps((sink, plan))  # what Spark ships to executors
        results = []
        for index, part in enumerate(self.partitions):
            attempt = 0
            while True:
                executor_sink, executor_plan = loads(payload)
                try:
                    result = run_participant(executor_sink, executor_plan, index, attempt, part)
                except Exception as exc:
                    attempt += 1
                    if attempt >= self.max_task_failures:
                        raise
                    _log.info(
                        "partition %d attempt %d failed (%s); retrying", index, attempt - 1, exc
                    )
                    continue
                results.append(loads(dumps(result)))  # back to the driver
                break
        return results

    def holds_state(self) -> bool:
        return False  # partitions held in memory: no engine state to commit

    def compute_without_writing(self) -> None:
        pass

    def close(self) -> None:
        pass


def _no_wait(_seconds: float) -> None:
    pass


#: The temporary log directories of this process's runners, removed at its exit.
_TEMP_DIRS: set[str] = set()


@atexit.register
def _remove_temp_dirs() -> None:
    for path in list(_TEMP_DIRS):
        shutil.rmtree(path, ignore_errors=True)
    _TEMP_DIRS.clear()


class LocalRunner:
    """Drive a sink through the production coordinator, without Spark.

    Parameters
    ----------
    sink
        The sink under test (the driver's copy; executors get pickled copies).
    log_dir
        Directory of the coordinator log (a "checkpoint"); when omitted, a
        temporary directory, removed by :meth:`close` or at the interpreter's
        exit (another runner may go on from it as a restarted query: it lives
        as long as the process).
    query_id
        The query id (a UUID); new when omitted. A runner with another query
        id behaves like a query started from a reset checkpoint.
    max_task_failures
        Attempts per task, like ``local[N, F]``: 1 means no task retry.
    fsync
        Make log writes durable (slower); off by default for fast tests.
    sleep
        Called with the backoff (seconds) between two attempts of a driver-side
        commit: a settable clock for tests. Default: no waiting at all.

    Examples
    --------
    >>> from twophase.testing import FakeSink, FakeTarget, LocalRunner
    >>> target = FakeTarget.in_memory()
    >>> runner = LocalRunner(FakeSink("demo", target))
    >>> runner.run_batch(0, [[{"id": 1}], [{"id": 2}]]).outcome
    'committed'
    >>> sorted(r["id"] for r in target.committed_rows())
    [1, 2]
    """

    def __init__(
        self,
        sink: AnySinkLike,
        log_dir: str | os.PathLike[str] | None = None,
        *,
        query_id: str | None = None,
        max_task_failures: int = 1,
        fsync: bool = False,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        if max_task_failures < 1:
            raise ValueError("max_task_failures must be >= 1")
        self.sink = sink
        self._tmp = None if log_dir is not None else tempfile.mkdtemp(prefix="twophase-log-")
        self.checkpoint = os.fspath(log_dir) if log_dir is not None else str(self._tmp)
        if self._tmp is not None:
            _TEMP_DIRS.add(self._tmp)  # test suites make many runners and close few
        self.query_id = query_id or str(uuid.uuid4())
        self.max_task_failures = max_task_failures
        self.fsync = fsync
        self.sleep: Callable[[float], None] = sleep if sleep is not None else _no_wait
        self.identity = SinkIdentity(sink.name, self.query_id)
        self._new_coordinator()

    def _new_coordinator(self) -> Coordinator:
        log = open_sink_log(
            self.checkpoint, self.identity, store=functools.partial(open_store, fsync=self.fsync)
        )
        context = self.identity.context(self.checkpoint, uuid.uuid4().hex)
        return runtime_of(self.sink).new_run(log, context, sleep=self.sleep)

    @property
    def coordinator(self) -> Coordinator:
        """Return the coordinator of the current run (the driver's protocol state)."""
        coordinator = runtime_of(self.sink).coordinator
        assert coordinator is not None
        return coordinator

    @property
    def log(self) -> CoordinatorLog:
        """Return the coordinator log of the current run."""
        return self.coordinator.log

    @property
    def metrics_history(self) -> list[BatchMetrics]:
        """Metrics of the batches run since the last (re)start, oldest first."""
        return list(runtime_of(self.sink).metrics)

    def run_batch(
        self,
        batch_id: int,
        partitions: PartitionsLike,
        *,
        schema: pa.Schema | None = None,
    ) -> BatchMetrics:
        """Run one micro-batch, as ``foreachBatch`` would.

        Parameters
        ----------
        batch_id
            The micro-batch id.
        partitions
            One entry per partition: record batches, a table or row dicts.
        schema
            The schema (inferred from the first non-empty partition if omitted).

        Returns
        -------
        BatchMetrics
            What the coordinator did.
        """
        parts = _normalise(partitions, schema)
        if schema is None:
            schema = next((p[0].schema for p in parts if p), pa.schema([]))
        execution = _LocalExecution(batch_id, parts, schema, self.max_task_failures)
        return runtime_of(self.sink).run_batch(self.sink, execution)

    def crash_at(self, step: str, batch_id: int | None = None, index: int | None = None) -> CrashAt:
        """Make the driver crash at a coordinator step (raises ``SimulatedCrash``).

        Parameters
        ----------
        step
            A coordinator step name.
        batch_id
            Only in this batch.
        index
            For ``committed_handle``: after that handle.

        Returns
        -------
        CrashAt
            The installed listener (``.fired`` tells whether it crashed).
        """
        listener = CrashAt(step, batch_id, index)
        install_step_listener(self.sink, listener)
        return listener

    def restart(self) -> None:
        """Simulate a driver restart: a fresh sink copy and coordinator, same log.

        The copy has no step listener and no metrics: a new driver process
        starts with nothing but the sink's settings and the log.
        """
        self.sink = loads(dumps(self.sink))
        self._new_coordinator()

    def reset_checkpoint(self) -> None:
        """Simulate a checkpoint reset: new query id, hence a new sink identity."""
        self.query_id = str(uuid.uuid4())
        self.identity = SinkIdentity(self.sink.name, self.query_id)
        self.restart()

    def close(self) -> None:
        """Remove the temporary log directory, if the runner made one."""
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            _TEMP_DIRS.discard(self._tmp)


def install_step_listener(sink: object, listener: StepListener | None) -> None:
    """Call ``listener(step, batch_id, index)`` at every coordinator step of ``sink``.

    Works for a sink run by :class:`LocalRunner` and for one run by Spark in
    this driver process (``foreachBatch``). The steps are
    :data:`COORDINATED_STEPS` and :data:`MARKER_STEPS`; ``index`` is the handle
    index for ``committed_handle``, else None. A listener that raises stops the
    driver right there, which is how :class:`CrashAt` simulates a crash.

    Parameters
    ----------
    sink
        The driver's sink object.
    listener
        The listener, or None to remove it.

    Examples
    --------
    >>> from twophase.testing import CrashAt, FakeSink, FakeTarget, install_step_listener
    >>> sink = FakeSink("demo", FakeTarget.in_memory())
    >>> install_step_listener(sink, CrashAt("decided", hard=True))  # SIGKILL after the decision
    """
    runtime_of(sink).listen(listener)

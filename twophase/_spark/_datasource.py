"""``writeStream.format(name)``: a coordinated sink as a PySpark Python data source.

PySpark's streaming data source writer gives the driver two moments, and the
executors one; twophase maps the coordinated protocol onto them:

- **planning** (the driver, before each micro-batch's tasks): Spark creates the
  data source and calls ``streamWriter`` for the writer it sends to the
  executors. Nothing of the batch runs yet, and the previous batch has been
  committed or aborted, so every transaction still prepared belongs to no live
  batch: the coordinator claims a new epoch and recovers there (commits what a
  recorded decision names, rolls back the rest) exactly as at the start of a
  ``foreachBatch`` run.
- **write** (executors, once per partition attempt): the participant prepares,
  and its result travels to the driver in the commit message, with the epoch.
  A batch the log already holds as committed (a restart after a crash past its
  decision: recovery committed it, and Spark replays its tasks) is read and not
  written.
- **commit** (the driver, in a Python process of its own): the coordinator
  adopts the epoch the batch was planned under (a newer claim means another run
  took over: refused), records the decision, commits and sweeps. **abort** rolls
  the batch back.

The markers protocol is refused: its tasks commit, and the replay check it needs before
they run cannot be made without the batch's rows (``docs/modes.md``).
"""

from __future__ import annotations

import logging
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from .._engine._coordinator import Coordinator
from .._engine._hooks import AnySink
from .._engine._participant import TaskPlan, TaskResult, run_participant
from .._engine._runtime import runtime_of
from .._log._identity import SinkIdentity, read_query_id
from .._log._sink_log import open_sink_log
from .._pyspark import arrow_schema
from .._stores._store import LogStore, open_store
from .._values import CommitProtocol
from ..errors import ConfigurationError

__all__ = ["PreparedMessage", "SinkBuilder", "TwoPhaseDataSource"]

_log = logging.getLogger("twophase.format")

#: Local properties Spark gives every task of a streaming micro-batch.
_QUERY_ID_KEY = "sql.streaming.queryId"
_BATCH_ID_KEY = "streaming.sql.batchId"
#: The PySpark module that runs a streaming writer's commit or abort on the driver.
_COMMIT_RUNNER = "pyspark.sql.worker.python_streaming_sink_runner"

#: Makes a sink from a writer's string options.
SinkBuilder = Callable[[Mapping[str, str]], AnySink]


@dataclass(frozen=True)
class PreparedMessage(WriterCommitMessage):
    """What one write task sends to the driver's ``commit``. Picklable.

    Attributes
    ----------
    result
        The participant's result (the prepared handle).
    epoch
        The log epoch the batch was planned under.
    """

    result: TaskResult
    epoch: int


def _planned_batch(checkpoint: LogStore) -> int:
    """Return the batch Spark is planning: the newest entry of the checkpoint's offset log."""
    names = checkpoint.list("offsets")
    return max((int(n) for n in names if n.isdigit()), default=0)


def _in_commit_runner() -> bool:
    """Tell whether Spark calls ``streamWriter`` to commit or abort (not to plan a batch)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == _COMMIT_RUNNER:
            return True
        frame = frame.f_back
    return False


class _Writer(DataSourceStreamArrowWriter):
    def __init__(
        self,
        sink: AnySink,
        checkpoint: str,
        query_id: str,
        epoch: int | None,
        committed: int | None = None,
    ) -> None:
        self.sink = sink
        self.checkpoint = checkpoint
        self.query_id = query_id
        self.epoch = epoch
        #: The planned batch when the log already holds it as committed: Spark replays its tasks
        #: (its own commit log lags), which must write nothing -- their rows are in the target,
        #: and written again they would collide with them on a key at every attempt.
        self.committed = committed

    # -- executors
    def write(self, iterator: Iterator[pa.RecordBatch]) -> PreparedMessage:
        from pyspark import TaskContext as SparkTaskContext

        task = SparkTaskContext.get()
        assert task is not None, "write runs in a Spark task"
        assert self.epoch is not None, "the writer was planned without an epoch"
        batch = task.getLocalProperty(_BATCH_ID_KEY)
        if batch is None:
            raise ConfigurationError(
                f"the task has no micro-batch id ({_BATCH_ID_KEY}): twophase formats run in "
                "micro-batch streaming queries only",
                sink=self.sink.name,
                setting="trigger",
            )
        batch_id = int(batch)
        if batch_id == self.committed:
            for _ in iterator:  # computed (a stateful query commits its state), not written
                pass
            skipped = TaskResult(task.partitionId(), task.attemptNumber(), 0, skipped=True)
            return PreparedMessage(skipped, self.epoch)
        identity = SinkIdentity(self.sink.name, self.query_id).token
        plan = TaskPlan(
            self.sink.name, identity, batch_id, CommitProtocol.COORDINATED, epoch=self.epoch
        )
        result = run_participant(
            self.sink, plan, task.partitionId(), task.attemptNumber(), iterator
        )
        return PreparedMessage(result, self.epoch)

    # -- driver (commit runner)
    def _coordinator(self, epoch: int | None) -> Coordinator:
        identity = SinkIdentity(self.sink.name, self.query_id)
        log = open_sink_log(self.checkpoint, identity)
        log.load()
        log.epoch = epoch
        context = identity.context(self.checkpoint, "commit")
        self.sink.open(context)
        return Coordinator(log, context, on_step=runtime_of(self.sink).on_step)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        prepared = [m for m in messages if isinstance(m, PreparedMessage)]
        epochs = {m.epoch for m in prepared}
        if len(epochs) > 1:
            raise ConfigurationError(
                f"the tasks of batch {batchId} were planned under several epochs {sorted(epochs)}",
                sink=self.sink.name,
                batch_id=batchId,
            )
        if not prepared:  # no task ran: nothing prepared, nothing to decide
            _log.info("sink %s: batch %d ran no write task", self.sink.name, batchId)
            return
        coordinator = self._coordinator(epochs.pop())
        coordinator.commit_prepared(self.sink, batchId, [m.result for m in prepared])

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        prepared = [m for m in messages if isinstance(m, PreparedMessage)]
        for message in prepared:
            if message.result.handle is not None:
                self.sink.recover_and_abort(message.result.handle)
        _log.info(
            "sink %s: batch %d failed; rolled back %d prepared transaction(s)",
            self.sink.name,
            batchId,
            len(prepared),
        )


class TwoPhaseDataSource(DataSource):
    """A twophase sink of the coordinated protocol as a streaming Python data source.

    Runs on the driver (creation, ``streamWriter``, ``commit``, ``abort``) and
    is pickled to the executors with its writer. Build one with
    :func:`data_source`; options are strings, passed to the builder (except
    ``checkpointLocation``, which the data source keeps).
    """

    _format_name = "twophase"
    _build: SinkBuilder

    @classmethod
    def name(cls) -> str:
        """Return the format name."""
        return cls._format_name

    def __init__(self, options: MutableMapping[str, str]) -> None:
        super().__init__(options)
        given = {str(k): str(v) for k, v in options.items()}
        self.checkpoint = next(
            (v for k, v in given.items() if k.lower() == "checkpointlocation"), None
        )
        self.sink_options = {k: v for k, v in given.items() if k.lower() != "checkpointlocation"}
        self._sink: AnySink | None = None
        if self.sink.protocol is not CommitProtocol.COORDINATED:
            raise ConfigurationError(
                f"format({self._format_name!r}) runs sinks of the coordinated protocol only; "
                "this sink uses the markers protocol, whose replay check must run on the driver "
                "before the write tasks with the batch's rows, which a data source writer never "
                "has. Use "
                "foreachBatch(sink) (twophase.write_stream) for it; see docs/modes.md",
                sink=self.sink.name,
                setting="protocol",
            )
        if self.sink.key_by:
            # The user set an option (a connector's mode=upsert or cdc), not key_by: name it.
            mode = next((k for k in self.sink_options if k.lower() == "mode"), None)
            cause = f"{mode}={self.sink_options[mode]!r} routes" if mode else "this sink routes"
            raise ConfigurationError(
                f"format({self._format_name!r}) cannot run a sink that routes the rows of a key "
                f"to one partition ({cause} by key_by={list(self.sink.key_by)}): a data source "
                "writer gets the partitions Spark planned, and two transactions merging one key "
                "would lose changes. Use foreachBatch(sink) (twophase.write_stream), which routes "
                "by key; see docs/modes.md",
                sink=self.sink.name,
                setting=mode or "key_by",
            )
        if not self.checkpoint:
            raise ConfigurationError(
                "format(...) needs the query's checkpoint location: set "
                ".option('checkpointLocation', ...) on the writer",
                sink=self.sink.name,
                setting="checkpointLocation",
            )

    @property
    def sink(self) -> AnySink:
        """Return the sink, built from the options in this process on first use."""
        if self._sink is None:
            self._sink = type(self)._build(self.sink_options)
        return self._sink

    def __getstate__(self) -> dict[str, Any]:
        # Spark pickles the data source to other Python workers: each builds its own sink
        # (the builder may install process-local state, as the test kit's step listeners).
        return {**self.__dict__, "_sink": None}

    def streamWriter(  # noqa: N802 -- PySpark's name
        self, schema: StructType, overwrite: bool
    ) -> DataSourceStreamWriter:
        """Return the writer; before a batch's tasks, recover and claim an epoch first."""
        assert self.checkpoint is not None
        if overwrite:
            raise ConfigurationError(
                "outputMode('complete') rewrites the whole result every batch; twophase "
                "sinks append (or upsert): use outputMode('append') or ('update')",
                sink=self.sink.name,
                setting="outputMode",
            )
        checkpoint = open_store(self.checkpoint)
        query_id = read_query_id(checkpoint)
        if query_id is None:
            raise ConfigurationError(
                f"no query metadata in checkpointLocation={self.checkpoint!r}",
                sink=self.sink.name,
                setting="checkpointLocation",
            )
        if _in_commit_runner():
            return _Writer(self.sink, self.checkpoint, query_id, None)
        identity = SinkIdentity(self.sink.name, query_id)
        log = open_sink_log(self.checkpoint, identity)
        context = identity.context(self.checkpoint, uuid.uuid4().hex)
        batch_id = _planned_batch(checkpoint)
        coordinator = Coordinator(log, context, on_step=runtime_of(self.sink).on_step)
        coordinator.plan(self.sink, batch_id)
        if log.state.is_committed(batch_id):
            _log.info(
                "sink %s: batch %d is already committed; its replayed tasks write nothing",
                self.sink.name,
                batch_id,
            )
            return _Writer(self.sink, self.checkpoint, query_id, log.epoch, committed=batch_id)
        self.sink.check_schema(arrow_schema(schema), batch_id)
        return _Writer(self.sink, self.checkpoint, query_id, log.epoch)

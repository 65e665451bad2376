"""Where an error happened, shared by the connectors: the sink, the batch, the partition.

Every error a connector raises names the sink and, when known, the batch and
the partition (:mod:`twophase.errors`). :class:`ErrorContext` carries them from
the hook that knows them down to the call that fails; a connector adds what
else its messages need in a subclass (Kafka's topic and transactional id).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TypedDict

from twophase import TaskContext, TransactionHandle

__all__ = ["ErrorContext", "ErrorKeywords", "keywords_of"]


class ErrorKeywords(TypedDict, total=False):
    """The context keywords of a :class:`twophase.errors.TwoPhaseError` constructor."""

    sink: str
    batch_id: int | None
    partition_id: int | None


@dataclass(frozen=True)
class ErrorContext:
    """Where an error happened, so that the raised error can name it (picklable).

    Attributes
    ----------
    sink
        The sink name.
    batch_id
        The micro-batch id, when known.
    partition_id
        The Spark partition (participant slot), when known.

    Examples
    --------
    >>> from twophase.errors import ConfigurationError
    >>> where = ErrorContext("orders", batch_id=4)
    >>> str(ConfigurationError("no such table", setting="table", **where.keywords()))
    "[sink='orders', batch=4, setting='table'] no such table"
    """

    sink: str
    batch_id: int | None = None
    partition_id: int | None = None

    @classmethod
    def of_task(cls, task: TaskContext) -> ErrorContext:
        """Return the context of a task: its sink, batch and partition."""
        return cls(task.sink_name, task.batch_id, task.partition_id)

    @classmethod
    def of_handle(cls, sink: str, handle: TransactionHandle) -> ErrorContext:
        """Return the context of a partition's transaction known by its handle."""
        return cls(sink, handle.batch_id, handle.partition_id)

    def for_batch(self, batch_id: int, partition_id: int | None = None) -> ErrorContext:
        """Return this context narrowed to a batch (and a partition of it)."""
        return dataclasses.replace(self, batch_id=batch_id, partition_id=partition_id)

    def keywords(self) -> ErrorKeywords:
        """Return the keywords for a :mod:`twophase.errors` constructor or ``with_context``."""
        return {"sink": self.sink, "batch_id": self.batch_id, "partition_id": self.partition_id}


def keywords_of(where: ErrorContext | None) -> ErrorKeywords:
    """Return the error keywords of ``where``; none when the context is unknown (None)."""
    return ErrorKeywords() if where is None else where.keywords()

"""Simulated driver crashes at coordinator steps."""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

__all__ = ["CrashAt", "SimulatedCrash", "SimulatedCrashError"]


class SimulatedCrash(BaseException):
    """Raised by :class:`CrashAt` to stop the driver mid-protocol.

    A ``BaseException`` so that nothing in the framework catches it: the
    coordinator stops exactly where a real crash would stop it.
    """


class SimulatedCrashError(RuntimeError):
    """The ordinary-exception flavour of :class:`SimulatedCrash`, for code run by Spark.

    Spark's ``foreachBatch`` bridge forwards only ordinary exceptions to the
    JVM, so inside a real streaming query the crash fails the query with this.
    """


@dataclass
class CrashAt:
    """A step listener that crashes the driver at one coordinator step.

    Parameters
    ----------
    step
        A step of :data:`twophase.COORDINATED_STEPS` or
        :data:`twophase.MARKER_STEPS`.
    batch_id
        Crash only in this batch (None: the first time the step is reached).
    index
        For ``committed_handle``: crash after the commit of this handle index.
    hard
        Kill the process with SIGKILL instead of raising
        :class:`SimulatedCrash` (for subprocess tests of a real driver).
    as_exception
        Raise :class:`SimulatedCrashError` (an ``Exception``) instead: use it
        inside a Spark streaming query, where it fails the query.
    """

    step: str
    batch_id: int | None = None
    index: int | None = None
    hard: bool = False
    as_exception: bool = False
    fired: bool = False

    def __call__(self, step: str, batch_id: int, index: int | None) -> None:
        """Crash if this is the configured step (the coordinator calls it at every step)."""
        if self.fired or step != self.step:
            return
        if self.batch_id is not None and batch_id != self.batch_id:
            return
        if self.index is not None and index != self.index:
            return
        self.fired = True
        if self.hard:
            os.kill(os.getpid(), signal.SIGKILL)
        message = f"simulated driver crash at {step} of batch {batch_id}"
        if self.as_exception:
            raise SimulatedCrashError(message)
        raise SimulatedCrash(message)

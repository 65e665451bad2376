"""The test kit: unit-test exactly-once sinks with fake transactions.

What users get (and what twophase's own tests use):

* :class:`FakeTarget` -- a transactional target (in memory, or in a directory
  shared with Spark executors) with prepare/commit/rollback, markers and
  fault rules that make any hook fail for a chosen batch/partition/attempt;
* :class:`FakeSink` (protocol A) and :class:`FakeMarkerSink` (protocol B);
* :class:`LocalRunner` -- the production coordinator without Spark, with task
  retries, simulated driver crashes at any step (:class:`CrashAt`) and
  restarts;
* :func:`assert_exactly_once`;
* :class:`SinkContract` -- a reusable pytest suite any sink can run to prove
  the guarantees (see ``docs/testing.md``).
"""

from typing import TYPE_CHECKING, Any

from .._coordinator import COORDINATED_STEPS, MARKER_STEPS
from ._assertions import assert_exactly_once
from ._crash import CrashAt, SimulatedCrash, SimulatedCrashError
from ._fake import FakeMarkerSink, FakeSink, FakeTransaction, parse_transaction_id
from ._faults import with_faults
from ._local import LocalRunner
from ._target import FakeTarget, FaultRule

if TYPE_CHECKING:
    from ._contract import SinkContract

__all__ = [
    "COORDINATED_STEPS",
    "MARKER_STEPS",
    "CrashAt",
    "FakeMarkerSink",
    "FakeSink",
    "FakeTarget",
    "FakeTransaction",
    "FaultRule",
    "LocalRunner",
    "SimulatedCrash",
    "SimulatedCrashError",
    "SinkContract",
    "assert_exactly_once",
    "parse_transaction_id",
    "with_faults",
]


def __getattr__(name: str) -> Any:
    # SinkContract needs pytest: import it only when asked for.
    if name == "SinkContract":
        from ._contract import SinkContract

        return SinkContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

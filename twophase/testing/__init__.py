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

from .._coordinator import COORDINATED_STEPS, MARKER_STEPS
from ._assertions import assert_exactly_once
from ._crash import CrashAt, SimulatedCrash
from ._fake import FakeMarkerSink, FakeSink, FakeTransaction, parse_transaction_id
from ._local import LocalRunner
from ._target import FakeTarget, FaultRule

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
    "assert_exactly_once",
    "parse_transaction_id",
]

"""The test kit: unit-test exactly-once sinks with fake transactions.

What users get (and what twophase's own tests use):

* :class:`FakeTarget` -- a transactional target (in memory, or in a directory
  shared with Spark executors) with prepare/commit/rollback, markers and
  fault rules that make any hook fail for a chosen batch/partition/attempt;
* :class:`FakeSink` (the coordinated protocol) and :class:`FakeMarkerSink` (the markers
  protocol);
* :class:`LocalRunner` -- the production coordinator without Spark, with task
  retries, simulated driver crashes at any step (:class:`CrashAt`) and
  restarts;
* :func:`assert_exactly_once`, and :func:`assert_exactly_once_or_dead_lettered`
  for a sink that sets refused rows aside (:meth:`FakeTarget.reject` makes the
  fake target refuse rows);
* :func:`install_step_listener` -- be called at every coordinator step (a
  crash point), for a sink run by :class:`LocalRunner` or by Spark;
* :class:`TwoPhaseSinkContract` and :class:`MarkerSinkContract` (both
  :class:`SinkContract`) -- reusable pytest suites any sink can run to prove
  the guarantees, and :class:`DeadLetterContract` for a sink with dead letters
  (see ``docs/testing.md``).
"""

from typing import TYPE_CHECKING, Any

from .._engine._steps import COORDINATED_STEPS, MARKER_STEPS
from ._assertions import assert_exactly_once, assert_exactly_once_or_dead_lettered
from ._crash import CrashAt, SimulatedCrash, SimulatedCrashError
from ._fake import FakeMarkerSink, FakeSink, FakeTransaction
from ._fault_rules import FaultRule
from ._faults import with_faults
from ._local import LocalRunner, install_step_listener
from ._row_rules import RejectRule
from ._target import FakeTarget

if TYPE_CHECKING:
    from ._contract import MarkerSinkContract, SinkContract, TwoPhaseSinkContract
    from ._dead_letter_contract import DeadLetterContract

__all__ = [
    "COORDINATED_STEPS",
    "MARKER_STEPS",
    "CrashAt",
    "DeadLetterContract",
    "FakeMarkerSink",
    "FakeSink",
    "FakeTarget",
    "FakeTransaction",
    "FaultRule",
    "LocalRunner",
    "MarkerSinkContract",
    "RejectRule",
    "SimulatedCrash",
    "SimulatedCrashError",
    "SinkContract",
    "TwoPhaseSinkContract",
    "assert_exactly_once",
    "assert_exactly_once_or_dead_lettered",
    "install_step_listener",
    "with_faults",
]

_CONTRACTS = ("MarkerSinkContract", "SinkContract", "TwoPhaseSinkContract")


def __getattr__(name: str) -> Any:
    # The contracts need pytest: import them only when asked for.
    if name in _CONTRACTS:
        from . import _contract

        return getattr(_contract, name)
    if name == "DeadLetterContract":
        from . import _dead_letter_contract

        return _dead_letter_contract.DeadLetterContract
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

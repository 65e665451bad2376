"""The coordinator's step names, defined once: where listeners are called and crashes simulated.

The names are the test kit's crash points (``twophase.testing.COORDINATED_STEPS`` and
``MARKER_STEPS``, :class:`twophase.testing.CrashAt`), the chaos harness's fault points and the
upgrade test's: they are strings, and they do not change between releases.
"""

from __future__ import annotations

from typing import Final

__all__ = ["COORDINATED_STEPS", "MARKER_STEPS", "Step"]


class Step:
    """The name of each step, as a constant (a namespace: the values are plain strings)."""

    #: A batch starts on the driver, before anything of it is done.
    START: Final = "start"
    #: Recovery of earlier batches is finished.
    RECOVERED: Final = "recovered"
    #: Markers protocol: the batch's rows are staged for the participants.
    STAGED: Final = "staged"
    #: Markers protocol: the batch's intent is in the log.
    INTENT_RECORDED: Final = "intent_recorded"
    #: Every partition finished phase 1 (coordinated: prepared; markers: committed with markers).
    PHASE1_DONE: Final = "phase1_done"
    #: Coordinated protocol: the commit decision is in the log (the commit point).
    DECIDED: Final = "decided"
    #: Coordinated protocol: one handle is committed in phase 2 (the listener gets its index).
    COMMITTED_HANDLE: Final = "committed_handle"
    #: Coordinated protocol: every handle is committed.
    PHASE2_DONE: Final = "phase2_done"
    #: The batch is recorded as committed in the log.
    RECORDED_COMMITTED: Final = "recorded_committed"


#: Driver-side steps of the coordinated protocol, in order, at which a listener is called
#: (and at which the test kit can simulate a crash).
COORDINATED_STEPS: Final[tuple[str, ...]] = (
    Step.START,
    Step.RECOVERED,
    Step.PHASE1_DONE,
    Step.DECIDED,
    Step.COMMITTED_HANDLE,
    Step.PHASE2_DONE,
    Step.RECORDED_COMMITTED,
)
#: Driver-side steps of the markers protocol, in order.
MARKER_STEPS: Final[tuple[str, ...]] = (
    Step.START,
    Step.RECOVERED,
    Step.STAGED,
    Step.INTENT_RECORDED,
    Step.PHASE1_DONE,
    Step.RECORDED_COMMITTED,
)

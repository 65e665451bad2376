"""Fencing stale attempts and sweeping their orphans: the coordinated protocol's zombie defence.

A zombie is an attempt Spark gave up on that still runs: it may prepare a
transaction after its batch's orphans were swept. After every batch (and at the
start of a run, for every attempt of the earlier runs) the sink fences the
attempts up to that batch, so that they can no longer prepare; a transaction a
zombie prepared before the fence is an orphan, which holds no decision and is
rolled back by a sweep, and the fence is tried again. See "Zombie attempts" in
``docs/guarantees.md``.

A collaborator of the coordinated protocol (``_engine/_coordinated_protocol.py``), which
builds one over the run (``_engine/_run.py``).
"""

from __future__ import annotations

import logging

from .._metrics import _otel
from .._values import TransactionHandle
from ..errors import RetriableError
from ._hooks import AnySink, as_coordinated
from ._run import Run

__all__ = ["FencingLoop"]

_log = logging.getLogger("twophase.coordinator")

#: How often a fence held up by a zombie's prepared transaction is retried after a sweep.
_FENCE_TRIES = 3
#: A batch id above every real one: a sweep at recovery covers every batch.
_ANY_BATCH = 2**62


class FencingLoop:
    """Sweeps of orphans and the fence of stale attempts, with their retries.

    Parameters
    ----------
    run
        The run whose log, identity and retries the sweeps and fences use.
    """

    def __init__(self, run: Run) -> None:
        self._run = run

    def sweep(self, sink: AnySink, batch_id: int, keep: frozenset[str] = frozenset()) -> int:
        """Roll back the orphans of ``batch_id`` (all in doubt but ``keep``) and of earlier batches.

        An earlier batch's orphan is a zombie attempt that prepared after that
        batch's own sweep. A batch whose decision is still pending is never
        touched: its prepared transactions are committed by recovery.
        """
        pending = set(self._run.log.state.pending_decisions()) - {batch_id}
        aborted = zombies = 0
        left: list[str] = []
        for handle in sink.list_in_doubt(self._run.recovery_context()):
            if handle.batch_id > batch_id or handle.batch_id in pending:
                left.append(handle.transaction_id)
                continue
            if handle.transaction_id not in keep:
                if handle.batch_id < batch_id:
                    zombies += 1
                    _log.warning(
                        "sink %s: rolling back %s, prepared late by an attempt of batch %d "
                        "that Spark had given up on (a zombie)",
                        sink.name,
                        handle.transaction_id,
                        handle.batch_id,
                    )
                sink.recover_and_abort(handle)
                aborted += 1
        _otel.record_zombies(sink, zombies)
        _otel.observe_in_doubt(sink, left)
        return aborted

    def fence(self, sink: AnySink, batch_id: int, keep: frozenset[str] = frozenset()) -> None:
        """Make every attempt up to ``batch_id`` (-1: of earlier runs) unable to prepare.

        A zombie that prepared before the fence holds it up: its transaction is
        an orphan, rolled back by a sweep, and the fence is tried again.
        """
        coordinated = as_coordinated(sink)
        epoch = self._run.log.epoch or 0
        fenced = [False]

        def fence() -> None:
            fenced[0] = coordinated.fence_attempts(self._run.identity, epoch, batch_id)

        for _ in range(_FENCE_TRIES):
            self._run.retrying(sink, fence, [0])
            if fenced[0]:
                return
            swept = self.sweep(sink, batch_id if batch_id >= 0 else _ANY_BATCH, keep)
            _log.warning(
                "sink %s: a transaction prepared by a stale attempt held up the fence after "
                "batch %d; rolled back %d orphan(s), fencing again",
                sink.name,
                batch_id,
                swept,
            )
        _log.warning(
            "sink %s: could not fence stale attempts after batch %d (%d tries); the next "
            "batch's sweep or the next start's recovery rolls back what they prepare",
            sink.name,
            batch_id,
            _FENCE_TRIES,
        )

    def fence_after(self, sink: AnySink, batch_id: int, keep: frozenset[str]) -> None:
        """Fence after a finished batch; a failure only postpones it (logged)."""
        try:
            self.fence(sink, batch_id, keep)
        except Exception as exc:
            _log.warning(
                "sink %s: could not fence stale attempts after batch %d (%s); the next "
                "batch's sweep or the next start's recovery rolls back what they prepare",
                sink.name,
                batch_id,
                exc,
            )

    def sweep_after_commit(
        self,
        sink: AnySink,
        batch_id: int,
        handles: list[TransactionHandle],
    ) -> int:
        """Sweep the orphans of a committed batch, retried; a target still away skips it.

        The batch is committed whatever the sweep does, and its orphans hold no
        decision: the next batch's sweep, or the next start's recovery, rolls
        them back. So a target that stays unreachable through the retry policy
        only postpones the sweep instead of failing a committed batch.
        """
        keep = frozenset(h.transaction_id for h in handles)
        swept = [0]

        def sweep() -> None:
            swept[0] = self.sweep(sink, batch_id, keep)

        try:
            self._run.retrying(sink, sweep, [0])
        except RetriableError as exc:
            _log.warning(
                "sink %s: batch %d is committed, but its orphans could not be swept (%s); "
                "the next batch's sweep or the next start's recovery rolls them back",
                sink.name,
                batch_id,
                exc,
            )
        return swept[0]

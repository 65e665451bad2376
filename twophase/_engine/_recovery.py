"""Recovery at the start of a run: finish what the log decided, roll back the rest.

Runs on the driver, once per run of a query (``Coordinator.start``), before any
task of the run: batches whose commit decision is recorded are committed from
it; every other transaction still in doubt holds no decision and is rolled
back. A run never switches protocols over an unfinished batch.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from .._log._coordinator_log import CoordinatorLog
from .._metrics import _otel
from .._values import CommitProtocol, RecoveryContext
from ..errors import ConfigurationError
from ._hooks import AnySink, as_coordinated
from ._lost import lost_batch

__all__ = ["recover"]

_log = logging.getLogger("twophase.coordinator")

Retrying = Callable[[Callable[[], None], list[int]], None]


def check_protocol_unchanged(log: CoordinatorLog, sink: AnySink) -> None:
    """Refuse to switch protocols while a batch of the other protocol is unfinished.

    Parameters
    ----------
    log
        The loaded coordinator log.
    sink
        The sink of this run.
    """
    state = log.state
    pending = state.pending_decisions()
    marker_started = [b for b in state.unfinished() if b not in state.decided]
    if sink.protocol is CommitProtocol.COORDINATED:
        foreign, needed = marker_started, CommitProtocol.MARKERS
    else:
        foreign, needed = pending, CommitProtocol.COORDINATED
    if foreign:
        raise ConfigurationError(
            f"batch {foreign[0]} was started with the {needed.value} protocol and is not "
            f"finished, but this sink uses the {sink.protocol.value} protocol. Switching "
            "protocols under one checkpoint would lose or duplicate that batch: restart the "
            f"query once with a {needed.value} sink to finish it (e.g. pin the connector's "
            "protocol), then switch",
            sink=sink.name,
            batch_id=foreign[0],
            setting="protocol",
        )


def recover(
    log: CoordinatorLog,
    sink: AnySink,
    context: Callable[[], RecoveryContext],
    retrying: Retrying,
    replaying: int,
) -> tuple[int, int]:
    """Commit every recorded decision's transactions, then roll back what is in doubt.

    A decided batch whose transactions the target lost is written again when
    Spark is replaying it (:func:`lost_batch`).

    Parameters
    ----------
    log
        The loaded, claimed coordinator log.
    sink
        The sink.
    context
        Returns the recovery context (identity, slots, unfinished batches).
    retrying
        Calls a function under the sink's retry policy, counting retries.
    replaying
        The batch the run starts with (Spark replays an unfinished batch first).

    Returns
    -------
    tuple of int
        Transactions committed, transactions rolled back.
    """
    check_protocol_unchanged(log, sink)
    state = log.state
    retries = [0]
    committed = aborted = 0
    for batch_id in state.pending_decisions():
        coordinated = as_coordinated(sink)
        handles = log.read_decision(batch_id, coordinated.decode_handle)
        rolled_back = lost_batch(log, coordinated, batch_id, handles, replaying, retrying)
        if rolled_back is not None:  # lost, and written again by this run
            aborted += rolled_back
            continue
        _log.info(
            "sink %s: finishing batch %d from its recorded decision (%d handles)",
            sink.name,
            batch_id,
            len(handles),
        )
        for handle in handles:
            retrying(functools.partial(coordinated.recover_and_commit, handle), retries)
            committed += 1
        log.record_committed(batch_id, {"recovered": True, "handles": len(handles)})
        # Its rows become visible now: counted in the metrics here (the decision holds them).
        decision = log.read_record(batch_id, "decision") or {}
        if isinstance(rows := decision.get("rows"), int):
            _otel.record_recovered_rows(sink, rows)
        if isinstance(dead := decision.get("dead_lettered"), dict):  # 0.3.0 on, optional
            _otel.record_recovered_dead_letters(sink, dead)
    if sink.protocol is not CommitProtocol.COORDINATED and not state.unfinished():
        return committed, 0
    in_doubt = list(sink.list_in_doubt(context()))
    for handle in in_doubt:
        _log.info(
            "sink %s: aborting in-doubt transaction %s (no commit decision names it)",
            sink.name,
            getattr(handle, "transaction_id", handle),
        )
    workers = max(1, min(int(sink.recovery_concurrency), len(in_doubt)))
    if workers == 1:
        for handle in in_doubt:
            sink.recover_and_abort(handle)
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="twophase-recovery") as pool:
            # list(): wait for every call; the first failure is raised after all ended.
            list(pool.map(sink.recover_and_abort, in_doubt))
    return committed, aborted + len(in_doubt)

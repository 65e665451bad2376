"""A decided batch whose transactions the target lost: written again, or refused by name.

A commit decision names prepared transactions; recovery commits them. After a
failover to a replica that had not received them (asynchronous replication),
or a rollback by hand, the target holds some of them no more, and committing
is impossible. Reporting the batch committed would lose its rows silently.

Before committing, recovery asks the sink what the target holds of each
transaction (``transaction_status``). When one is lost and none committed,
and Spark is replaying that very batch, its rows are still in the source's
hands: the transactions still prepared are rolled back, the loss is recorded
(``batches/<id>.lost.json``) and the decision withdrawn, and the batch runs
again like any undecided one -- exact. A batch partly committed and partly
lost, or lost after Spark moved past it, cannot be made whole by the sink:
:class:`~twophase.errors.FatalError` names the batch and the lost partitions.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from .._log._coordinator_log import CoordinatorLog
from .._values import TransactionStatus
from ..errors import FatalError, RetriableError
from ._hooks import CoordinatedHooks

__all__ = ["lost_batch"]

_log = logging.getLogger("twophase.coordinator")

Retrying = Callable[[Callable[[], None], list[int]], None]

_CAUSE = (
    "The likely cause is a failover to a replica that had not received them (asynchronous "
    "replication), or a rollback by hand."
)


def _statuses(
    sink: CoordinatedHooks, handles: Sequence[Any], retrying: Retrying
) -> list[TransactionStatus | None]:
    found: list[TransactionStatus | None] = []
    for handle in handles:

        def ask(handle: Any = handle) -> None:
            found.append(sink.transaction_status(handle))

        retrying(ask, [0])
    return found


def _partitions(handles: Sequence[Any], statuses: Sequence[Any], wanted: Any) -> list[int]:
    return sorted(h.partition_id for h, s in zip(handles, statuses, strict=True) if s is wanted)


def lost_batch(
    log: CoordinatorLog,
    sink: CoordinatedHooks,
    batch_id: int,
    handles: Sequence[Any],
    replaying: int,
    retrying: Retrying,
) -> int | None:
    """Settle a decided batch of which the target lost a transaction.

    Parameters
    ----------
    log
        The claimed coordinator log.
    sink
        The sink.
    batch_id
        A batch with a recorded decision, not recorded committed.
    handles
        The decision's handles.
    replaying
        The batch Spark runs first in this run.
    retrying
        Calls a function under the sink's retry policy.

    Returns
    -------
    int or None
        None when nothing is lost (or the sink cannot tell): commit as usual.
        Else the number of transactions rolled back; the decision is withdrawn
        and the batch runs again.

    Raises
    ------
    FatalError
        Lost, and partly committed or not being replayed.
    """
    statuses = _statuses(sink, handles, retrying)
    if None in statuses or TransactionStatus.LOST not in statuses:
        return None
    lost = _partitions(handles, statuses, TransactionStatus.LOST)
    context: dict[str, Any] = {"sink": sink.name, "batch_id": batch_id}
    if TransactionStatus.COMMITTED in statuses:
        committed = _partitions(handles, statuses, TransactionStatus.COMMITTED)
        raise FatalError(
            f"batch {batch_id} was decided, and the target lost the prepared transactions of "
            f"partitions {lost} while those of partitions {committed} committed: the batch is "
            f"partly visible and its lost rows cannot be written again alone. {_CAUSE} A "
            "restart does not cure it: restore the rows of the lost partitions from the source "
            "(docs/jdbc.md, 'Failover needs synchronous replication')",
            **context,
        )
    if replaying != batch_id:
        raise FatalError(
            f"batch {batch_id} was decided, and the target lost the prepared transactions of "
            f"partitions {lost}; the query has moved past the batch (it starts at batch "
            f"{replaying}), so its rows cannot be written again. {_CAUSE} Restore the batch's "
            "rows from the source (docs/jdbc.md, 'Failover needs synchronous replication')",
            **context,
        )
    pairs = zip(handles, statuses, strict=True)
    prepared = [h for h, s in pairs if s is TransactionStatus.PREPARED]
    for handle in prepared:
        retrying(functools.partial(sink.recover_and_abort, handle), [0])
    after = _statuses(sink, handles, retrying)
    if TransactionStatus.COMMITTED in after:  # a zombie committed one meanwhile
        return lost_batch(log, sink, batch_id, handles, replaying, retrying)
    if any(s is not TransactionStatus.LOST for s in after):
        raise RetriableError(
            f"batch {batch_id}: its transactions still prepared could not all be rolled back "
            "before the batch is written again; retried",
            **context,
        )
    _log.warning(
        "sink %s: batch %d was decided, but the target lost the prepared transactions of "
        "partitions %s (%d of them were still prepared and are rolled back). %s Spark is "
        "replaying the batch: it is written again, exactly once",
        sink.name,
        batch_id,
        lost,
        len(prepared),
        _CAUSE,
    )
    log.withdraw_decision(batch_id, {"lost_partitions": lost, "rolled_back": len(prepared)})
    return len(prepared)

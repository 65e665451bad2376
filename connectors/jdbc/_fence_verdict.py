"""The zombie fences' ranks and verdicts, judged alike in every dialect.

An attempt's rank is ``(epoch, batch, attempt)`` (:func:`attempt_rank`): a
later run beats every attempt of an earlier one; within a run, a later batch
beats every attempt of an earlier batch, whose driver has finished it; within
a batch, Spark's later attempt beats the earlier. The slot fences of both
dialects compare these ranks.

The coordinated protocol's fence row: each dialect reads its identity's row
under a share lock right before it prepares (PostgreSQL ``FOR SHARE``, MariaDB
``LOCK IN SHARE MODE``); the rank ``(epoch, batch)`` the row holds says which
attempts are stale, and :func:`refuse_stale_attempt` refuses one of them.
"""

from __future__ import annotations

from typing import Any

from twophase import TaskContext
from twophase.errors import FatalError

from .._context import ErrorContext
from ._rows import FORMAT_COLUMN, check_row_format

__all__ = ["Rank", "attempt_rank", "refuse_stale_attempt"]

#: ``(epoch, batch, attempt)``: a higher rank is a newer attempt.
Rank = tuple[int, int, int]


def attempt_rank(context: TaskContext) -> Rank:
    """Return the rank of an attempt: ``(epoch, batch, attempt)``."""
    return (context.epoch, context.batch_id, context.attempt)


def refuse_stale_attempt(rows: list[dict[str, Any]], table: str, context: TaskContext) -> None:
    """Refuse an attempt whose rank is not above its identity's fence row.

    Parameters
    ----------
    rows
        The identity's fence row as read (none: nothing fenced yet).
    table
        The fence table, for messages.
    context
        The attempt.

    Raises
    ------
    FatalError
        The coordinator finished this attempt's batch (or its run) without it:
        this attempt is a zombie and must not prepare.
    CoordinatorLogError
        The row is of a newer format than this release reads.
    """
    if not rows:
        return
    row = rows[0]
    where = ErrorContext.of_task(context)
    check_row_format(
        row.get(FORMAT_COLUMN), table=table, row=f"identity {context.identity!r}", where=where
    )
    fenced = (int(row["epoch"]), int(row["batch_id"]))
    if (context.epoch, context.batch_id) > fenced:
        return
    what = (
        f"run {context.epoch} is over (run {fenced[0]} started)"
        if context.epoch < fenced[0]
        else f"batch {context.batch_id} is finished"
    )
    raise FatalError(
        f"attempt {context.attempt} of partition {context.partition_id} is fenced: {what}, "
        "and the coordinator does not wait for this attempt any more. It is a zombie (Spark "
        "gave up on it) and must not prepare; its transaction is rolled back",
        **where.keywords(),
    )

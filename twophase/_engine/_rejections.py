"""Rows a sink refused: dead letters on the executor, held to ``max_bad_rows`` on both sides.

A participant collects what each ``write`` hands back (:class:`PartitionRejections`):
with ``bad_rows="fail"`` the first refused row fails the task; with ``"dead_letter"``
each becomes a :class:`~twophase.DeadLetter` positioned in its partition, the partition is
held to ``max_bad_rows`` before it prepares or commits, and the letters go to the sink's
``write_dead_letters`` in the same transaction. The driver holds the batch's total to the
same bound (:func:`check_batch`) once every partition reported: coordinated, before the
decision (nothing of the batch commits); markers, after the partitions committed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import pyarrow as pa

from .._values import DeadLetter, RowError, TaskContext
from ..errors import DataError
from ._hooks import SinkHooks
from ._row_json import row_json

__all__ = ["PartitionRejections", "Reported", "by_class", "check_batch"]

#: Errors a message shows before "... and N more".
SHOWN = 5


def describe(letter: DeadLetter) -> str:
    """Return one line naming a dead letter's place and error (never its row)."""
    code = f" {letter.code}" if letter.code else ""
    column = f" in column {letter.column!r}" if letter.column else ""
    message = letter.message if len(letter.message) <= 200 else letter.message[:200] + "..."
    return (
        f"partition {letter.partition_id} row {letter.position}: "
        f"{letter.error_class}{code}{column}: {message}"
    )


class PartitionRejections:
    """The rows one participant's sink refused, as dead letters of its partition.

    Parameters
    ----------
    sink
        The sink (its ``bad_rows`` and ``max_bad_rows``).
    context
        The participant's batch and partition.
    start
        The partition's position of the first row written (a real-time commit's
        rows follow those committed before it).
    """

    def __init__(self, sink: SinkHooks, context: TaskContext, start: int = 0) -> None:
        self._sink = sink
        self._context = context
        self._position = start  # rows of the partition before the current record batch
        self.letters: list[DeadLetter] = []

    def add(self, returned: object, batch: pa.RecordBatch) -> None:
        """Take what ``write`` returned for ``batch``; raise when the partition must fail.

        Raises
        ------
        DataError
            A row was refused and the sink fails on bad rows, or the partition
            refused more than ``max_bad_rows``.
        TypeError
            ``write`` returned something else than RowErrors of ``batch``'s rows.
        """
        errors = self._checked(returned, batch)
        start, self._position = self._position, self._position + batch.num_rows
        if not errors:
            return
        c = self._context
        self.letters.extend(
            DeadLetter(
                c.sink_name,
                c.batch_id,
                c.partition_id,
                start + e.row,
                e.error_class,
                e.code,
                e.message,
                e.column,
                row_json(batch, e.row),
            )
            for e in sorted(errors, key=lambda e: e.row)
        )
        if self._sink.bad_rows != "dead_letter":
            raise DataError(
                f"the target refused {len(self.letters)} row(s): "
                f"{shown(self.letters, len(self.letters))}. The sink's bad_rows='fail' fails the "
                "batch; bad_rows='dead_letter' sets such rows aside in the batch's transaction",
                column=self.letters[0].column,
                setting="bad_rows",
            )
        if len(self.letters) > self._sink.max_bad_rows:
            raise over_limit(self._sink.max_bad_rows, len(self.letters), self.letters)

    def _checked(self, returned: object, batch: pa.RecordBatch) -> list[RowError]:
        if returned is None:
            return []
        name = type(self._sink).__name__
        if not isinstance(returned, (list, tuple)) or not all(
            isinstance(e, RowError) for e in returned
        ):
            raise TypeError(
                f"{name}.write() must return None or a list of RowError, got {returned!r:.200}"
            )
        rows = [e.row for e in returned]
        bad = [r for r in rows if r >= batch.num_rows]
        if bad or len(set(rows)) != len(rows):
            raise TypeError(
                f"{name}.write() refused rows {sorted(rows)[:10]} of a record batch of "
                f"{batch.num_rows} rows: each RowError.row must be a distinct position in it"
            )
        return list(returned)

    def write(self, txn: Any) -> None:
        """Hand the partition's dead letters, if any, to the sink's ``write_dead_letters``."""
        if self.letters:
            self._sink.write_dead_letters(txn, list(self.letters))

    def classes(self) -> tuple[tuple[str, int], ...]:
        """Return how many rows were set aside, by error class."""
        return tuple(sorted(Counter(d.error_class for d in self.letters).items()))

    def samples(self) -> tuple[str, ...]:
        """Return the first errors, one line each, for the driver's message."""
        return tuple(describe(d) for d in self.letters[:SHOWN])


def shown(letters: Sequence[DeadLetter] | Sequence[str], count: int) -> str:
    """Return the first errors, then how many more there are."""
    lines = [d if isinstance(d, str) else describe(d) for d in letters[:SHOWN]]
    more = f"; ... and {count - len(lines)} more" if count > len(lines) else ""
    return "; ".join(lines) + more


def over_limit(limit: int, count: int, first: Sequence[DeadLetter] | Sequence[str]) -> DataError:
    """Return the error of a batch (or partition) that refused more than ``max_bad_rows``."""
    return DataError(
        f"{count} rows were refused, more than max_bad_rows={limit} allows in a batch; first "
        f"errors: {shown(first, count)}. So many usually mean the target changed (a column "
        "narrowed, a constraint added): fix it, or raise max_bad_rows, and restart the query",
        setting="max_bad_rows",
    )


class Reported(Protocol):
    """What a participant's result tells of its dead letters (a ``TaskResult``)."""

    @property
    def dead_lettered(self) -> tuple[tuple[str, int], ...]:
        """Rows set aside, by error class."""
        ...

    @property
    def rejections(self) -> tuple[str, ...]:
        """The first errors, one line each."""
        ...


def by_class(results: Iterable[Reported]) -> dict[str, int]:
    """Return the rows a batch's participants set aside, by error class."""
    counts: Counter[str] = Counter()
    for result in results:
        counts.update(dict(result.dead_lettered))
    return dict(sorted(counts.items()))


def check_batch(sink: SinkHooks, results: Iterable[Reported]) -> int:
    """Hold a batch's dead letters to the sink's ``max_bad_rows``; return their count.

    Runs on the driver once every participant reported, before the coordinated
    protocol's decision (a batch over the bound then commits nothing) and after the
    markers protocol's commits.

    Parameters
    ----------
    sink
        The sink.
    results
        Every participant's result.

    Raises
    ------
    DataError
        The batch set aside more than ``max_bad_rows`` rows.
    """
    count, first = 0, list[str]()
    for result in results:
        count += sum(n for _, n in result.dead_lettered)
        first.extend(result.rejections)
    if count > sink.max_bad_rows:
        raise over_limit(sink.max_bad_rows, count, first)
    return count

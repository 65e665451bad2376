"""The hooks of a sink that sets refused rows aside: write, read and redrive its dead letters.

``write_dead_letters`` runs in the batch's transaction (``bad_rows="dead_letter"``);
``read_dead_letters`` and ``redrive_dead_letters`` serve the ``twophase dead-letters``
command, which lists what a sink set aside and, once the target is fixed, moves the rows
back into it in one transaction. Every sink inherits them through its protocol's base
class; their contract is written here, once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Generic, TypeVar

from .._values import DeadLetter, RowError
from ..errors import ConfigurationError

__all__ = ["DeadLetterHooks", "check_bad_rows"]

TxnT = TypeVar("TxnT")


class DeadLetterHooks(Generic[TxnT]):
    """The dead-letter hooks every sink inherits (all optional)."""

    def write_dead_letters(self, txn: TxnT, letters: Sequence[DeadLetter]) -> None:
        """Write the partition's rejected rows to the dead letters, in the same transaction.

        Required for ``bad_rows="dead_letter"`` (the constructor refuses that
        setting without it); never called otherwise.

        Runs on
            an executor.
        Called
            at most once per transaction, after the last ``write`` and before
            the commit step (coordinated: ``pre_commit``; markers:
            ``commit_with_marker``), with every row ``write`` refused in this
            partition, in position order, when there was at least one. The dead
            letters then prepare and commit with the good rows: a replay rewrites
            both (coordinated) or skips both (markers), so a row lands in the
            target or in the dead letters, once.
        Idempotent
            not required: the transaction is aborted on any failure.
        On failure
            the framework calls ``abort`` and fails the task (Spark retries it).

        Parameters
        ----------
        txn
            The transaction from ``begin_transaction``.
        letters
            One :class:`~twophase.DeadLetter` per refused row: where it came from,
            the error, and the row as JSON text. Its message is the one the sink's
            :class:`~twophase.RowError` gave: the framework adds no secret, and
            knows none.
        """
        raise NotImplementedError(f"{type(self).__qualname__} does not write dead letters")

    def read_dead_letters(self) -> Iterator[DeadLetter]:
        """Yield this sink's dead letters that are still set aside, oldest first.

        Optional: ``twophase dead-letters list`` and ``redrive`` need it.

        Runs on
            the machine where the ``twophase`` command runs, on a sink its
            ``--target`` factory built; :meth:`open` is not called, so the hook
            opens (and closes) its own connection.
        Called
            once per command.
        Idempotent
            required (read only).
        On failure
            the command fails and nothing changes.

        Returns
        -------
        iterator of DeadLetter
            The committed dead letters of the sink named ``self.name`` that no
            redrive has moved, ordered by batch, partition and position.
        """
        raise NotImplementedError(
            f"{type(self).__qualname__} does not implement read_dead_letters(), so its "
            "dead letters cannot be listed or redriven by the twophase command"
        )

    def redrive_dead_letters(self, letters: Sequence[DeadLetter]) -> Sequence[RowError]:
        """Write dead letters' rows into the target and remove them from the dead letters.

        Optional: ``twophase dead-letters redrive --yes`` needs it, after the user
        fixed what made the target refuse the rows.

        Runs on
            the machine where the ``twophase`` command runs (as
            :meth:`read_dead_letters`).
        Called
            once per confirmed redrive, with letters :meth:`read_dead_letters`
            yielded, in its order: all of them, or the oldest ones (``--limit``).
        Idempotent
            not required, but atomic: in one transaction, each row is written to
            the target and its letter removed, so a crash before the commit
            leaves everything set aside and a crash after it leaves nothing to
            redo. Run again, a redrive finds only what is still set aside.
        On failure
            roll back everything and raise: nothing is written, nothing removed.

        Parameters
        ----------
        letters
            The dead letters to move back, each with its row as JSON text.

        Returns
        -------
        sequence of RowError
            The rows the target still refuses, each by its index in ``letters``
            (``RowError.row``): they stay in the dead letters (with the new error,
            where the store keeps one), and every other row is moved.
        """
        raise NotImplementedError(
            f"{type(self).__qualname__} does not implement redrive_dead_letters(), so "
            "its dead letters cannot be redriven by the twophase command"
        )


def check_bad_rows(cls: type[Any], bad_rows: str, max_bad_rows: int) -> None:
    """Refuse invalid ``bad_rows`` / ``max_bad_rows`` settings by name."""
    if bad_rows not in ("fail", "dead_letter"):
        raise ConfigurationError(
            f"bad_rows={bad_rows!r} is not 'fail' or 'dead_letter'", setting="bad_rows"
        )
    if isinstance(max_bad_rows, bool) or not isinstance(max_bad_rows, int) or max_bad_rows < 0:
        raise ConfigurationError(
            f"max_bad_rows={max_bad_rows!r} must be an int of at least 0 (rows refused per batch)",
            setting="max_bad_rows",
        )
    if bad_rows == "dead_letter" and cls.write_dead_letters is DeadLetterHooks.write_dead_letters:
        raise ConfigurationError(
            f"bad_rows='dead_letter' needs a sink that implements write_dead_letters(), which "
            f"writes the rows the target refused in the batch's transaction; {cls.__qualname__} "
            "does not",
            setting="bad_rows",
        )

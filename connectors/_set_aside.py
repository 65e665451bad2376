"""A transaction's refused rows against its dead letters, shared by the connectors.

With ``bad_rows="dead_letter"`` a row the target refuses is left out of the
transaction (rolled back under its savepoint, or never produced) and lives on only
as the dead letter the framework builds from what ``write`` returned. Code between
the framework and the sink that drops that value -- a wrapper of ``write`` that
forgets to return it -- would lose the row without a word. :class:`SetAside`
counts both sides; a connector checks them before its transaction prepares or
commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from twophase.errors import ConfigurationError

from ._context import ErrorContext

__all__ = ["SetAside"]

_T = TypeVar("_T")


class SetAside:
    """Rows ``write`` refused and rows handed to ``write_dead_letters``, in one transaction."""

    def __init__(self) -> None:
        self.refused = 0
        self.lettered = 0

    def refusing(self, errors: Sequence[_T]) -> Sequence[_T]:
        """Count the refused rows ``write`` is about to return; return them."""
        self.refused += len(errors)
        return errors

    def lettering(self, letters: Sequence[_T]) -> Sequence[_T]:
        """Count the letters ``write_dead_letters`` got; return them."""
        self.lettered += len(letters)
        return letters

    def check(self, where: ErrorContext) -> None:
        """Refuse to end a transaction whose refused rows did not all become dead letters.

        Parameters
        ----------
        where
            The transaction's sink, batch and partition.

        Raises
        ------
        ConfigurationError
            Fewer letters than refused rows. Raised before the transaction
            prepares or commits, so that it is rolled back and no row is lost.
        """
        if self.refused != self.lettered:
            raise ConfigurationError(
                f"the target refused {self.refused} row(s) of this partition but "
                f"{self.lettered} reached write_dead_letters(): something between the framework "
                "and this sink (a wrapper of its write()?) dropped the rows write() returned. "
                "The transaction is rolled back, so no row is lost; return write()'s value",
                **where.keywords(),
                setting="bad_rows",
            )

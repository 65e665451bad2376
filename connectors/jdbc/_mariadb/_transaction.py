"""A partition's live MariaDB transaction on an executor."""

from __future__ import annotations

from typing import Any

from .._transaction import JdbcTransaction
from ._client import MariaDBClient

__all__ = ["MariaDBTransaction"]


class MariaDBTransaction(JdbcTransaction):
    """A partition's live MariaDB transaction (PyMySQL).

    Attributes
    ----------
    xa
        The coordinated protocol's xid as ``XA`` statement parameters, or None
        (the markers protocol's local transaction).
    max_bytes
        The longest ``INSERT`` statement to send.
    deduped
        The staging table keeps one row per key (rows go in with ``REPLACE``).
    """

    errors = MariaDBClient.errors

    def __init__(self, *args: Any, xa: tuple[str, str, int] | None, max_bytes: int) -> None:
        super().__init__(*args)
        self.xa = xa
        self.max_bytes = max_bytes
        self.deduped = False

"""Transaction ids (gids) of the family: ``tp:<identity>:<batch>:<partition>:<attempt>``.

A gid carries the sink identity, so that recovery lists only this sink's
prepared transactions (by prefix), and the attempt, so that two attempts of one
partition never share a gid. It is the same text for the same transaction on
every database. Each database limits its ids' length (:class:`IdLimit`: each
dialect states its own), so the sink checks, when it opens, that the longest id
of its identity fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from twophase.errors import ConfigurationError

__all__ = [
    "GID_PREFIX",
    "LONGEST_SUFFIX",
    "IdLimit",
    "ParsedGid",
    "format_gid",
    "gid_prefix",
    "parse_gid",
]

#: Every gid written by this connector starts with this.
GID_PREFIX = "tp:"

#: The longest suffix ``:<batch>:<partition>:<attempt>`` a gid can have: a
#: 64-bit batch id and 32-bit partition and attempt numbers.
LONGEST_SUFFIX = len(f":{2**63 - 1}:{2**31 - 1}:{2**31 - 1}")

#: What an identity adds to the sink name: ``.`` and 16 hex digits.
_IDENTITY_TAIL = 17


@dataclass(frozen=True)
class IdLimit:
    """A database's limit on the ids the sink gives its transactions.

    Attributes
    ----------
    database
        The database, for messages (``"PostgreSQL"``).
    what
        The limited id, for messages (``"transaction ids"``, ``"XA gtrid"``).
    max_bytes
        The most bytes it may have.
    suffix_bytes
        Bytes the limited id has after ``tp:<identity>``: the longest
        :data:`LONGEST_SUFFIX` when the whole gid is limited, 0 when only the
        identity's part is (an XA gtrid).
    """

    database: str
    what: str
    max_bytes: int
    suffix_bytes: int

    def check_identity(self, identity: str) -> None:
        """Check that every id of this identity fits the limit.

        Parameters
        ----------
        identity
            The sink identity token.

        Raises
        ------
        ConfigurationError
            The identity is empty, or so long that some id would not fit.
        """
        if not identity:
            raise ConfigurationError("the sink identity is empty")
        longest = len(gid_prefix(identity).encode()) - 1 + self.suffix_bytes
        if longest > self.max_bytes:
            room = self.max_bytes - (longest - len(identity.encode())) - _IDENTITY_TAIL
            raise ConfigurationError(
                f"the sink identity is {len(identity.encode())} bytes long: its {self.what} "
                f"could reach {longest} bytes, over {self.database}'s limit of "
                f"{self.max_bytes}. Use a shorter sink name (at most {max(room, 0)} bytes)",
                setting="name",
            )

    def checked(self, gid: str) -> str:
        """Return ``gid`` if it fits the limit (the whole gid is limited).

        Raises
        ------
        ConfigurationError
            It does not.
        """
        size = len(gid.encode())
        if size > self.max_bytes:
            raise ConfigurationError(
                f"transaction id is {size} bytes, over {self.database}'s limit of "
                f"{self.max_bytes}. Use a shorter sink name",
                setting="name",
            )
        return gid


@dataclass(frozen=True)
class ParsedGid:
    """The parts of a gid written by this connector.

    Attributes
    ----------
    identity
        The sink identity.
    batch_id, partition_id, attempt
        Where the transaction came from.
    """

    identity: str
    batch_id: int
    partition_id: int
    attempt: int


def gid_prefix(identity: str) -> str:
    """Return the prefix shared by every gid of one sink identity.

    Parameters
    ----------
    identity
        The sink identity token.

    Returns
    -------
    str
        ``"tp:<identity>:"``.
    """
    return f"{GID_PREFIX}{identity}:"


def format_gid(identity: str, batch_id: int, partition_id: int, attempt: int) -> str:
    """Build the gid of one attempt of one partition of one batch.

    Parameters
    ----------
    identity
        The sink identity token.
    batch_id, partition_id, attempt
        Non-negative integers.

    Returns
    -------
    str
        ``"tp:<identity>:<batch>:<partition>:<attempt>"``.

    Raises
    ------
    ConfigurationError
        A number is negative or not an integer.
    """
    for label, value in (
        ("batch_id", batch_id),
        ("partition_id", partition_id),
        ("attempt", attempt),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"{label} must be a non-negative integer, got {value!r}")
    return f"{gid_prefix(identity)}{batch_id}:{partition_id}:{attempt}"


def parse_gid(gid: str, identity: str | None = None) -> ParsedGid | None:
    """Parse a gid written by this connector.

    Parameters
    ----------
    gid
        A gid from ``pg_prepared_xacts``.
    identity
        When given, only gids of exactly this identity are accepted (an
        identity that is a prefix of another never matches the other's gids).

    Returns
    -------
    ParsedGid or None
        The parts, or ``None`` when the gid is not one of ours (or not of
        ``identity``).
    """
    if not gid.startswith(GID_PREFIX):
        return None
    head, *numbers = gid[len(GID_PREFIX) :].rsplit(":", 3)
    if len(numbers) != 3 or not head or not all(n.isdigit() and n.isascii() for n in numbers):
        return None
    if identity is not None and head != identity:
        return None
    return ParsedGid(head, int(numbers[0]), int(numbers[1]), int(numbers[2]))

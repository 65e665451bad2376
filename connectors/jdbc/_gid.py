"""Global transaction ids (gids) of prepared transactions.

A gid is ``tp:<identity>:<batch>:<partition>:<attempt>``. It carries the sink
identity, so that recovery lists only this sink's prepared transactions
(``pg_prepared_xacts`` by prefix), and the attempt, so that two attempts of one
partition never share a gid. PostgreSQL refuses gids of 200 bytes or more
(``GIDSIZE``), so gids are checked here before any transaction starts.
"""

from __future__ import annotations

from dataclasses import dataclass

from twophase.errors import ConfigurationError

__all__ = ["GID_PREFIX", "MAX_GID_BYTES", "ParsedGid", "format_gid", "gid_prefix", "parse_gid"]

#: Every gid written by this connector starts with this.
GID_PREFIX = "tp:"

#: PostgreSQL's limit: ``strlen(gid) < GIDSIZE`` with ``GIDSIZE = 200``.
MAX_GID_BYTES = 199

# The longest suffix ":<batch>:<partition>:<attempt>" a gid can have: a 64-bit
# batch id and 32-bit partition and attempt numbers.
_LONGEST_SUFFIX = len(f":{2**63 - 1}:{2**31 - 1}:{2**31 - 1}")


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


def check_identity(identity: str) -> None:
    """Check that every gid of this identity fits PostgreSQL's limit.

    Parameters
    ----------
    identity
        The sink identity token.

    Raises
    ------
    ConfigurationError
        The identity is so long that some gid would be 200 bytes or more.
    """
    if not identity:
        raise ConfigurationError("the sink identity is empty")
    longest = len(gid_prefix(identity).encode()) - 1 + _LONGEST_SUFFIX
    if longest > MAX_GID_BYTES:
        raise ConfigurationError(
            f"the sink identity is {len(identity.encode())} bytes long: its transaction "
            f"ids could reach {longest} bytes, over PostgreSQL's limit of {MAX_GID_BYTES}. "
            "Use a shorter sink name",
            setting="name",
        )


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
        A number is negative, or the gid would be 200 bytes or more.
    """
    for label, value in (
        ("batch_id", batch_id),
        ("partition_id", partition_id),
        ("attempt", attempt),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"{label} must be a non-negative integer, got {value!r}")
    gid = f"{gid_prefix(identity)}{batch_id}:{partition_id}:{attempt}"
    size = len(gid.encode())
    if size > MAX_GID_BYTES:
        raise ConfigurationError(
            f"transaction id is {size} bytes, over PostgreSQL's limit of {MAX_GID_BYTES} "
            "(GIDSIZE 200 including the terminator). Use a shorter sink name",
            setting="name",
        )
    return gid


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

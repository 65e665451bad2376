"""XA transaction ids (xids) of the MariaDB dialect.

An xid is three parts: ``gtrid`` (at most 64 bytes), ``bqual`` (at most 64)
and a numeric ``formatID``. The connector writes

* ``formatID`` = :data:`FORMAT_ID` (``0x7470``, "tp"): ``XA RECOVER`` rows of
  other software are never touched;
* ``gtrid`` = ``tp:<identity>``: recovery lists exactly this identity's
  transactions;
* ``bqual`` = ``<batch>:<partition>:<attempt>``: two attempts of one partition
  never share an xid.

The handle's ``transaction_id`` is the PostgreSQL dialect's gid,
``tp:<identity>:<batch>:<partition>:<attempt>`` (:mod:`.._gid`): the same
text for the same transaction on either database.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._gid import GID_PREFIX, IdLimit, format_gid, gid_prefix, parse_gid

__all__ = ["FORMAT_ID", "GTRIDS", "MAX_GTRID_BYTES", "Xid", "xid_of"]

#: The formatID of every xid this connector writes ("tp").
FORMAT_ID = 0x7470
#: MariaDB's limit on each of gtrid and bqual.
MAX_GTRID_BYTES = 64


@dataclass(frozen=True)
class Xid:
    """One XA transaction id.

    Attributes
    ----------
    gtrid, bqual
        The two strings.
    """

    gtrid: str
    bqual: str

    @property
    def params(self) -> tuple[str, str, int]:
        """Return ``(gtrid, bqual, formatID)``: the parameters of ``XA ... %s, %s, %s``."""
        return (self.gtrid, self.bqual, FORMAT_ID)

    @property
    def gid(self) -> str:
        """Return the handle's transaction id, ``tp:<identity>:<batch>:<partition>:<attempt>``."""
        return f"{self.gtrid}:{self.bqual}"


#: Only the gtrid (``tp:<identity>``) can grow with the identity.
GTRIDS = IdLimit("MariaDB", "XA gtrid", MAX_GTRID_BYTES, 0)


def xid_of(identity: str, batch_id: int, partition_id: int, attempt: int) -> Xid:
    """Build the xid of one attempt of one partition of one batch (the parts of its gid)."""
    GTRIDS.check_identity(identity)
    gid = format_gid(identity, batch_id, partition_id, attempt)
    return Xid(gid_prefix(identity)[:-1], gid[len(gid_prefix(identity)) :])


def parse_xid(gid: str, identity: str | None = None) -> Xid | None:
    """Turn a handle's transaction id back into its xid.

    Parameters
    ----------
    gid
        ``tp:<identity>:<batch>:<partition>:<attempt>``.
    identity
        When given, only this identity's ids are accepted.

    Returns
    -------
    Xid or None
        None when the id is not one of this connector's (or not of ``identity``).
    """
    parsed = parse_gid(gid, identity)
    if parsed is None:
        return None
    return Xid(
        f"{GID_PREFIX}{parsed.identity}",
        f"{parsed.batch_id}:{parsed.partition_id}:{parsed.attempt}",
    )

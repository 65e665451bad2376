"""How coordinated sinks share one PostgreSQL server's prepared-transaction slots.

``max_prepared_transactions`` is one pool for the whole server: every database,
every sink, every user. A batch of the coordinated protocol holds one slot per
partition from ``PREPARE TRANSACTION`` until phase 2, and a retried task may
hold one more while its predecessor's orphan waits for the sweep. A quarter of
the slots (at least 2) is therefore kept free, and the rest is shared:

* **automatic** (no ``max_partitions``): the rest is divided by the number of
  coordinated twophase sinks active on the server when the sink opens -- this
  one, every other sink identity holding a prepared transaction (any
  database), and every other identity of the fence table beside this sink's
  marker table that finished a batch in the last 10 minutes;
* **explicit** ``max_partitions``: used as given (more than the server has is
  refused); the other sinks' caps are not known here, so keeping the sum of
  the caps within the shared slots is the user's (a warning says so when other
  sinks are active).

A sink that opened alone keeps its larger share until it restarts; a batch that
then finds every slot taken fails with SQLSTATE 53200 as a restartable error
(:mod:`._errors`), and the restart shares again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from twophase.errors import ConfigurationError

from ..._context import ErrorContext
from .._gid import GID_PREFIX, parse_gid

_log = logging.getLogger("twophase.connectors.jdbc")

__all__ = ["ACTIVE_WITHIN_SECONDS", "SlotShare", "active_sinks", "partition_limit", "share_slots"]

#: A sink whose fence row moved this recently counts as active.
ACTIVE_WITHIN_SECONDS = 600


def _kept_free(max_prepared: int) -> int:
    return max(2, max_prepared // 4)


def _shared(max_prepared: int) -> int:
    return max(1, max_prepared - _kept_free(max_prepared))


def partition_limit(max_prepared: int, max_partitions: int | None, sinks: int = 1) -> int:
    """How many prepared transactions one batch of one sink may hold.

    Parameters
    ----------
    max_prepared
        The server's ``max_prepared_transactions`` (> 0).
    max_partitions
        The user's cap, if any (used up to the slots not kept free).
    sinks
        Coordinated sinks sharing the server, this one included.

    Returns
    -------
    int
        ``max_partitions``, or the sink's share of the slots not kept free
        (at least 1).
    """
    shared = _shared(max_prepared)
    if max_partitions is not None:
        return min(shared, max_partitions)
    return max(1, shared // max(1, sinks))


@dataclass(frozen=True)
class SlotShare:
    """The arithmetic of one sink's share, for the limit and its messages.

    Attributes
    ----------
    max_prepared
        The server's ``max_prepared_transactions``.
    others
        The other active coordinated sinks' identities, sorted.
    limit
        Partitions per batch of this sink.
    """

    max_prepared: int
    others: tuple[str, ...]
    limit: int

    def describe(self) -> str:
        """Say how the limit was reached, for the log and for errors."""
        kept = _kept_free(self.max_prepared)
        shared = _shared(self.max_prepared)
        if not self.others:
            return f"max_prepared_transactions={self.max_prepared}, {kept} kept free"
        named = ", ".join(self.others[:3]) + (", ..." if len(self.others) > 3 else "")
        return (
            f"max_prepared_transactions={self.max_prepared}, {kept} kept free, {shared} shared "
            f"by {len(self.others) + 1} coordinated sinks (this one and {named}): "
            f"{shared // (len(self.others) + 1)} each"
        )

    def report(self, sink: object, server: str, in_use: int, *, capped: bool) -> None:
        """Log the share (info when shared, debug when alone) and warn of a cap beside others.

        Parameters
        ----------
        sink
            The sink's name.
        server
            The server, for the log.
        in_use
            Prepared transactions held on the server now.
        capped
            The user set ``max_partitions``.
        """
        if self.others and capped:
            _log.warning(
                "sink %s: %d other coordinated sink(s) use this server's prepared-transaction "
                "slots (%s); max_partitions=%d is used as given: keep the sum of the sinks' "
                "max_partitions within what is shared (%s)",
                sink,
                len(self.others),
                ", ".join(self.others[:3]),
                self.limit,
                self.describe(),
            )
        _log.log(
            logging.INFO if self.others else logging.DEBUG,  # alone: the factory said it
            "sink %s: opened on %s, %s, %d in use; at most %d partitions per batch",
            sink,
            server,
            self.describe(),
            in_use,
            self.limit,
        )


def share_slots(
    max_prepared: int, max_partitions: int | None, others: tuple[str, ...], where: ErrorContext
) -> SlotShare:
    """Size one sink's batches on a server shared with ``others``.

    Parameters
    ----------
    max_prepared
        The server's ``max_prepared_transactions`` (> 0).
    max_partitions
        The user's cap, if any.
    others
        The other active coordinated sinks (:func:`active_sinks`).
    where
        Error context (sink, batch, partition).

    Returns
    -------
    SlotShare
        The limit and how it was reached.

    Raises
    ------
    ConfigurationError
        ``max_partitions`` above the server's slots, or more active sinks
        than shareable slots.
    """
    sinks = len(others) + 1
    share = SlotShare(max_prepared, others, partition_limit(max_prepared, max_partitions, sinks))
    if max_partitions is not None:
        if max_partitions > max_prepared:
            raise ConfigurationError(
                f"max_partitions={max_partitions} is more than the server's "
                f"max_prepared_transactions={max_prepared}",
                setting="max_partitions",
                **where.keywords(),
            )
    elif others and _shared(max_prepared) < sinks:
        raise ConfigurationError(
            f"no prepared-transaction slot left for this sink: {share.describe()}; raise "
            "max_prepared_transactions (needs a server restart) or run fewer coordinated "
            "sinks on this server; see docs/jdbc.md, 'Sizing max_prepared_transactions'",
            setting="max_prepared_transactions",
            **where.keywords(),
        )
    return share


def active_sinks(cur: Any, identity: str, fences: str) -> tuple[str, ...]:
    """List the other coordinated twophase sinks active on this server.

    Parameters
    ----------
    cur
        A cursor.
    identity
        This sink's identity (left out).
    fences
        The fence table beside this sink's marker table, quoted (it may not
        exist yet, or be unreadable to the sink's user: the fence's own check
        at open names the rights).

    Returns
    -------
    tuple of str
        Their identities, sorted: those holding a prepared transaction (any
        database) and those whose fence row moved in the last
        :data:`ACTIVE_WITHIN_SECONDS`.
    """
    cur.execute(
        "SELECT DISTINCT gid FROM pg_catalog.pg_prepared_xacts WHERE left(gid, %s) = %s",
        (len(GID_PREFIX), GID_PREFIX),
    )
    found = set()
    for (gid,) in cur.fetchall():
        parsed = parse_gid(gid)
        if parsed is not None:
            found.add(parsed.identity)
    cur.execute(
        "SELECT CASE WHEN to_regclass(%s) IS NULL THEN false "
        "ELSE has_table_privilege(%s, 'SELECT') END",
        (fences, fences),
    )
    if cur.fetchone()[0]:
        cur.execute(
            f"SELECT identity FROM {fences} WHERE fenced_at > now() - make_interval(secs => %s)",
            (ACTIVE_WITHIN_SECONDS,),
        )
        found.update(row[0] for row in cur.fetchall())
    found.discard(identity)
    return tuple(sorted(found))

"""The coordinated protocol's driver-side statements alike in every dialect: fence, ids in doubt.

A dialect's prepared store (:class:`~._dialect.PreparedStore`) derives from
:class:`PreparedStatements` and supplies the statements that differ --
creating its fence table(s), moving the fence, listing the gids the server
holds prepared -- while the steps around them are written once here: the
fence runs on a pooled autocommit connection, a fence table the user may not
use is refused with the rights it needs, and the prepared ids of exactly this
identity become handles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Generic, TypeVar

from twophase import TransactionHandle
from twophase.errors import ConfigurationError

from .._context import ErrorContext
from ._client import JdbcClient
from ._gid import ParsedGid, parse_gid

__all__ = ["PreparedStatements"]

HandleT = TypeVar("HandleT", bound=TransactionHandle)


class PreparedStatements(JdbcClient, Generic[HandleT]):
    """The coordinated protocol's driver side, from the dialect's statements.

    Subclasses set :attr:`handle_type` and :attr:`fence_rights`, and
    implement :attr:`fence_tables`, :meth:`create_fences`,
    :meth:`move_fence` and :meth:`prepared_gids`.
    """

    #: The dialect's handle class, built as ``handle_type(gid, batch, partition, attempt)``.
    handle_type: type[HandleT]
    #: The rights the sink's user needs on them, for messages.
    fence_rights: ClassVar[str]

    # ------------------------------------------------------------------ hooks
    @property
    def fence_tables(self) -> str:
        """Name the fence's table(s), for messages."""
        raise NotImplementedError

    def create_fences(self, cur: Any, identity: str) -> None:
        """Create the fence table(s) if missing, and this identity's rank."""
        raise NotImplementedError

    def move_fence(self, cur: Any, identity: str, rank: tuple[int, int]) -> bool:
        """Fence every attempt up to ``rank``; False while a prepared one holds the fence."""
        raise NotImplementedError

    def prepared_gids(self, identity: str, where: ErrorContext) -> list[str]:
        """List the gids the server holds prepared, of this identity's prefix."""
        raise NotImplementedError

    # ------------------------------------------------------------- the steps
    def ensure_fences(self, identity: str, where: ErrorContext) -> None:
        """Create the fence if missing; refuse, with the rights it needs, one the user may not use.

        Parameters
        ----------
        identity
            The sink identity.
        where
            The sink, named by every error.

        Raises
        ------
        ConfigurationError
            The sink's user may not create or use the fence table(s)
            (``setting='marker_table'``).
        """
        try:
            self.run(
                f"preparing the fence ({self.fence_tables})",
                lambda cur: self.create_fences(cur, identity),
                where,
            )
        except ConfigurationError as exc:
            raise ConfigurationError(
                f"{exc.message}. Protocol 'coordinated' keeps its zombie fence in "
                f"{self.fence_tables}, beside the marker table; {self.fence_rights}, or set "
                "marker_table to a schema where it may",
                setting="marker_table",
                **where.keywords(),
            ) from exc

    def fence(self, identity: str, epoch: int, batch_id: int, where: ErrorContext) -> bool:
        """Record that every attempt up to ``(epoch, batch_id)`` is stale (driver).

        Parameters
        ----------
        identity
            The sink identity.
        epoch, batch_id
            The rank at or below which attempts are stale.
        where
            The sink, named by every error.

        Returns
        -------
        bool
            False when a prepared transaction holds the fence.
        """
        return self.run(
            "fencing stale attempts",
            lambda cur: self.move_fence(cur, identity, (epoch, batch_id)),
            where,
        )

    def in_doubt(self, identity: str, where: ErrorContext) -> Sequence[HandleT]:
        """List exactly this identity's prepared transactions, as handles.

        Parameters
        ----------
        identity
            The sink identity.
        where
            The sink, named by every error.

        Returns
        -------
        list of HandleT
            One per prepared transaction of this identity (never of an
            identity this one is a prefix of), by gid.
        """
        handles = []
        for gid in sorted(self.prepared_gids(identity, where)):
            parsed = parse_gid(gid, identity)
            if parsed is not None:
                handles.append(
                    self.handle_type(gid, parsed.batch_id, parsed.partition_id, parsed.attempt)
                )
        return handles

    def ours(self, gid: str, where: ErrorContext) -> ParsedGid:
        """Return the parts of a gid of this connector; refuse any other.

        Raises
        ------
        ConfigurationError
            ``gid`` is not a transaction id of this connector.
        """
        parsed = parse_gid(gid)
        if parsed is None:
            raise ConfigurationError(
                f"{gid!r} is not a transaction id of this connector", **where.keywords()
            )
        return parsed

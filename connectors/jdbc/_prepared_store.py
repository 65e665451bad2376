"""The coordinated protocol's prepared store, alike in every dialect: phase 2 by id, fence, doubt.

A dialect's prepared store (:class:`~._dialect.PreparedStore`) derives from
:class:`PreparedStatements` and declares what differs -- the statements that
end a prepared transaction (``COMMIT PREPARED`` / ``XA COMMIT``...), how it
spells an id, its error code for an id it does not hold, the proof row a
transaction writes, its fence table(s) -- while the steps are written once
here. Every driver statement runs on a pooled autocommit connection and is
safe to repeat: a commit of an id no longer prepared is resolved by the proof
row the transaction wrote (present: committed; absent: its rows are lost);
a rollback of an unknown id is success; an id that is not this connector's
is refused; a fence table the user may not use is refused with the rights it
needs; the prepared ids of exactly this identity become handles.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from twophase import TransactionHandle, TransactionStatus
from twophase.errors import ConfigurationError, FatalError, RetriableError

from .._context import ErrorContext
from ._client import JdbcClient
from ._config import ConnectionConfig
from ._gid import ParsedGid, parse_gid
from ._options import JdbcOptions
from ._transaction import JdbcTransaction

__all__ = ["NoPreparedTransactions", "PreparedStatements"]

HandleT = TypeVar("HandleT", bound=TransactionHandle)

_log = logging.getLogger("twophase.connectors.jdbc")

#: Prepared transactions of other sinks older than this are reported when a sink opens.
STALE_AFTER_SECONDS = 600.0
#: Pauses before asking again about an id still attached to the session that prepared it
#: (:attr:`PreparedStatements.attaches`): MariaDB detaches a branch a few milliseconds after
#: that session closed.
_DETACH_WAITS = (0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.4)


class PreparedStatements(JdbcClient, Generic[HandleT]):
    """The coordinated protocol's driver side, from the dialect's statements.

    Subclasses declare the class attributes below and implement the hooks
    (:attr:`fence_tables`, :meth:`create_fences`, :meth:`move_fence`,
    :meth:`prepared_gids`, :meth:`error_code`, :meth:`id_params`,
    :meth:`is_prepared`, :meth:`committed`; :meth:`vanished` and
    :meth:`stale` have defaults), plus ``capacity`` and ``prepare``.
    """

    #: The dialect's handle class, built as ``handle_type(gid, batch, partition, attempt)``.
    handle_type: type[HandleT]
    #: The rights the sink's user needs on them, for messages.
    fence_rights: ClassVar[str]
    #: The statement that prepares the open transaction, for messages.
    prepare_verb: ClassVar[str]
    #: The statements that end a prepared transaction, followed by :meth:`id_params`' placeholders.
    commit_verb: ClassVar[str]
    rollback_verb: ClassVar[str]
    #: The server's error code (:meth:`error_code`) for an id it does not hold prepared.
    unknown_id: ClassVar[object]
    #: What a prepared transaction is called in messages; the page on resolving one by hand.
    transaction_kind: ClassVar[str] = "prepared transaction"
    docs_page: ClassVar[str] = "docs/jdbc.md"
    #: Whether a prepared id stays attached to the session that prepared it for a while after
    #: that session closed (MariaDB): the server then answers "unknown id" while still listing it,
    #: and the statement is asked again for up to a second, then retried by the coordinator.
    attaches: ClassVar[bool] = False

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

    def error_code(self, exc: BaseException) -> object:
        """Return the server's code of a client-library error (compared with :attr:`unknown_id`)."""
        raise NotImplementedError

    def id_params(self, gid: str, where: ErrorContext) -> tuple[Any, ...]:
        """Spell the gid as the server takes it: the parameters of the statements by id.

        May refuse (:class:`ConfigurationError`) a gid that is not this connector's.
        """
        raise NotImplementedError

    def is_prepared(self, cur: Any, params: tuple[Any, ...]) -> bool:
        """Whether the server lists the id (:meth:`id_params`) as prepared."""
        raise NotImplementedError

    def committed(self, cur: Any, gid: str) -> bool:
        """Whether the proof row the transaction ``gid`` wrote before it prepared is visible."""
        raise NotImplementedError

    def vanished(self, cur: Any, handle: HandleT, where: ErrorContext) -> str:
        """Tell what became of a decided id no longer prepared: its proof row decides.

        Returns ``"already committed"``, or ``"lost"`` (the transaction did not
        commit: :meth:`commit_prepared` raises a :class:`FatalError`); may raise.
        """
        return "already committed" if self.committed(cur, handle.transaction_id) else "lost"

    def stale(self, identity: str, older_than: float, where: ErrorContext) -> list[str]:
        """List other sinks' prepared transactions older than ``older_than`` seconds (none)."""
        return []

    # ------------------------------------------------------------- the steps
    def prepare_with(self, txn: JdbcTransaction, statements: Callable[[Any], None]) -> None:
        """Run ``statements`` (fence, proof row, prepare) on the transaction's connection.

        A broken connection leaves the transaction ``unknown`` (the server may
        have prepared it); once prepared, the connection is given back, or
        closed when the prepared id stays attached to it (:attr:`attaches`).
        """
        conn = txn.open_connection(self.prepare_verb)
        try:
            with conn.cursor() as cur:
                statements(cur)
        except txn.errors.error as exc:
            if txn.errors.is_connection_error(exc):
                txn.state = "unknown"  # the server may have prepared it before the break
            raise txn.failure(exc, f"{self.prepare_verb} {txn.gid!r}") from exc
        txn.state = "prepared"
        txn.conn = None
        if self.attaches:
            txn.pool.discard(conn)  # detaches the prepared transaction
        else:
            txn.pool.release(conn)

    def ensure_fences(self, identity: str, where: ErrorContext) -> None:
        """Create the fence if missing; refuse, with the rights it needs, one the user may not use.

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

    def ensure_ready(self, identity: str, where: ErrorContext) -> None:
        """Create the fence; warn of other sinks' prepared transactions over 10 minutes old."""
        self.ensure_fences(identity, where)
        stale = self.stale(identity, STALE_AFTER_SECONDS, where)
        if stale:
            _log.warning(
                "sink %s: %d prepared transaction(s) of other twophase sinks are older than "
                "10 minutes (%s%s); they hold locks and slots and block VACUUM. If their "
                "queries are gone (a reset checkpoint), roll them back by hand: see "
                "%s",
                where.sink,
                len(stale),
                ", ".join(stale[:3]),
                ", ..." if len(stale) > 3 else "",
                self.docs_page,
            )

    def commit_prepared(self, handle: HandleT, where: ErrorContext) -> str:
        """Commit by id; an id no longer prepared is resolved by its proof row (:meth:`vanished`).

        Parameters
        ----------
        handle
            The handle.
        where
            The sink, batch and partition, named by every error.

        Returns
        -------
        str
            ``"committed"`` (now), ``"already committed"`` (its proof row says
            so), or what :meth:`vanished` tells.

        Raises
        ------
        FatalError
            The transaction did not commit and is prepared no more: its rows
            are lost (rolled back by hand, a failover that lost it).
        RetriableError
            The server is unreachable, or the transaction is still attached
            to the session that prepared it.
        """
        gid = handle.transaction_id
        params = self.id_params(gid, where)

        def commit(cur: Any) -> str:
            if self._ended(cur, self.commit_verb, params):
                return "committed"
            if self.attaches and self.is_prepared(cur, params):
                return "attached"
            return self.vanished(cur, handle, where)

        why = " (its task has not closed its connection yet)"
        outcome = self._detached(self.commit_verb, gid, commit, where, why)
        if outcome == "lost":
            raise FatalError(
                f"{self.transaction_kind} {gid!r} of a decided batch was rolled back (by hand or "
                "by another process): its rows are lost. Restore them from the source (see "
                f"{self.docs_page}, 'resolving in-doubt transactions by hand')",
                **where.keywords(),
            )
        return outcome

    def rollback(self, gid: str, where: ErrorContext) -> bool:
        """Roll back ``gid``; True when one was, an id the server does not hold is success.

        Raises :class:`RetriableError` while the id is still attached to a live session.
        """
        params = self.id_params(gid, where)

        def rollback(cur: Any) -> str:
            if self._ended(cur, self.rollback_verb, params):
                return "rolled back"
            return "attached" if self.attaches and self.is_prepared(cur, params) else "unknown"

        return self._detached(self.rollback_verb, gid, rollback, where, "") == "rolled back"

    def rollback_prepared(self, handle: HandleT, where: ErrorContext) -> None:
        """Roll back a handle's transaction; a gid that is not this connector's is refused.

        Raises
        ------
        ConfigurationError
            The gid is not one of this connector's.
        """
        self.ours(handle.transaction_id, where)
        self.rollback(handle.transaction_id, where)

    def status(self, handle: HandleT, where: ErrorContext) -> TransactionStatus | None:
        """Tell prepared (the server lists it), committed (its proof row is visible), or lost.

        Prepared is asked first, so a commit between the two queries shows as
        committed, never as lost.
        """
        gid = handle.transaction_id
        params = self.id_params(gid, where)

        def query(cur: Any) -> TransactionStatus:
            if self.is_prepared(cur, params):
                return TransactionStatus.PREPARED
            if self.committed(cur, gid):
                return TransactionStatus.COMMITTED
            return TransactionStatus.LOST

        return self.run(f"status of {gid!r}", query, where)

    def _ended(self, cur: Any, verb: str, params: tuple[Any, ...]) -> bool:
        """Run ``verb`` on the id; False when the server does not hold it prepared."""
        try:
            cur.execute(f"{verb} {', '.join(['%s'] * len(params))}", params)
        except self.errors.error as exc:
            if self.error_code(exc) != self.unknown_id:
                raise
            return False
        return True

    def _detached(
        self, verb: str, gid: str, statement: Callable[[Any], str], where: ErrorContext, why: str
    ) -> str:
        """Run ``statement``, again after short pauses while it answers ``"attached"``."""
        doing = f"{verb} {gid!r}"
        outcome = self.run(doing, statement, where)
        for pause in _DETACH_WAITS:
            if outcome != "attached":
                break
            time.sleep(pause)
            outcome = self.run(doing, statement, where)
        if outcome == "attached":
            raise RetriableError(
                f"{gid!r} is prepared but still attached to the session that prepared it{why}; "
                "retried",
                **where.keywords(),
            )
        return outcome

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


class NoPreparedTransactions(Generic[HandleT]):
    """The prepared store of a database whose transactions do not outlive their session.

    Such a database runs the markers protocol only (its dialect's ``choose``
    never picks ``coordinated``); a coordinated sink built on it anyway is
    refused by name when it opens, before any batch.

    Parameters
    ----------
    options, connection
        The sink's options and connection parameters.
    """

    def __init__(self, options: JdbcOptions, connection: ConnectionConfig) -> None:
        self.options = options
        self.connection = connection

    def _refuse(self, where: ErrorContext) -> ConfigurationError:
        return ConfigurationError(
            f"{self.options.database} keeps no transaction beyond the session that opened it, "
            "so it cannot run protocol='coordinated'; use protocol='markers'",
            setting="protocol",
            **where.keywords(),
        )

    def capacity(self, identity: str, where: ErrorContext) -> int | None:
        """Refuse: nothing can be prepared."""
        raise self._refuse(where)

    def ensure_ready(self, identity: str, where: ErrorContext) -> None:
        """Refuse (never reached: :meth:`capacity` refuses first)."""
        raise self._refuse(where)

    def prepare(self, txn: JdbcTransaction) -> HandleT:
        """Refuse."""
        raise self._refuse(txn.where)

    def fence(self, identity: str, epoch: int, batch_id: int, where: ErrorContext) -> bool:
        """Refuse."""
        raise self._refuse(where)

    def commit_prepared(self, handle: HandleT, where: ErrorContext) -> str:
        """Refuse."""
        raise self._refuse(where)

    def rollback_prepared(self, handle: HandleT, where: ErrorContext) -> None:
        """Refuse."""
        raise self._refuse(where)

    def status(self, handle: HandleT, where: ErrorContext) -> TransactionStatus | None:
        """Refuse."""
        raise self._refuse(where)

    def in_doubt(self, identity: str, where: ErrorContext) -> Sequence[HandleT]:
        """Nothing is ever in doubt."""
        return ()

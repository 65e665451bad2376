"""The coordinator log: the durable state of a sink identity, claimed by runs, batch by batch.

A run claims the identity with a new epoch, which fences every earlier run
(:meth:`CoordinatorLog.check_epoch`); each batch leaves its records (intent,
decision, committed, rewrite), and compaction folds the records of old
committed batches into a summary. Where the records live and what they hold is
``_log/_records.py``.

Every record is written with an atomic create (write then rename, or the
file system's own atomic create), the decision without overwrite, so that a
record is either absent or complete. The files go to a
:class:`~twophase._stores._store.LogStore` (``_stores/_store.py``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._stores._store import LogStore
from ..errors import ConcurrentQueryError, CoordinatorLogError
from ._legacy import LegacyRecordError
from ._records import BATCH_RE, EPOCH_RE, decision_handles, dump_record, parse_record

__all__ = ["CoordinatorLog", "LogState"]

_log = logging.getLogger("twophase.log")


@dataclass
class LogState:
    """What the coordinator log says, loaded once per run and kept current.

    Attributes
    ----------
    committed_through
        Every batch <= this id that ever ran is committed (from compaction).
    committed
        Batch ids recorded as committed above ``committed_through``.
    decided
        Batch ids with a commit decision (the coordinated protocol).
    intents
        Batch id -> partition count, for batches that were started.
    partition_slots
        High-water mark of partitions used by any batch.
    rewrite
        Batches of the markers protocol an operator chose to rewrite whole (``twophase resolve``).
    lost
        Batches whose decision was withdrawn because the target lost its transactions.
    """

    committed_through: int = -1
    committed: set[int] = field(default_factory=set)
    decided: set[int] = field(default_factory=set)
    intents: dict[int, int] = field(default_factory=dict)
    partition_slots: int = 0
    rewrite: set[int] = field(default_factory=set)
    lost: set[int] = field(default_factory=set)

    def is_committed(self, batch_id: int) -> bool:
        """Return whether ``batch_id`` is recorded as committed."""
        return batch_id <= self.committed_through or batch_id in self.committed

    def pending_decisions(self) -> list[int]:
        """Return decided batches not yet recorded as committed, oldest first."""
        return sorted(b for b in self.decided if not self.is_committed(b))

    def unfinished(self) -> list[int]:
        """Return started batches (intent or decision) not recorded as committed."""
        started = set(self.intents) | self.decided
        return sorted(b for b in started if not self.is_committed(b))


class CoordinatorLog:
    """The durable state of the coordinator for one sink identity.

    Parameters
    ----------
    store
        Where the files live.
    sink
        The sink name (for messages).
    identity
        The sink identity token; recorded in every epoch.
    retain
        Committed batch records to keep before compaction removes them.
    """

    def __init__(self, store: LogStore, *, sink: str, identity: str, retain: int = 100) -> None:
        if retain < 1:
            raise ValueError("retain must be >= 1")
        self.store = store
        self.sink = sink
        self.identity = identity
        self.retain = retain
        self.epoch: int | None = None
        self._state: LogState | None = None

    # ------------------------------------------------------------ loading
    def _load_json(self, name: str) -> dict[str, Any] | None:
        raw = self.store.read(name)
        if raw is None:
            return None
        return parse_record(raw, f"{self.store.location}/{name}", self.sink)

    def load(self) -> LogState:
        """Read the whole log (one directory listing plus the small records).

        Returns
        -------
        LogState
            The current state; also cached on the log.
        """
        state = LogState()
        summary = self._load_json("state.json")
        if summary is not None:
            state.committed_through = int(summary.get("committed_through", -1))
            state.partition_slots = int(summary.get("partition_slots", 0))
        for name in self.store.list("batches"):
            match = BATCH_RE.match(name)
            if not match:
                continue
            batch_id, kind = int(match.group(1)), match.group(2)
            if kind == "committed":
                state.committed.add(batch_id)
            elif kind == "decision":
                state.decided.add(batch_id)
            elif kind in ("rewrite", "lost"):  # the state's set of that name
                getattr(state, kind).add(batch_id)
            else:
                record = self._load_json(f"batches/{name}")
                partitions = int(record.get("partitions", 0)) if record else 0
                state.intents[batch_id] = partitions
                state.partition_slots = max(state.partition_slots, partitions)
        self._state = state
        return state

    @property
    def state(self) -> LogState:
        """Return the cached state (loading it on first use)."""
        return self._state if self._state is not None else self.load()

    # ------------------------------------------------------------- epochs
    def _epochs(self) -> list[int]:
        return sorted(
            int(m.group(1)) for n in self.store.list("epochs") if (m := EPOCH_RE.match(n))
        )

    def claim(self, run_id: str, query_id: str) -> int:
        """Claim the sink identity for this run: a new epoch above every other.

        A later run (a restart, or a second copy of the query) claims a higher
        epoch and thereby fences this one: see :meth:`check_epoch`.

        Parameters
        ----------
        run_id
            Unique id of this run.
        query_id
            The streaming query id.

        Returns
        -------
        int
            The epoch claimed.
        """
        for _ in range(100):
            epochs = self._epochs()
            epoch = (epochs[-1] + 1) if epochs else 1
            record = {
                "epoch": epoch,
                "run_id": run_id,
                "query_id": query_id,
                "identity": self.identity,
                "claimed_at": time.time(),
                "pid": os.getpid(),
            }
            if self.store.write(f"epochs/{epoch:020d}.json", dump_record(record), overwrite=False):
                self.epoch = epoch
                for old in epochs[:-10]:
                    self.store.delete(f"epochs/{old:020d}.json")
                return epoch
        raise ConcurrentQueryError(
            "could not claim the sink identity: epochs keep changing under this run, "
            "so several runs of this query are starting at once",
            sink=self.sink,
        )

    def check_epoch(self, batch_id: int | None = None) -> None:
        """Fail if a later run has claimed the identity since this run did.

        Parameters
        ----------
        batch_id
            The batch being processed (for the message).

        Raises
        ------
        ConcurrentQueryError
            This run is fenced by a newer one.
        """
        if self.epoch is None:
            raise CoordinatorLogError("the log was not claimed by this run", sink=self.sink)
        epochs = self._epochs()
        newer = [e for e in epochs if e > self.epoch]
        if newer:
            other = self._load_json(f"epochs/{newer[-1]:020d}.json") or {}
            raise ConcurrentQueryError(
                f"another run of this query (run id {other.get('run_id', '?')}, pid "
                f"{other.get('pid', '?')}) claimed sink identity {self.identity!r} after "
                f"this run (epoch {newer[-1]} > {self.epoch}). Two queries must never share "
                "a checkpoint: stop the other run, or give this query its own checkpoint "
                "location",
                sink=self.sink,
                batch_id=batch_id,
            )

    # ------------------------------------------------------------ records
    def _batch_name(self, batch_id: int, kind: str) -> str:
        return f"batches/{batch_id:020d}.{kind}.json"

    def record_intent(self, batch_id: int, partitions: int) -> None:
        """Record that batch ``batch_id`` starts phase 1 with ``partitions`` tasks.

        Parameters
        ----------
        batch_id
            The batch id.
        partitions
            The number of partitions (participant slots) of the batch.
        """
        self.check_epoch(batch_id)
        record = {"batch": batch_id, "partitions": partitions, "epoch": self.epoch}
        self.store.write(self._batch_name(batch_id, "intent"), dump_record(record), overwrite=True)
        state = self.state
        state.intents[batch_id] = partitions
        state.partition_slots = max(state.partition_slots, partitions)

    def record_decision(
        self,
        batch_id: int,
        handles: Sequence[Any],
        extra: dict[str, Any],
        encode: Callable[[Any], Mapping[str, Any]],
    ) -> None:
        """Durably record "commit batch ``batch_id`` with these handles" (the commit point).

        Parameters
        ----------
        batch_id
            The batch id.
        handles
            Every prepared handle of the batch.
        extra
            Small JSON-able facts kept with the decision (row counts...).
        encode
            The sink's ``encode_handle``: a handle as JSON-able data. The encoded
            handles must be plain JSON; checking that they decode back to equal
            handles is the caller's.

        Raises
        ------
        ConcurrentQueryError
            A newer run holds the identity, or another run decided this batch.
        """
        self.check_epoch(batch_id)
        record = {
            "batch": batch_id,
            "epoch": self.epoch,
            "transactions": [dict(encode(h)) for h in handles],
            "transaction_ids": [getattr(h, "transaction_id", None) for h in handles],
            **extra,
        }
        if not self.store.write(
            self._batch_name(batch_id, "decision"), dump_record(record), overwrite=False
        ):
            raise ConcurrentQueryError(
                f"a commit decision for batch {batch_id} already exists in "
                f"{self.store.location}: another run of this query decided it",
                sink=self.sink,
                batch_id=batch_id,
            )
        self.state.decided.add(batch_id)

    def read_decision(self, batch_id: int, decode: Callable[[dict[str, Any]], Any]) -> list[Any]:
        """Return the handles recorded in the decision of ``batch_id``.

        A decision of 0.2.0 (format 1) keeps its handles as a pickle: they are
        read by the restricted reader (``_log/_legacy.py``), which loads no code and
        refuses every class but the handle classes 0.2.0 shipped.

        Parameters
        ----------
        batch_id
            A decided batch.
        decode
            The sink's ``decode_handle``: a recorded handle back into a handle.

        Returns
        -------
        list
            The handles.

        Raises
        ------
        CoordinatorLogError
            The decision is missing, of a newer format, or its handles cannot be
            read; the message names the file.
        """
        name = self._batch_name(batch_id, "decision")
        where = f"{self.store.location}/{name}"
        record = self._load_json(name)
        if record is None:
            raise CoordinatorLogError(f"no decision recorded for batch {batch_id}", sink=self.sink)
        try:
            return [decode(h) for h in decision_handles(record, where, self.sink)]
        except (LegacyRecordError, ValueError, TypeError, KeyError) as exc:
            legacy = " (written by twophase 0.2.0)" if "format" not in record else ""
            raise CoordinatorLogError(
                f"the decision of batch {batch_id} in {where}{legacy} cannot be read: {exc}. "
                "The batch's prepared transactions are left as they are; see "
                "docs/upgrading.md",
                sink=self.sink,
                batch_id=batch_id,
            ) from exc

    def record_committed(self, batch_id: int, extra: dict[str, Any]) -> None:
        """Record that batch ``batch_id`` is fully committed.

        Parameters
        ----------
        batch_id
            The batch id.
        extra
            Small JSON-able facts (row counts...).
        """
        self.check_epoch(batch_id)
        record = {"batch": batch_id, "epoch": self.epoch, **extra}
        self.store.write(
            self._batch_name(batch_id, "committed"), dump_record(record), overwrite=True
        )
        self.state.committed.add(batch_id)

    def record_rewrite(self, batch_id: int, extra: dict[str, Any]) -> None:
        """Record an operator's decision to rewrite batch ``batch_id`` (markers protocol) whole.

        The next run writes every partition of the replay, also those whose
        markers show them committed (duplicating their rows), instead of
        matching the replay with the markers.

        Parameters
        ----------
        batch_id
            An unfinished batch of the markers protocol.
        extra
            Who decided, why (kept in the record).
        """
        self.check_epoch(batch_id)
        record = {"batch": batch_id, "epoch": self.epoch, **extra}
        self.store.write(self._batch_name(batch_id, "rewrite"), dump_record(record), overwrite=True)
        self.state.rewrite.add(batch_id)

    def withdraw_decision(self, batch_id: int, extra: dict[str, Any]) -> None:
        """Withdraw the decision of a batch whose transactions the target lost (``_engine/_lost``).

        Writes ``batches/<id>.lost.json``, then deletes the decision: the batch
        is undecided again, and its replay records a new one. A crash between
        the two repeats the withdrawal (none of its transactions is left).

        Parameters
        ----------
        batch_id
            A decided batch, not committed.
        extra
            What was lost (kept in the record).
        """
        self.check_epoch(batch_id)
        record = {"batch": batch_id, "epoch": self.epoch, **extra}
        self.store.write(self._batch_name(batch_id, "lost"), dump_record(record), overwrite=True)
        self.store.delete(self._batch_name(batch_id, "decision"))
        self.state.decided.discard(batch_id)
        self.state.lost.add(batch_id)

    def read_record(self, batch_id: int, kind: str) -> dict[str, Any] | None:
        """Return one record of a batch (``intent``, ``decision``, ``committed``, ``rewrite``).

        Parameters
        ----------
        batch_id
            The batch.
        kind
            The record kind.

        Returns
        -------
        dict or None
            The record, or None when absent (or compacted away).
        """
        return self._load_json(self._batch_name(batch_id, kind))

    def last_epoch(self) -> dict[str, Any] | None:
        """Return the record of the newest run that claimed the identity, if any."""
        epochs = self._epochs()
        return self._load_json(f"epochs/{epochs[-1]:020d}.json") if epochs else None

    def compact(self, latest: int) -> int:
        """Drop records of committed batches older than ``latest - retain``.

        Between ``retain`` and ``retain * 1.1`` committed batches are kept: the
        work is done once every ``retain // 10`` batches.

        Parameters
        ----------
        latest
            The batch just committed.

        Returns
        -------
        int
            Number of files removed.
        """
        state = self.state
        horizon = latest - self.retain
        # Compact in steps of a tenth of the window, not after every batch: each
        # compaction rewrites state.json (an fsync) and lists the batches.
        if horizon - state.committed_through < max(1, self.retain // 10):
            return 0
        if any(b <= horizon for b in state.unfinished()):
            return 0  # never forget an unfinished batch
        summary = {"committed_through": horizon, "partition_slots": state.partition_slots}
        self.store.write("state.json", dump_record(summary), overwrite=True)
        removed = 0
        for name in self.store.list("batches"):
            match = BATCH_RE.match(name)
            if match and int(match.group(1)) <= horizon:
                self.store.delete(f"batches/{name}")
                removed += 1
        state.committed_through = horizon
        state.committed = {b for b in state.committed if b > horizon}
        state.decided = {b for b in state.decided if b > horizon}
        state.intents = {b: p for b, p in state.intents.items() if b > horizon}
        state.rewrite = {b for b in state.rewrite if b > horizon}
        state.lost = {b for b in state.lost if b > horizon}
        _log.debug("compacted %s: %d files up to batch %d", self.store.location, removed, horizon)
        return removed

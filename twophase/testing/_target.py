"""A fake transactional target: transactions you can open, prepare, commit and inspect.

Like Flink's test sinks, a transaction is a file: written under ``open/``,
renamed to ``prepared/`` by prepare, renamed to ``committed/`` by commit. A
rename is atomic, so a transaction is visible whole or not at all. The target
lives either in memory (fast, one process: :meth:`FakeTarget.in_memory`) or in
a directory (shared by Spark's executor processes: ``FakeTarget(path)``).

Fault rules (:meth:`FakeTarget.fail`, ``_fault_rules.py``) are stored in the
target too, so that executors see rules added after the sink was pickled, and
"fail N times" counts across processes.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from typing import Any

from .._values import DeadLetter, Fingerprint, Marker, TransactionStatus
from ..errors import AbortRequiredError, TransactionError
from ._fault_rules import FaultRules
from ._row_rules import RowRules
from ._storage import DirectoryStorage, MemoryStorage, Storage

__all__ = ["FakeTarget"]

_DIRS = ("open", "prepared", "committed", "faults", "fired", "rejects")
_MEMORY_REGISTRY: dict[str, Storage] = {}


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def _letter_key(letter: DeadLetter) -> tuple[str, int, int, int]:
    return (letter.sink, letter.batch_id, letter.partition_id, letter.position)


class FakeTarget(FaultRules, RowRules):
    """A transactional target for tests, with prepare, commit, markers, faults and dead letters.

    Rows refused by :meth:`reject` rules are set aside by the fake sinks
    (``bad_rows="dead_letter"``) in the dead-letter area of the same transaction
    (:meth:`add_dead_letters`), visible with its rows (:meth:`dead_letters`).

    Parameters
    ----------
    path
        Directory to keep the target in (shared between processes). Use
        :meth:`in_memory` for a single-process target.

    Examples
    --------
    >>> target = FakeTarget.in_memory()
    >>> target.begin("t1"); target.append("t1", [{"id": 1}]); target.prepare("t1")
    >>> target.committed_rows(), target.prepared()
    ([], ['t1'])
    >>> target.commit_prepared("t1"); target.committed_rows()
    [{'id': 1}]
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = os.fspath(path) if path is not None else None
        self._storage: Storage = (
            DirectoryStorage(self.path, _DIRS) if self.path is not None else MemoryStorage()
        )

    @classmethod
    def in_memory(cls) -> FakeTarget:
        """Return a target held in this process's memory.

        Returns
        -------
        FakeTarget
            A new, empty target. It pickles by identity only within a process:
            use a directory target with Spark.
        """
        return cls(None)

    def __getstate__(self) -> dict[str, Any]:
        if self.path is None:
            # An in-memory target pickles by reference to this process's
            # registry: copies made by the local runner share the same data.
            key = f"{id(self._storage):x}"
            _MEMORY_REGISTRY[key] = self._storage
            return {"path": None, "memory_key": key}
        return {"path": self.path}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        if self.path is None:
            storage = _MEMORY_REGISTRY.get(state["memory_key"])
            if storage is None:
                raise RuntimeError(
                    "an in-memory FakeTarget cannot cross processes; use FakeTarget(path)"
                )
            self._storage = storage
        else:
            self._storage = DirectoryStorage(self.path, _DIRS)

    # ------------------------------------------------------- transactions
    def _txn_key(self, state: str, txn_id: str) -> str:
        if "/" in txn_id or txn_id.startswith("."):
            raise ValueError(f"invalid transaction id {txn_id!r}")
        return f"{state}/{txn_id}"

    def _committed_key(self, txn_id: str) -> str:
        # A transaction id may be reused after its transaction ended (a gid
        # after ROLLBACK PREPARED, or a buggy sink); committed entries never
        # overwrite each other, so duplicates stay visible to the assertions.
        return f"committed/{txn_id}#{uuid.uuid4().hex[:12]}"

    def _is_committed(self, txn_id: str) -> bool:
        return any(n.rsplit("#", 1)[0] == txn_id for n in self._storage.list("committed"))

    def _load(self, key: str) -> dict[str, Any] | None:
        raw = self._storage.get(key)
        return None if raw is None else dict(json.loads(raw))

    def begin(self, txn_id: str) -> None:
        """Open a transaction (an empty file under ``open/``).

        Parameters
        ----------
        txn_id
            Unique transaction id.
        """
        for state in ("open", "prepared"):
            if self._storage.get(self._txn_key(state, txn_id)) is not None:
                raise TransactionError(f"transaction {txn_id} already exists ({state})")
        self._storage.put(self._txn_key("open", txn_id), json.dumps({"rows": []}).encode())

    def append(self, txn_id: str, rows: list[dict[str, Any]]) -> None:
        """Add rows to an open transaction.

        Parameters
        ----------
        txn_id
            An open transaction.
        rows
            Rows as dicts (JSON-able; bytes are stored as hex).
        """
        key = self._txn_key("open", txn_id)
        record = self._load(key)
        if record is None:
            raise AbortRequiredError(f"transaction {txn_id} is not open")
        record["rows"].extend(json.loads(json.dumps(rows, default=_json_default)))
        self._storage.put(key, json.dumps(record).encode())

    def add_dead_letters(self, txn_id: str, letters: list[DeadLetter]) -> None:
        """Add dead letters to an open transaction: they commit or roll back with its rows.

        Parameters
        ----------
        txn_id
            An open transaction.
        letters
            The dead letters.
        """
        key = self._txn_key("open", txn_id)
        record = self._load(key)
        if record is None:
            raise AbortRequiredError(f"transaction {txn_id} is not open")
        record.setdefault("dead_letters", []).extend(letter.__dict__ for letter in letters)
        self._storage.put(key, json.dumps(record).encode())

    def add_redriven(self, txn_id: str, letters: list[DeadLetter]) -> None:
        """Remove dead letters in an open transaction: they leave when it commits.

        Parameters
        ----------
        txn_id
            An open transaction (a redrive's, which also appends the letters' rows).
        letters
            The dead letters moved back into the target.
        """
        key = self._txn_key("open", txn_id)
        record = self._load(key)
        if record is None:
            raise AbortRequiredError(f"transaction {txn_id} is not open")
        record.setdefault("redriven", []).extend(_letter_key(letter) for letter in letters)
        self._storage.put(key, json.dumps(record).encode())

    def set_marker(self, txn_id: str, marker: Marker) -> None:
        """Attach an idempotence marker to an open transaction.

        Parameters
        ----------
        txn_id
            An open transaction.
        marker
            The marker; it becomes visible with the rows on commit.
        """
        key = self._txn_key("open", txn_id)
        record = self._load(key)
        if record is None:
            raise AbortRequiredError(f"transaction {txn_id} is not open")
        record["marker"] = {
            "identity": marker.identity,
            "batch_id": marker.batch_id,
            "partition_id": marker.partition_id,
            "attempt": marker.attempt,
            "fingerprint": str(marker.fingerprint),
        }
        self._storage.put(key, json.dumps(record).encode())

    def prepare(self, txn_id: str) -> None:
        """Move an open transaction to prepared (durable, invisible).

        Parameters
        ----------
        txn_id
            An open transaction.
        """
        if not self._storage.rename(
            self._txn_key("open", txn_id), self._txn_key("prepared", txn_id)
        ):
            raise AbortRequiredError(f"transaction {txn_id} is not open")

    def commit_prepared(self, txn_id: str) -> bool:
        """Commit a prepared transaction (idempotent).

        Parameters
        ----------
        txn_id
            A prepared or already committed transaction.

        Returns
        -------
        bool
            True if this call committed it, False if it was already committed.

        Raises
        ------
        TransactionError
            The transaction is neither prepared nor committed (it was rolled
            back, or never existed): committing it is impossible.
        """
        if self._storage.rename(self._txn_key("prepared", txn_id), self._committed_key(txn_id)):
            return True
        if self._is_committed(txn_id):
            return False
        raise TransactionError(f"transaction {txn_id} is neither prepared nor committed")

    def commit_open(self, txn_id: str) -> None:
        """Commit an open transaction directly (the markers protocol's local commit).

        Parameters
        ----------
        txn_id
            An open transaction.
        """
        if not self._storage.rename(self._txn_key("open", txn_id), self._committed_key(txn_id)):
            if self._is_committed(txn_id):
                return
            raise AbortRequiredError(f"transaction {txn_id} is not open")

    def rollback(self, txn_id: str) -> bool:
        """Discard an open or prepared transaction (idempotent).

        Parameters
        ----------
        txn_id
            The transaction.

        Returns
        -------
        bool
            True if something was discarded.
        """
        found = False
        for state in ("open", "prepared"):
            found = self._storage.delete(self._txn_key(state, txn_id)) or found
        return found

    # ----------------------------------------------------------- inspect
    def status(self, txn_id: str) -> TransactionStatus:
        """Return whether a transaction is prepared, committed, or neither (lost).

        Parameters
        ----------
        txn_id
            The transaction.

        Returns
        -------
        TransactionStatus
            ``LOST`` for one open, rolled back, or never seen.
        """
        if self._storage.get(self._txn_key("prepared", txn_id)) is not None:
            return TransactionStatus.PREPARED
        if self._is_committed(txn_id):
            return TransactionStatus.COMMITTED
        return TransactionStatus.LOST

    def open_transactions(self) -> list[str]:
        """Return ids of open transactions."""
        return self._storage.list("open")

    def prepared(self) -> list[str]:
        """Return ids of prepared (in-doubt) transactions."""
        return self._storage.list("prepared")

    def committed(self) -> list[str]:
        """Return ids of committed transactions (an id twice if committed twice)."""
        return [n.rsplit("#", 1)[0] for n in self._storage.list("committed")]

    def _committed_records(self) -> Iterator[dict[str, Any]]:
        for key in self._storage.list("committed"):
            record = self._load(f"committed/{key}")
            if record is not None:
                yield record

    def committed_rows(self) -> list[dict[str, Any]]:
        """Return every committed row (what a reader of the target sees)."""
        rows: list[dict[str, Any]] = []
        for record in self._committed_records():
            rows.extend(record["rows"])
        return rows

    def dead_letters(self) -> list[DeadLetter]:
        """Return every committed dead letter no redrive removed (what a reader sees)."""
        records = list(self._committed_records())
        gone = {tuple(key) for record in records for key in record.get("redriven", ())}
        letters = [
            DeadLetter(**letter) for record in records for letter in record.get("dead_letters", ())
        ]
        return [letter for letter in letters if _letter_key(letter) not in gone]

    def markers(self, identity: str | None = None, batch_id: int | None = None) -> list[Marker]:
        """Return committed markers, optionally of one identity and batch.

        Parameters
        ----------
        identity, batch_id
            Filters (None matches any).

        Returns
        -------
        list of Marker
            Markers of committed transactions only.
        """
        found = []
        for record in self._committed_records():
            m = record.get("marker")
            if not m:
                continue
            if identity is not None and m["identity"] != identity:
                continue
            if batch_id is not None and m["batch_id"] != batch_id:
                continue
            found.append(
                Marker(
                    m["identity"],
                    m["batch_id"],
                    m["partition_id"],
                    m["attempt"],
                    Fingerprint.parse(m["fingerprint"]),
                )
            )
        return found

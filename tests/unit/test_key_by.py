"""``key_by``: every row of a key reaches one participant, in the batch's order.

The sink here merges like the PostgreSQL connector's upsert/CDC: each
transaction applies its rows in order and computes its effect against what is
committed when it prepares, without seeing other transactions' uncommitted
rows. Without routing, a delete of a key created by another partition of the
same batch finds nothing to delete, and the key survives (issue 17).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from twophase import (
    ConfigurationError,
    RecoveryContext,
    TaskContext,
    TransactionHandle,
    TwoPhaseCommitSink,
)
from twophase.testing import LocalRunner

pytestmark = pytest.mark.unit


class MergingSink(TwoPhaseCommitSink[dict[str, Any], TransactionHandle]):
    """A keyed table in a JSON file; prepared effects in files beside it."""

    def __init__(self, root: Path, *, key_by: tuple[str, ...]) -> None:
        super().__init__("merge")
        self.root = root
        self.key_by = key_by

    def _table(self) -> dict[str, Any]:
        path = self.root / "table.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def begin_transaction(self, context: TaskContext) -> dict[str, Any]:
        return {"context": context, "rows": []}

    def write(self, txn: dict[str, Any], batch: pa.RecordBatch) -> None:
        txn["rows"].extend(batch.to_pylist())

    def pre_commit(self, txn: dict[str, Any]) -> TransactionHandle:
        visible = self._table()  # committed rows only, as PostgreSQL's READ COMMITTED
        effect: dict[str, Any] = {}
        for row in txn["rows"]:
            key = str(row["id"])
            exists = effect[key] is not None if key in effect else key in visible
            if row["op"] == "d":
                if exists:
                    effect[key] = None
            else:
                effect[key] = row["v"]
        c: TaskContext = txn["context"]
        (self.root / f"{c.transaction_id}.prepared").write_text(json.dumps(effect))
        return TransactionHandle(c.transaction_id, c.batch_id, c.partition_id, c.attempt)

    def abort(self, txn: dict[str, Any]) -> None:
        (self.root / f"{txn['context'].transaction_id}.prepared").unlink(missing_ok=True)

    def commit(self, handle: TransactionHandle) -> None:
        path = self.root / f"{handle.transaction_id}.prepared"
        if not path.exists():
            return
        table = self._table()
        for key, value in json.loads(path.read_text()).items():
            if value is None:
                table.pop(key, None)
            else:
                table[key] = value
        (self.root / "table.json").write_text(json.dumps(table))
        path.unlink()

    def list_in_doubt(self, context: RecoveryContext) -> list[TransactionHandle]:
        return []

    def recover_and_abort(self, handle: TransactionHandle) -> None:
        (self.root / f"{handle.transaction_id}.prepared").unlink(missing_ok=True)


def _changes(op: str, keys: range, v: int) -> list[dict[str, Any]]:
    return [{"id": k, "op": op, "v": v} for k in keys]


def _run(tmp_path: Path, key_by: tuple[str, ...], partitions: list[list[dict[str, Any]]]) -> Any:
    sink = MergingSink(tmp_path, key_by=key_by)
    runner = LocalRunner(sink)
    runner.run_batch(0, partitions)
    return sink._table()


def test_creates_and_deletes_in_two_partitions_without_routing_keep_the_keys(
    tmp_path: Path,
) -> None:
    # The failure the routing prevents: shows that this sink can tell the difference.
    table = _run(tmp_path, (), [_changes("c", range(100), 1), _changes("d", range(100), 2)])
    assert len(table) == 100


@pytest.mark.parametrize("partitions", [2, 3, 7])
def test_key_by_applies_creates_updates_and_deletes_in_batch_order(
    tmp_path: Path, partitions: int
) -> None:
    changes = [
        *_changes("c", range(100), 1),
        *_changes("u", range(50), 2),
        *_changes("d", range(0, 100, 2), 3),
        *_changes("c", range(0, 20, 2), 4),
    ]
    parts: list[list[dict[str, Any]]] = [[] for _ in range(partitions)]
    # Contiguous slices: a key's changes are spread over the partitions in order.
    size = -(-len(changes) // partitions)
    for index in range(partitions):
        parts[index] = changes[index * size : (index + 1) * size]
    expected: dict[str, Any] = {}
    for row in changes:
        if row["op"] == "d":
            expected.pop(str(row["id"]), None)
        else:
            expected[str(row["id"])] = row["v"]
    assert _run(tmp_path, ("id",), parts) == expected


def test_key_by_names_a_missing_column(tmp_path: Path) -> None:
    sink = MergingSink(tmp_path, key_by=("order_id",))
    with pytest.raises(ConfigurationError) as caught:
        LocalRunner(sink).run_batch(3, [_changes("c", range(2), 1), _changes("d", range(2), 2)])
    error = caught.value
    assert (error.sink, error.batch_id, error.column, error.setting) == (
        "merge",
        3,
        "order_id",
        "key_by",
    )

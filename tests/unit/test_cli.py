"""The ``twophase`` command on real stuck batches (production coordinator, SQLite target)."""

from __future__ import annotations

import contextlib
import json
import shutil
import sqlite3
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.sqlite_sink import SqliteSink
from twophase import ConcurrentQueryError, NondeterministicBatchError
from twophase._cli._commands import main
from twophase.testing import (
    FakeSink,
    FakeTarget,
    LocalRunner,
    SimulatedCrash,
    assert_exactly_once,
    with_faults,
)

pytestmark = pytest.mark.unit


def rows(batch: int, salt: str = "") -> list[list[dict[str, Any]]]:
    """Three partitions of three rows; ``salt`` makes a replay compute other payloads."""
    return [
        [{"id": batch * 100 + p * 10 + i, "payload": f"{salt}{p}.{i}"} for i in range(3)]
        for p in range(3)
    ]


def directory_fake_sink(name: str, path: str) -> FakeSink:
    """A --target factory for a fake of the coordinated protocol whose target lives in ``path``."""
    return FakeSink(name, FakeTarget(path))


class Stuck:
    """Batch 1 of a markers-protocol query stopped for good: 2 of 3 partitions committed, and the
    replay computes other rows (a nondeterministic pipeline)."""

    def __init__(self, tmp_path: Path) -> None:
        self.checkpoint = str(tmp_path / "chk")
        self.database = str(tmp_path / "events.db")
        with contextlib.closing(sqlite3.connect(self.database)) as conn:
            conn.execute("CREATE TABLE events (id INTEGER, payload TEXT)")
        rules = FakeTarget.in_memory()
        sink = with_faults(SqliteSink("events", self.database, "events"), rules)
        self.runner = LocalRunner(sink, self.checkpoint, max_task_failures=2)
        self.runner.run_batch(0, rows(0))
        rule = rules.fail("commit_with_marker", batch_id=1, partition_id=2, times=-1)
        with pytest.raises(Exception, match="injected fault"):
            self.runner.run_batch(1, rows(1))
        assert rules.fired(rule) == 2
        rules.clear_faults()
        self.runner.restart()
        with pytest.raises(NondeterministicBatchError, match="twophase resolve") as info:
            self.runner.run_batch(1, rows(1, salt="again-"))
        self.error = str(info.value)

    def target_args(self) -> list[str]:
        return [
            "--target",
            "examples.sqlite_sink:SqliteSink",
            "-o",
            f"database={self.database}",
            "-o",
            "table=events",
        ]

    def table(self) -> list[tuple[int, str]]:
        with contextlib.closing(sqlite3.connect(self.database)) as conn:
            return list(conn.execute("SELECT id, payload FROM events"))


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_status_shows_the_stuck_batch_its_markers_and_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = Stuck(tmp_path)
    code, out = run(capsys, "status", stuck.checkpoint, *stuck.target_args())
    assert code == 0, out
    assert "sink events  identity events." in out
    assert "committed         through batch 0, at 20" in out  # its time, then its rows
    assert ", 9 rows" in out
    assert "unfinished        batch 1 (markers): started with 3 partition(s)" in out
    assert "markers           2 of 3 partition(s) committed, 6 rows (p0=3, p1=3)" in out
    assert "in doubt          0 transaction(s) on the target" in out
    assert f"twophase resolve {stuck.checkpoint} --sink events --batch 1 --mark-committed" in out
    code, raw = run(capsys, "status", stuck.checkpoint, "--json", *stuck.target_args())
    (sink,) = json.loads(raw)["sinks"]
    last = sink["last_committed"]
    assert (last["batch"], last["rows"]) == (0, 9)
    assert 0 <= time.time() - last["committed_at"] < 600
    assert sink["unfinished"] == [
        {
            "batch": 1,
            "protocol": "markers",
            "partitions": 3,
            "rewrite_ordered": False,
            "markers": [
                {"partition": 0, "attempt": 0, "rows": 3},
                {"partition": 1, "attempt": 0, "rows": 3},
            ],
        }
    ]


def test_a_resolution_without_yes_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = Stuck(tmp_path)
    before = run(capsys, "status", stuck.checkpoint, "--json")[1]
    code, out = run(
        capsys, "resolve", stuck.checkpoint, "--sink", "events", "--batch", "1", "--mark-committed"
    )
    assert code == 2
    assert "RISK: LOSS" in out
    assert "nothing changed" in out
    assert run(capsys, "status", stuck.checkpoint, "--json")[1] == before
    stuck.runner.restart()
    with pytest.raises(NondeterministicBatchError):  # still stuck, and still safe
        stuck.runner.run_batch(1, rows(1, salt="again-"))


def test_mark_committed_keeps_what_committed_and_loses_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = Stuck(tmp_path)
    args = ["resolve", stuck.checkpoint, "--sink", "events", "--batch", "1", "--mark-committed"]
    code, out = run(capsys, *args, *stuck.target_args(), "--yes", "--reason", "test")
    assert code == 0, out
    assert "RISK: LOSS. 2 of 3 partition(s), 6 rows, of batch 1 are committed" in out
    # The run that got stuck is fenced by the command's epoch.
    with pytest.raises(ConcurrentQueryError):
        stuck.runner.run_batch(2, rows(2))
    stuck.runner.restart()
    assert stuck.runner.run_batch(1, rows(1, salt="again-")).outcome == "already-committed"
    stuck.runner.run_batch(2, rows(2))
    committed_of_1 = [r["id"] for part in rows(1)[:2] for r in part]
    everything = [r["id"] for b in (0, 2) for part in rows(b) for r in part] + committed_of_1
    assert_exactly_once([i for i, _ in stuck.table()], everything)
    code, out = run(capsys, "status", stuck.checkpoint)
    assert "unfinished        none" in out
    assert "committed         through batch 2" in out


def test_rewrite_writes_the_replay_whole_and_duplicates_what_committed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = Stuck(tmp_path)
    args = ["resolve", stuck.checkpoint, "--sink", "events", "--batch", "1", "--rewrite", "--yes"]
    code, out = run(capsys, *args)
    assert code == 0, out
    assert "RISK: DUPLICATES" in out
    assert "rewrite ordered" in run(capsys, "status", stuck.checkpoint)[1]
    stuck.runner.restart()
    metrics = stuck.runner.run_batch(1, rows(1, salt="again-"))
    assert (metrics.outcome, metrics.rows, metrics.skipped_partitions) == ("committed", 9, 0)
    ids = Counter(i for i, _ in stuck.table())
    first_two = {r["id"] for part in rows(1)[:2] for r in part}
    assert {i for i, n in ids.items() if n == 2} == first_two, "exactly the committed rows twice"
    assert sum(ids.values()) == 9 + 6 + 9
    assert "unfinished        none" in run(capsys, "status", stuck.checkpoint)[1]


def test_resolve_refuses_a_batch_that_is_not_a_stuck_markers_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = Stuck(tmp_path)
    code, out = run(
        capsys, "resolve", stuck.checkpoint, "--sink", "events", "--batch", "0", "--rewrite"
    )
    assert code == 1
    assert "batch 0 is not an unfinished batch of the markers protocol" in out
    code, out = run(capsys, "status", stuck.checkpoint, "--sink", "orders")
    assert code == 1
    assert "no coordinator log of a sink named 'orders'" in out


def test_abort_in_doubt_cleans_up_after_a_lost_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target_dir = str(tmp_path / "target")
    runner = LocalRunner(directory_fake_sink("orders", target_dir), tmp_path / "chk")
    runner.crash_at("phase1_done", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, rows(0))
    target = FakeTarget(target_dir)
    assert len(target.prepared()) == 3
    identity = runner.identity.token
    target_args = [
        "--target",
        "tests.unit.test_cli:directory_fake_sink",
        "-o",
        f"path={target_dir}",
    ]
    code, out = run(capsys, "abort-in-doubt", "--identity", identity, *target_args)
    assert code == 2
    assert "roll back 3 in-doubt transaction(s)" in out
    assert "RISK: LOSS" in out
    assert len(target.prepared()) == 3
    shutil.rmtree(tmp_path / "chk")  # the checkpoint is gone for good
    code, out = run(capsys, "abort-in-doubt", "--identity", identity, *target_args, "--yes")
    assert code == 0, out
    assert target.prepared() == []
    assert target.committed_rows() == []


def test_abort_in_doubt_refuses_while_the_checkpoint_needs_the_transactions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target_dir = str(tmp_path / "target")
    checkpoint = str(tmp_path / "chk")
    runner = LocalRunner(directory_fake_sink("orders", target_dir), checkpoint)
    runner.crash_at("decided", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, rows(0))
    target_args = [
        "--target",
        "tests.unit.test_cli:directory_fake_sink",
        "-o",
        f"path={target_dir}",
    ]
    code, out = run(
        capsys,
        "abort-in-doubt",
        "--identity",
        runner.identity.token,
        "--checkpoint",
        checkpoint,
        *target_args,
        "--yes",
    )
    assert code == 1
    assert "decided batches [0]" in out
    assert len(FakeTarget(target_dir).prepared()) == 3
    code, out = run(capsys, "status", checkpoint, *target_args)
    assert "decision recorded with 3 transaction(s)" in out
    assert "restarting the query commits its 3 prepared transaction(s)" in out


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("no_such_module_here:Sink", "cannot import 'no_such_module_here' in this Python"),
        ("examples.sqlite_sink:NoSuchSink", "has no callable 'NoSuchSink'"),
    ],
)
def test_a_target_that_cannot_be_loaded_is_named_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], spec: str, expected: str
) -> None:
    stuck = Stuck(tmp_path)
    code, out = run(capsys, "status", stuck.checkpoint, "--target", spec)
    assert code != 0
    assert "[setting='--target']" in out
    assert expected in out
    assert "Traceback" not in out

"""``twophase dead-letters list|redrive`` and ``status`` over fake sinks."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from twophase._cli._commands import main
from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget, LocalRunner

pytestmark = pytest.mark.unit

SINKS = {"coordinated": FakeSink, "markers": FakeMarkerSink}


def fake_sink(name: str, path: str, protocol: str = "markers") -> Any:
    """The ``--target`` factory: a fake sink with dead letters over the target in ``path``."""
    return SINKS[protocol](name, FakeTarget(path), bad_rows="dead_letter")


class Query:
    """Two batches of a sink that set rows aside: ids 3 and 7 too long, 5 not null."""

    def __init__(self, tmp_path: Path, protocol: str = "markers") -> None:
        self.path = str(tmp_path / "target")
        self.target = FakeTarget(self.path)
        self.too_long = self.target.reject("id", [3, 107], error_class="too_long", code="22001")
        self.not_null = self.target.reject("id", [5], error_class="not_null", code="23502")
        self.checkpoint = str(tmp_path / "chk")
        self.protocol = protocol
        runner = LocalRunner(fake_sink("orders", self.path, protocol), self.checkpoint)
        for b in (0, 1):
            runner.run_batch(b, [[{"id": b * 100 + i, "payload": f"p{i}"}] for i in range(9)])

    def args(self, *command: str) -> list[str]:
        return [
            *command,
            "--sink",
            "orders",
            "--target",
            f"{__name__}:fake_sink",
            "-o",
            f"path={self.path}",
            "-o",
            f"protocol={self.protocol}",
        ]

    def ids(self) -> tuple[list[int], list[int]]:
        return (
            sorted(r["id"] for r in self.target.committed_rows()),
            sorted(d.values()["id"] for d in self.target.dead_letters()),
        )


def test_list_groups_a_sinks_dead_letters_by_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = Query(tmp_path)
    assert main(query.args("dead-letters", "list")) == 0
    out = capsys.readouterr().out
    assert "sink orders: 3 dead letter(s), from batch 0 to batch 1" in out
    assert "2  too_long 22001 in column 'id'" in out
    assert "first: batch 0 partition 3 row 0" in out
    assert main([*query.args("dead-letters", "list"), "--json", "--show", "1"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["count"] == 3
    assert listed["batches"] == [0, 1]
    assert [(g["error_class"], g["count"]) for g in listed["errors"]] == [
        ("too_long", 2),
        ("not_null", 1),
    ]
    (letter,) = listed["letters"]
    assert letter["row"] == {"id": 3, "payload": "p3"}
    assert letter["code"] == "22001"


@pytest.mark.parametrize("protocol", SINKS)
def test_redrive_moves_the_rows_once_after_the_fix_and_only_with_yes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], protocol: str
) -> None:
    query = Query(tmp_path, protocol)
    good, dead = query.ids()
    assert dead == [3, 5, 107]
    assert len(good) == 15
    assert main(query.args("dead-letters", "redrive")) == 2  # the plan only
    assert "nothing changed" in capsys.readouterr().out
    assert query.ids() == (good, dead)
    query.target.allow(query.too_long)
    assert main([*query.args("dead-letters", "redrive"), "--yes"]) == 1
    out = capsys.readouterr().out
    assert "redriven: 2 row(s)" in out
    assert "still refused, left in the dead letters: 1 row(s)" in out
    assert "batch 0 partition 5 row 0: not_null 23502" in out
    assert query.ids() == (sorted([*good, 3, 107]), [5])
    query.target.allow(query.not_null)
    assert main([*query.args("dead-letters", "redrive"), "--yes"]) == 0
    assert query.ids() == (sorted([*good, 3, 5, 107]), [])
    assert main([*query.args("dead-letters", "redrive"), "--yes"]) == 0
    assert "no dead letters to redrive" in capsys.readouterr().out
    assert query.ids() == (sorted([*good, 3, 5, 107]), [])


def test_redrive_limit_takes_the_oldest(tmp_path: Path) -> None:
    query = Query(tmp_path)
    query.target.allow(query.too_long)
    query.target.allow(query.not_null)
    assert main([*query.args("dead-letters", "redrive"), "--limit", "2", "--yes"]) == 0
    assert query.ids()[1] == [107]


def test_a_failed_redrive_moves_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    query = Query(tmp_path)
    query.target.allow(query.too_long)
    rule = query.target.fail("redrive_dead_letters", times=1)
    before = query.ids()
    assert main([*query.args("dead-letters", "redrive"), "--yes"]) == 1
    assert "twophase: error: injected fault (redrive_dead_letters)" in capsys.readouterr().err
    assert query.target.fired(rule) == 1
    assert query.ids() == before


def test_status_counts_the_dead_letters_set_aside(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    query = Query(tmp_path)
    target = query.args()[2:]
    assert main(["status", query.checkpoint, *target]) == 0
    assert "dead letters      3 set aside (2 too_long, 1 not_null)" in capsys.readouterr().out
    assert main(["status", query.checkpoint, "--json", *target]) == 0
    (sink,) = json.loads(capsys.readouterr().out)["sinks"]
    assert sink["dead_letters"]["count"] == 3


def test_a_sink_that_cannot_list_its_dead_letters_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    database = tmp_path / "x.db"
    args = ["--sink", "s", "--target", "examples.sqlite_sink:SqliteSink"]
    args += ["-o", f"database={database}", "-o", "table=t"]
    assert main(["dead-letters", "list", *args]) == 1
    err = capsys.readouterr().err
    assert "sink s: SqliteSink does not implement read_dead_letters()" in err
    assert "(setting: --target)" in err or "--target" in err


def test_the_sqlite_example_redrives_in_one_transaction(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from examples.sqlite_sink import SqliteDeadLetterSink

    database = str(tmp_path / "events.db")
    with contextlib.closing(sqlite3.connect(database)) as conn:
        conn.execute("CREATE TABLE events (id INTEGER UNIQUE, payload TEXT NOT NULL)")
    sink = SqliteDeadLetterSink("events", database, "events", bad_rows="dead_letter")
    runner = LocalRunner(sink, tmp_path / "chk")
    runner.run_batch(0, [[{"id": 1, "payload": None}, {"id": 2, "payload": "b"}]])
    runner.run_batch(1, [[{"id": 3, "payload": None}]])
    args = ["--sink", "events", "--target", "examples.sqlite_sink:SqliteDeadLetterSink"]
    args += ["-o", f"database={database}", "-o", "table=events", "-o", "bad_rows=dead_letter"]

    def table() -> list[tuple[int, str | None]]:
        with contextlib.closing(sqlite3.connect(database)) as conn:
            return sorted(conn.execute("SELECT id, payload FROM events"))

    assert main(["dead-letters", "redrive", *args, "--yes"]) == 1  # not fixed: both stay
    assert "still refused, left in the dead letters: 2 row(s)" in capsys.readouterr().out
    assert [x.values()["id"] for x in sink.read_dead_letters()] == [1, 3]
    with contextlib.closing(sqlite3.connect(database)) as conn:  # the fix: payload nullable
        conn.executescript(
            "ALTER TABLE events RENAME TO old; CREATE TABLE events (id INTEGER UNIQUE, payload "
            "TEXT); INSERT INTO events SELECT * FROM old; DROP TABLE old;"
        )
    assert main(["dead-letters", "redrive", *args, "--limit", "1", "--yes"]) == 0
    assert table() == [(1, None), (2, "b")]
    assert main(["dead-letters", "redrive", *args, "--yes"]) == 0
    assert table() == [(1, None), (2, "b"), (3, None)]
    assert list(sink.read_dead_letters()) == []

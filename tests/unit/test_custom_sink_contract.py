"""The two complete sinks of docs/custom-sink.md pass the contract suite of their protocol."""

from __future__ import annotations

import contextlib
import json
import os
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from examples.custom_sink import JsonFilesSink
from examples.sqlite_sink import SqliteDeadLetterSink, SqliteSink, read_dead_letters
from twophase import DeadLetter
from twophase.testing import DeadLetterContract, MarkerSinkContract, TwoPhaseSinkContract

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


class TestJsonFilesSinkContract(TwoPhaseSinkContract):
    @pytest.fixture
    def make_sink(self, tmp_path: Path) -> Callable[[str], Any]:
        return lambda name: JsonFilesSink(name, str(tmp_path / "out"))

    @pytest.fixture
    def read_ids(self, tmp_path: Path) -> Callable[[], list[int]]:
        def read() -> list[int]:
            committed = tmp_path / "out" / "committed"
            if not committed.exists():
                return []
            return [
                json.loads(line)["id"]
                for name in os.listdir(committed)
                for line in (committed / name).read_text().splitlines()
            ]

        return read


class TestSqliteSinkContract(MarkerSinkContract):
    table = "CREATE TABLE events (id INTEGER, payload TEXT)"

    @pytest.fixture
    def database(self, tmp_path: Path) -> str:
        path = str(tmp_path / "target.db")
        with contextlib.closing(sqlite3.connect(path)) as conn:
            conn.execute(self.table)
        return path

    @pytest.fixture
    def make_sink(self, database: str) -> Callable[[str], Any]:
        return lambda name: SqliteSink(name, database, "events")

    @pytest.fixture
    def read_ids(self, database: str) -> Callable[[], list[int]]:
        def read() -> list[int]:
            with contextlib.closing(sqlite3.connect(database)) as conn:
                return [row[0] for row in conn.execute("SELECT id FROM events")]

        return read


class TestSqliteDeadLetterSinkContract(DeadLetterContract, TestSqliteSinkContract):
    table = "CREATE TABLE events (id INTEGER, payload TEXT NOT NULL)"  # a null payload: refused

    @pytest.fixture
    def make_sink(self, database: str) -> Callable[[str], Any]:
        return lambda name: SqliteDeadLetterSink(name, database, "events", bad_rows="dead_letter")

    @pytest.fixture
    def read_dead_letters(self, database: str) -> Callable[[], list[DeadLetter]]:
        return lambda: read_dead_letters(database)


@pytest.mark.parametrize("example", ["custom_sink.py", "sqlite_sink.py"])
def test_the_docs_show_the_tested_code(example: str) -> None:
    # Every class shown in docs/custom-sink.md is the tested example, verbatim.
    doc = (ROOT / "docs" / "custom-sink.md").read_text()
    source = (ROOT / "examples" / example).read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", doc, re.S) if "class " in b]
    shown = [b for b in blocks if b.strip() in source]
    assert shown, f"docs/custom-sink.md shows no class of examples/{example} verbatim"
    if example == "sqlite_sink.py":  # "Rejecting rows: dead letters" shows the tested sink
        assert any("class SqliteDeadLetterSink(SqliteSink):" in b for b in shown)

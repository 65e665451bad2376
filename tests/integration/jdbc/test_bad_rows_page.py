"""docs/bad-rows.md's redrive example runs as written, on the real PostgreSQL, both protocols.

The page's blocks are taken from the page: the sink (Python), ``dead-letters list``, the fix (SQL)
and ``dead-letters redrive`` (the ``twophase`` command, in a subprocess, as a user types it). Only
the table and sink name (a fresh one) and the DSN (the test server's) are replaced.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from jdbc_support import PgTarget

from twophase.testing import LocalRunner

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

PAGE = Path(__file__).resolve().parents[3] / "docs" / "bad-rows.md"
DSN = "host=db dbname=shop user=etl"


def blocks(language: str) -> list[str]:
    section = PAGE.read_text().split("## Redrive", 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def command(text: str, name: str, dsn: str, *, confirm: bool = True) -> list[str]:
    words = shlex.split(text.replace("\\\n", " "))
    words = [dsn if w == f"dsn={DSN}" else w for w in words]
    words = [f"dsn={dsn}" if w == dsn else w.replace("orders", name) for w in words]
    assert words[0] == "twophase"
    return [sys.executable, "-m", "twophase", *(w for w in words[1:] if confirm or w != "--yes")]


def test_the_redrive_example_moves_the_refused_row_back_once(pg: PgTarget, tmp_path: Path) -> None:
    name = f"orders_{uuid.uuid4().hex[:8]}"
    pg.sql(f"CREATE TABLE {name} (id integer PRIMARY KEY, note text NOT NULL)")
    (make_sink,) = blocks("python")
    scope: dict[str, object] = {}
    exec(make_sink.replace(DSN, pg.dsn).replace('"orders"', f'"{name}"'), scope)
    sink = scope["sink"]
    batch = pa.record_batch({"id": [1, 2], "note": ["paid", None]})
    metrics = LocalRunner(sink, tmp_path / "chk").run_batch(0, [[batch]])
    assert metrics.dead_lettered == 1
    listing, redrive = blocks("bash")
    (fix,) = blocks("sql")

    def run(text: str, expect: int, *, confirm: bool = True) -> str:
        done = subprocess.run(
            command(text, name, pg.dsn, confirm=confirm), capture_output=True, text=True
        )
        assert done.returncode == expect, done.stdout + done.stderr
        return done.stdout

    out = run(listing, 0)
    assert f"sink {name}: 1 dead letter(s), from batch 0 to batch 0" in out
    assert "not_null 23502 in column 'note'" in out
    assert "nothing changed" in run(redrive, 2, confirm=False)
    assert "still refused, left in the dead letters: 1 row(s)" in run(redrive, 1)
    pg.sql(fix.replace("orders", name))
    assert "redriven: 1 row(s) written to the target" in run(redrive, 0)
    assert pg.rows(name) == [(1, "paid"), (2, None)]
    assert f"sink {name}: no dead letters" in run(listing, 0)
    assert "no dead letters to redrive" in run(redrive, 0)
    assert pg.rows(name) == [(1, "paid"), (2, None)]

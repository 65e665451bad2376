"""``twophase abort-in-doubt`` against the real server: prepared orphans of a lost checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from jdbc_support import PgTarget, id_batch

from twophase._cli._commands import main
from twophase.testing import LocalRunner, SimulatedCrash

pytestmark = pytest.mark.integration


def test_abort_in_doubt_rolls_back_the_prepared_gids_of_a_lost_checkpoint(
    pg_a: PgTarget, table: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pg_a.sql(f'CREATE TABLE "{table}" (id bigint NOT NULL, payload text)')
    runner = LocalRunner(pg_a.sink("lost", table), tmp_path / "chk")
    crash = runner.crash_at("phase1_done", 0)
    with pytest.raises(SimulatedCrash):
        runner.run_batch(0, [[id_batch([p * 10 + i for i in range(3)])] for p in range(3)])
    assert crash.fired
    identity = runner.identity.token
    assert len(pg_a.prepared()) == 3
    target = [
        "--target",
        "twophase.connectors.jdbc:postgres_sink",
        "-o",
        f"table={table}",
        "-o",
        f"dsn={pg_a.dsn}",
        "-o",
        "protocol=coordinated",
    ]
    shutil.rmtree(tmp_path / "chk")  # the checkpoint is gone for good
    assert main(["abort-in-doubt", "--identity", identity, *target]) == 2
    plan = capsys.readouterr().out
    assert "roll back 3 in-doubt transaction(s)" in plan
    assert f"tp:{identity}:0:0:0" in plan
    assert len(pg_a.prepared()) == 3, "a plan without --yes changed something"
    assert main(["abort-in-doubt", "--identity", identity, *target, "--yes"]) == 0
    assert pg_a.prepared() == []
    assert pg_a.ids(table) == []

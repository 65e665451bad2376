"""A real Spark query stuck on a nondeterministic markers batch, finished with ``twophase``."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from tests.spark.helpers import run_query, write_input
from twophase._cli._commands import main
from twophase.testing import CrashAt, FakeMarkerSink, FakeTarget, install_step_listener

pytestmark = pytest.mark.spark


def with_noise(df: Any) -> Any:
    # rand() in a written column: every run of a batch computes other rows
    return df.repartition(2).selectExpr("id", "concat(payload, '-', rand()) AS payload")


def test_nondeterministic_batch_stuck_after_a_crash_is_finished_by_mark_committed(
    spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = FakeTarget(tmp_path / "target")
    expected = write_input(tmp_path / "in", 3)
    checkpoint = str(tmp_path / "chk")
    sink = FakeMarkerSink("noisy", target)
    crash = CrashAt("phase1_done", batch_id=1, as_exception=True)
    install_step_listener(sink, crash)
    with pytest.raises(StreamingQueryException, match="simulated driver crash"):
        run_query(spark, tmp_path / "in", Path(checkpoint), sink, with_noise)
    assert crash.fired
    committed_before = Counter(r["id"] for r in target.committed_rows())
    with pytest.raises(StreamingQueryException, match="twophase resolve"):
        run_query(
            spark, tmp_path / "in", Path(checkpoint), FakeMarkerSink("noisy", target), with_noise
        )
    assert Counter(r["id"] for r in target.committed_rows()) == committed_before

    assert main(["status", checkpoint]) == 0
    status = capsys.readouterr().out
    assert "spark: offsets up to batch 1, commits up to batch 0" in status
    assert "unfinished        batch 1 (markers): started with 2 partition(s)" in status
    args = ["resolve", checkpoint, "--sink", "noisy", "--batch", "1", "--mark-committed", "--yes"]
    assert main(args) == 0
    assert "RISK: LOSS" in capsys.readouterr().out

    run_query(spark, tmp_path / "in", Path(checkpoint), FakeMarkerSink("noisy", target), with_noise)
    ids = Counter(r["id"] for r in target.committed_rows())
    # batch 1 committed whole before the crash (phase 1 was done): nothing lost, nothing twice
    assert ids == Counter(expected)
    assert main(["status", checkpoint]) == 0
    after = capsys.readouterr().out
    assert "spark: offsets up to batch 2, commits up to batch 2" in after
    assert "unfinished        none" in after

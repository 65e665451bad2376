"""The chaos harness's operator step for an interrupted first offset write (docs/operations.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import clear_interrupted_offset_write

pytestmark = pytest.mark.unit

REFUSAL = (
    "org.apache.spark.sql.execution.streaming.state.StateStoreCheckpointLocationNotEmpty: "
    "[STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY] The checkpoint location .../offsets should be "
    "empty on batch 0\n"
)


def _checkpoint(tmp_path: Path, *names: str) -> Path:
    offsets = tmp_path / "chk" / "offsets"
    offsets.mkdir(parents=True)
    for name in names:
        (offsets / name).write_text("")
    return tmp_path / "chk"


def test_the_temporary_file_of_an_unwritten_batch_goes_after_spark_refused(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    log.write_text(REFUSAL)
    chk = _checkpoint(tmp_path, ".0.e0d80afe.tmp")
    assert clear_interrupted_offset_write(log, chk) == ["offsets/.0.e0d80afe.tmp"]
    assert list((chk / "offsets").iterdir()) == []


@pytest.mark.parametrize(
    ("log_text", "files"),
    [
        ("query failed (other): something else\n", [".0.e0d80afe.tmp"]),  # Spark did not refuse
        (REFUSAL, ["0", ".0.e0d80afe.tmp"]),  # the batch's offsets are written: not ours to touch
        (REFUSAL, ["0", "1"]),  # nothing temporary
    ],
)
def test_nothing_else_is_touched(tmp_path: Path, log_text: str, files: list[str]) -> None:
    log = tmp_path / "driver.log"
    log.write_text(log_text)
    chk = _checkpoint(tmp_path, *files)
    assert clear_interrupted_offset_write(log, chk) == []
    assert sorted(p.name for p in (chk / "offsets").iterdir()) == sorted(files)

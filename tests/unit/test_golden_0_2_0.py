"""Golden files: every durable record twophase 0.2.0 wrote, read by this release field by field.

The files under ``tests/golden/v0_2_0/`` were written by the 0.2.0 code itself
(``tests/golden/generate_v0_2_0.py``, run once against commit c8a9d03); their
``MANIFEST.json`` says what each holds. This module reads the coordinator log's
records and the Kafka control records; ``tests/integration/jdbc/test_jdbc_golden_rows.py``
reads the database rows into the tables 0.2.0 made.
"""

from __future__ import annotations

import base64
import json
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

from twophase import CoordinatorLogError, TransactionHandle, TwoPhaseCommitSink
from twophase._log._coordinator_log import CoordinatorLog
from twophase._stores._store import LocalFileStore
from twophase.connectors.jdbc._mariadb._dialect import MariaDBTwoPhaseSink
from twophase.connectors.jdbc._postgres._dialect import PostgresTwoPhaseSink
from twophase.connectors.kafka._attempt_fence import decode_fence
from twophase.connectors.kafka._marker_records import decode_marker
from twophase.testing import FakeSink

pytestmark = pytest.mark.unit

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v0_2_0"
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text())
LOG_FILES = [f for f in MANIFEST["files"] if f["path"].startswith(("log_api/", "log_runs/"))]
DECISIONS = [f for f in LOG_FILES if f["path"].endswith(".decision.json")]

#: The sink class whose decode_handle reads a 0.2.0 handle class.
SINKS: dict[str, type[TwoPhaseCommitSink[Any, Any]]] = {
    "twophase._types.TransactionHandle": FakeSink,
    "twophase.connectors.jdbc._prepared.PostgresHandle": PostgresTwoPhaseSink,
    "twophase.connectors.jdbc._mariadb._xa.MariaDBHandle": MariaDBTwoPhaseSink,
}


def _scenario(entry: dict[str, Any], tmp_path: Path) -> tuple[CoordinatorLog, str]:
    """A copy of the entry's log directory (reading must not change the golden files)."""
    scenario = entry["path"].split("/batches/")[0].split("/epochs/")[0].removesuffix("/state.json")
    copy = tmp_path / "log"
    shutil.copytree(GOLDEN / scenario, copy)
    log = CoordinatorLog(LocalFileStore(str(copy)), sink="golden", identity="golden")
    return log, entry["path"][len(scenario) + 1 :]


def _sink_for(class_name: str) -> TwoPhaseCommitSink[Any, Any]:
    cls = SINKS[class_name]
    return cls.__new__(cls)  # the default codec needs only the class


def test_every_log_scenario_of_0_2_0_is_here() -> None:
    scenarios = {f["path"].split("/")[1] for f in LOG_FILES}
    assert {"fake_handle", "postgres_handle", "mariadb_handle", "compaction", "rewrite"} <= (
        scenarios
    )
    assert len(DECISIONS) >= 7, "decisions of every handle class, by the API and by real runs"


@pytest.mark.parametrize("entry", LOG_FILES, ids=lambda f: f["path"])
def test_each_0_2_0_log_record_reads_field_by_field(entry: dict[str, Any], tmp_path: Path) -> None:
    log, name = _scenario(entry, tmp_path)
    raw = (GOLDEN / entry["path"]).read_bytes()
    assert b'"format"' not in raw, "a 0.2.0 record has no format (it is format 1)"
    record = log._load_json(name)
    assert record is not None
    assert sorted(record) == sorted(entry["fields"])
    for field, value in entry["expect"].items():
        assert record[field] == value, field


@pytest.mark.parametrize("entry", DECISIONS, ids=lambda f: f["path"])
def test_each_0_2_0_decision_gives_its_handles_through_the_sinks_codec(
    entry: dict[str, Any], tmp_path: Path
) -> None:
    log, name = _scenario(entry, tmp_path)
    batch = int(Path(name).name.split(".")[0])
    expected = entry["handles_decoded"]
    sink = _sink_for(expected[0]["class"])
    handles = log.read_decision(batch, sink.decode_handle)
    assert len(handles) == len(expected)
    for handle, want in zip(handles, expected, strict=True):
        assert type(handle) is type(sink).handle_type
        assert type(handle).__name__ == want["class"].rsplit(".", 1)[1]
        for field, value in want["fields"].items():
            assert getattr(handle, field) == value, field


@pytest.mark.parametrize("scenario", sorted({f["path"].split("/")[1] for f in LOG_FILES}))
def test_each_0_2_0_log_loads_into_the_same_state(scenario: str, tmp_path: Path) -> None:
    root = next(GOLDEN.glob(f"*/{scenario}"))
    shutil.copytree(root, tmp_path / "log")
    state = CoordinatorLog(LocalFileStore(str(tmp_path / "log")), sink="g", identity="g").load()
    names = [p.name for p in (root / "batches").glob("*.json")]
    kinds = {
        k: {int(n[:20]) for n in names if n.endswith(f".{k}.json")}
        for k in ("intent", "decision", "committed", "rewrite")
    }
    assert state.committed == kinds["committed"]
    assert state.decided == kinds["decision"]
    assert set(state.intents) == kinds["intent"]
    assert state.rewrite == kinds["rewrite"]
    summary = root / "state.json"
    if summary.exists():
        assert state.committed_through == json.loads(summary.read_text())["committed_through"]


def test_a_log_of_0_2_0_gets_format_2_records_beside_its_own(tmp_path: Path) -> None:
    """An upgraded run appends records of its format; both kinds keep reading."""
    shutil.copytree(GOLDEN / "log_api" / "postgres_handle", tmp_path / "log")
    log = CoordinatorLog(LocalFileStore(str(tmp_path / "log")), sink="g", identity="g")
    log.load()
    log.claim("run-2", "q")
    sink = _sink_for("twophase.connectors.jdbc._prepared.PostgresHandle")
    old = log.read_decision(12, sink.decode_handle)
    log.record_decision(13, old, {"rows": 3}, sink.encode_handle)
    record = json.loads((tmp_path / "log/batches/00000000000000000013.decision.json").read_text())
    assert record["format"] == 2
    assert record["writer"].startswith("twophase ")
    assert "handles" not in record
    assert log.read_decision(13, sink.decode_handle) == old


# ------------------------------------------------------------------------------ Kafka
KAFKA = json.loads((GOLDEN / "kafka" / "control_topic_records.json").read_text())
KAFKA_RECORDS = [r for r in KAFKA["read_committed_records"] if r["value_base64"] is not None]


def test_the_0_2_0_control_topic_holds_markers_and_fences() -> None:
    assert {r["kind"] for r in KAFKA_RECORDS} >= {"marker", "fence"}


@pytest.mark.parametrize("record", KAFKA_RECORDS, ids=lambda r: f"{r['kind']}@{r['offset']}")
def test_each_0_2_0_control_record_reads_field_by_field(record: dict[str, Any]) -> None:
    value = base64.b64decode(record["value_base64"])
    body = record["value_json"]
    assert json.loads(value) == body
    if record["kind"] == "fence":
        fence = decode_fence(value, where="golden")
        assert (fence.epoch, fence.batch, fence.partition, fence.attempt) == (
            body["epoch"],
            body["batch"],
            body["partition"],
            body["attempt"],
        )
    else:
        marker = decode_marker(value, where="golden")
        assert marker.identity == body["identity"] == KAFKA["identity"]
        assert (marker.batch_id, marker.partition_id, marker.attempt) == (
            body["batch"],
            body["partition"],
            body["attempt"],
        )
        assert str(marker.fingerprint) == body["fingerprint"]


@pytest.mark.parametrize("kind", ["marker", "fence"])
def test_a_control_record_of_a_newer_format_is_refused_by_name(kind: str) -> None:
    record = next(r for r in KAFKA_RECORDS if r["kind"] == kind)
    body = {**record["value_json"], "v": 2}
    decode = decode_fence if kind == "fence" else decode_marker
    with pytest.raises(CoordinatorLogError, match=r"format version 2, written by a newer") as err:
        decode(json.dumps(body).encode(), where="topic ctl, offset 7")
    assert "offset 7" in str(err.value)
    assert "reads version 1" in str(err.value)


# ----------------------------------------------------------------- the 0.2.0 pickles
def test_the_golden_pickles_name_only_the_classes_0_2_0_shipped() -> None:
    for entry in DECISIONS:
        assert set(entry["pickle_refers_to"]) <= set(SINKS), entry["path"]


def test_a_handle_pickle_is_never_unpickled_by_the_standard_unpickler(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("pickle.loads was called on a durable record")

    monkeypatch.setattr(pickle, "loads", refuse)
    entry = next(d for d in DECISIONS if "postgres_handle" in d["path"])
    log, _ = _scenario(entry, tmp_path)
    sink = _sink_for("twophase.connectors.jdbc._prepared.PostgresHandle")
    assert [h.xid for h in log.read_decision(12, sink.decode_handle)] == [748213, None]


def test_transaction_handle_is_the_fake_sinks_handle_type() -> None:
    assert FakeSink.handle_type is TransactionHandle

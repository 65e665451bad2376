"""``writeStream.format(...)`` under Spark Connect: the data source runs in the server.

The Connect server (the driver) is SIGKILLed inside the data source's ``commit`` of batch 1,
started again, and the query run again from its checkpoint.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.connect.support import crash_server, run_to_end
from tests.spark.format_support import skip_unless_format_runs, start_format_query
from tests.spark.helpers import table_ids, write_input
from twophase.testing import FakeTarget, assert_exactly_once
from twophase_dev import SparkConnectServer

pytestmark = [pytest.mark.connect, pytest.mark.spark, pytest.mark.slow]
skip_unless_format_runs()


# The same crash point in the same data source is killed on the classic path
# (tests/spark/test_format.py), and a Connect server running it is killed with PostgreSQL below.
@pytest.mark.extended
def test_format_with_a_fake_sink_on_connect_is_exactly_once_across_a_server_crash(
    connect_server: SparkConnectServer, tmp_path: Path
) -> None:
    expected = write_input(tmp_path / "in", 3)
    target = FakeTarget(tmp_path / "target")
    options = {"target": str(tmp_path / "target"), "name": "fmt"}

    def start(extra: dict[str, str]) -> Any:
        return lambda spark: start_format_query(
            spark, tmp_path / "in", tmp_path / "chk", "fake", {**options, **extra}
        )

    crash_server(connect_server, start({"crash": "committed_handle:1"}), "committed_handle")
    assert 0 < len(target.committed_rows()) < len(expected), "the crash did not land in the query"
    assert target.prepared(), "a crash between two commits leaves a prepared transaction"
    run_to_end(connect_server, start({}))
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []


# Not in the default run (20-minute budget): the data source's recovery after its driver died at
# this step, with this sink, is tests/spark/test_format.py's (a Connect server is a classic driver
# running the same data source), and a Connect server's crash under a running query is
# test_connect_foreach_batch.py's; format() under Connect stays there with the task retry below.
@pytest.mark.integration
@pytest.mark.extended
def test_format_with_postgres_on_connect_is_exactly_once_across_a_server_crash(
    connect_server: SparkConnectServer, tmp_path: Path, postgres_server: Any
) -> None:
    table = f"fmt_{uuid.uuid4().hex[:8]}"
    options = {"dsn": postgres_server.dsn, "table": table, "name": "fmt", "createTable": "true"}
    # Batch 0, then batch 1, in whose commit the server dies; the restart finishes batch 1.
    expected = write_input(tmp_path / "in", 2)

    def start(extra: dict[str, str]) -> Any:
        return lambda spark: start_format_query(
            spark, tmp_path / "in", tmp_path / "chk", "postgres", {**options, **extra}
        )

    crash_server(connect_server, start({"crash": "decided:1"}), "decided")
    assert len(table_ids(postgres_server, table)) == 20, "batch 0 only should be visible"
    run_to_end(connect_server, start({}))
    assert_exactly_once(table_ids(postgres_server, table), expected)
    assert [g for g, _db in postgres_server.prepared_transactions() if ":fmt." in g] == []


def test_format_on_connect_retries_a_failed_task_and_writes_it_once(
    connect_server: SparkConnectServer, tmp_path: Path
) -> None:
    expected = write_input(tmp_path / "in", 2)
    target = FakeTarget(tmp_path / "target")
    fault = target.fail("pre_commit", batch_id=1, partition_id=0, attempt=0)
    options = {"target": str(tmp_path / "target"), "name": "fmt"}
    run_to_end(
        connect_server,
        lambda spark: start_format_query(spark, tmp_path / "in", tmp_path / "chk", "fake", options),
    )
    assert target.fired(fault) == 1, "the injected task failure did not fire"
    assert_exactly_once([r["id"] for r in target.committed_rows()], expected)
    assert target.prepared() == []

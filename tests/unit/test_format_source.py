"""The format() data source without Spark: what it refuses, and what it pickles."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.spark.format_support import skip_unless_format_runs

skip_unless_format_runs()

from pyspark import cloudpickle  # noqa: E402
from pyspark.sql.types import LongType, StructField, StructType  # noqa: E402

from twophase import ConfigurationError  # noqa: E402
from twophase._engine._participant import TaskResult  # noqa: E402
from twophase._spark._datasource import PreparedMessage  # noqa: E402
from twophase._spark._format import data_source  # noqa: E402
from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget  # noqa: E402

pytestmark = pytest.mark.unit

BUILT: list[str] = []


def build_a(options: Mapping[str, str]) -> Any:
    BUILT.append(options["target"])
    return FakeSink("fmt", FakeTarget(options["target"]))


def build_b(options: Mapping[str, str]) -> Any:
    return FakeMarkerSink("fmt", FakeTarget(options["target"]))


def test_a_markers_sink_is_refused_with_the_reason(tmp_path: Path) -> None:
    source = data_source("fmt-b", build_b)
    with pytest.raises(
        ConfigurationError, match="runs sinks of the coordinated protocol only"
    ) as caught:
        source({"target": str(tmp_path), "checkpointLocation": str(tmp_path / "chk")})
    assert caught.value.sink == "fmt"
    assert caught.value.setting == "protocol"
    assert "foreachBatch(sink)" in str(caught.value)


def build_keyed(options: Mapping[str, str]) -> Any:
    sink = FakeSink("fmt", FakeTarget(options["target"]))
    sink.key_by = ("order_id",)
    return sink


def test_a_sink_that_routes_rows_by_key_is_refused_with_the_reason(tmp_path: Path) -> None:
    # A data source writer gets the partitions Spark planned: it cannot route a key's rows to one
    # transaction, which an upsert or CDC sink needs (issue 17).
    source = data_source("fmt-keyed", build_keyed)
    with pytest.raises(
        ConfigurationError, match="cannot run a sink that routes the rows of a key"
    ) as caught:
        source({"target": str(tmp_path), "checkpointLocation": str(tmp_path / "chk")})
    assert caught.value.sink == "fmt"
    assert caught.value.setting == "key_by"
    assert "order_id" in str(caught.value)
    assert "foreachBatch(sink)" in str(caught.value)


def test_a_mode_option_that_routes_by_key_is_the_setting_the_refusal_names(
    tmp_path: Path,
) -> None:
    # A connector's format takes mode=upsert, not key_by: the refusal names what the user set.
    source = data_source("fmt-keyed-mode", build_keyed)
    options = {"target": str(tmp_path), "Mode": "upsert", "checkpointLocation": str(tmp_path)}
    with pytest.raises(ConfigurationError, match="cannot run a sink that routes") as caught:
        source(options)
    assert caught.value.setting == "Mode"
    assert "Mode='upsert' routes by key_by=['order_id']" in str(caught.value)


def test_the_checkpoint_location_is_required(tmp_path: Path) -> None:
    source = data_source("fmt-a", build_a)
    with pytest.raises(ConfigurationError, match="checkpointLocation") as caught:
        source({"target": str(tmp_path)})
    assert caught.value.setting == "checkpointLocation"


def test_complete_output_mode_is_refused(tmp_path: Path) -> None:
    source = data_source("fmt-a", build_a)({"target": str(tmp_path), "CHECKPOINTLOCATION": "/c"})
    schema = StructType([StructField("id", LongType())])
    with pytest.raises(ConfigurationError, match="complete") as caught:
        source.streamWriter(schema, True)
    assert caught.value.setting == "outputMode"


def test_each_process_builds_its_own_sink_from_the_options(tmp_path: Path) -> None:
    BUILT.clear()
    source = data_source("fmt-a", build_a)({"target": str(tmp_path), "checkpointLocation": "/c"})
    assert source.name() == "fmt-a"
    assert source.checkpoint == "/c"
    assert "checkpointLocation" not in source.sink_options
    copy = pickle.loads(cloudpickle.dumps(source))  # as Spark sends it to another Python worker
    assert copy._sink is None
    assert copy.sink.name == "fmt"
    assert [str(tmp_path), str(tmp_path)] == BUILT


def test_a_commit_message_survives_pickling() -> None:
    message = PreparedMessage(TaskResult(partition_id=1, attempt=0, rows=3), epoch=7)
    assert pickle.loads(pickle.dumps(message)) == message

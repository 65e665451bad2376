"""What real-time mode refuses, by name, before the query starts (a real session, no query run)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as sf

import twophase
from twophase._pyspark import installed_version
from twophase.errors import ConfigurationError
from twophase.testing import FakeMarkerSink, FakeSink, FakeTarget

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(
        (installed_version() or (0, 0, 0))[:2] < (4, 1),
        reason="Spark's real-time mode is in PySpark 4.1 and later",
    ),
]

REALTIME = {"realTime": "10 seconds"}


def _kafka(spark: Any) -> Any:
    """A Kafka source; no broker is contacted before the query starts."""
    return (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", "127.0.0.1:9")
        .option("subscribe", f"t-{uuid.uuid4().hex[:8]}")
        .load()
        .selectExpr("CAST(key AS STRING) AS k", "CAST(value AS STRING) AS v", "partition")
    )


def _refused(df: Any, sink: Any, tmp_path: Path, **kwargs: Any) -> ConfigurationError:
    with pytest.raises(ConfigurationError) as caught:
        twophase.write_stream(
            df, sink, checkpoint_location=str(tmp_path / "chk"), trigger=REALTIME, **kwargs
        )
    assert caught.value.sink == sink.name
    assert not (tmp_path / "chk").exists(), "a refused query left a checkpoint"
    return caught.value


def _markers(tmp_path: Path, **kwargs: Any) -> FakeMarkerSink:
    return FakeMarkerSink("rt", FakeTarget(tmp_path / "target"), **kwargs)


def test_the_coordinated_protocol_is_refused(spark: Any, tmp_path: Path) -> None:
    error = _refused(_kafka(spark), FakeSink("rt", FakeTarget(tmp_path / "t")), tmp_path)
    assert error.setting == "protocol"
    assert "markers" in str(error)


def test_rows_routed_by_key_and_staging_are_refused(spark: Any, tmp_path: Path) -> None:
    keyed = _markers(tmp_path)
    keyed.key_by = ("k",)
    assert _refused(_kafka(spark), keyed, tmp_path).setting == "key_by"
    assert _refused(_kafka(spark), _markers(tmp_path, staging=True), tmp_path).setting == "staging"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda df: df.groupBy("k").count(), "the operator Aggregate"),
        (lambda df: df.repartition(3), "the operator Repartition"),
        (lambda df: df.dropDuplicates(["k"]), "the operator Deduplicate"),
        (lambda df: df.select(sf.udf(lambda v: v, "string")("v").alias("v")), "a Python UDF"),
    ],
    ids=["aggregation", "repartition", "deduplication", "python-udf"],
)
def test_an_operator_that_reorders_rows_or_holds_state_is_refused(
    spark: Any, tmp_path: Path, change: Any, named: str
) -> None:
    error = _refused(change(_kafka(spark)), _markers(tmp_path), tmp_path)
    assert named in str(error)
    assert error.setting == "trigger"


def test_a_source_other_than_kafka_is_refused(spark: Any, tmp_path: Path) -> None:
    rate = spark.readStream.format("rate").load()
    assert "only Kafka" in str(_refused(rate, _markers(tmp_path), tmp_path))


def test_settings_of_real_time_mode_are_refused_elsewhere_and_checked(
    spark: Any, tmp_path: Path
) -> None:
    df, sink = _kafka(spark), _markers(tmp_path)
    with pytest.raises(ConfigurationError, match="setting of real-time mode") as caught:
        twophase.write_stream(
            df, sink, checkpoint_location=str(tmp_path / "c"), commit_interval=0.5
        )
    assert caught.value.setting == "commit_interval"
    assert _refused(df, sink, tmp_path, commit_interval=0).setting == "commit_interval"
    assert _refused(df, sink, tmp_path, commit_rows=0).setting == "commit_rows"
    assert _refused(df, sink, tmp_path, arrow_batch_rows=1.5).setting == "arrow_batch_rows"
    with pytest.raises(ConfigurationError, match="setting of real-time mode") as caught:
        twophase.write_stream(df, sink, checkpoint_location=str(tmp_path / "c"), arrow_batch_rows=9)
    assert caught.value.setting == "arrow_batch_rows"
    two = [sink, FakeMarkerSink("rt2", FakeTarget(tmp_path / "t2"))]
    with pytest.raises(ConfigurationError, match="one sink per query"):
        twophase.write_stream(df, two, checkpoint_location=str(tmp_path / "c"), trigger=REALTIME)


def test_a_fit_query_gets_its_identity_before_it_starts(spark: Any, tmp_path: Path) -> None:
    writer = twophase.write_stream(
        _kafka(spark).where("v IS NOT NULL"),
        _markers(tmp_path),
        checkpoint_location=str(tmp_path / "chk"),
        trigger=REALTIME,
        query_name="rt_fit",
    )
    # Spark's metadata names the query before it starts: the identity is known to the tasks.
    metadata = (tmp_path / "chk" / "metadata").read_text()
    assert '"id"' in metadata
    runs = list((tmp_path / "chk" / "twophase" / "rt").iterdir())
    assert [run.name for run in runs] == [metadata.split('"')[3]]
    assert writer is not None

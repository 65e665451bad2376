"""The PySpark adapter (``twophase/_pyspark.py``): versions, features, the Arrow schema.

These run on whichever PySpark is installed; ``scripts/compat.sh`` runs them on every supported
version. What a version lacks is refused by name, never by a traceback from inside PySpark.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest

from twophase import ConfigurationError, _pyspark

pytestmark = pytest.mark.unit


Pretend = Callable[[tuple[int, int, int] | None], None]


@pytest.fixture
def pretend(monkeypatch: pytest.MonkeyPatch) -> Pretend:
    """Pretend another PySpark version is installed (None: none)."""

    def set_version(version: tuple[int, int, int] | None) -> None:
        monkeypatch.setattr(_pyspark, "installed_version", lambda: version)

    return set_version


@pytest.mark.parametrize("version", [(3, 4, 4), (2, 4, 8), (5, 0, 0)])
def test_a_pyspark_outside_the_range_is_refused_naming_both(
    pretend: Pretend, version: tuple[int, int, int]
) -> None:
    pretend(version)
    with pytest.raises(ImportError) as caught:
        _pyspark.check_installed()
    text = str(caught.value)
    assert ".".join(map(str, version)) in text
    assert _pyspark.SUPPORTED in text


@pytest.mark.parametrize("version", [(3, 5, 0), (3, 5, 9), (4, 0, 1), (4, 3, 0)])
def test_every_supported_version_is_accepted(
    pretend: Pretend, version: tuple[int, int, int]
) -> None:
    pretend(version)
    _pyspark.check_installed()


def test_no_pyspark_is_named_when_spark_is_needed(pretend: Pretend) -> None:
    pretend(None)
    _pyspark.check_installed()  # importing twophase (the test kit) needs no Spark
    with pytest.raises(ConfigurationError, match="none is installed") as caught:
        _pyspark.require("write_stream")
    assert caught.value.setting == "pyspark"
    assert "twophase[spark]" in str(caught.value)


@pytest.mark.parametrize("version", [(3, 5, 6), (4, 0, 1)])
def test_format_before_4_1_is_refused_naming_the_version_and_the_feature(
    pretend: Pretend, version: tuple[int, int, int]
) -> None:
    pretend(version)
    with pytest.raises(ConfigurationError) as caught:
        _pyspark.require_feature("format", sink="orders")
    text = str(caught.value)
    assert "format(...) needs PySpark 4.1" in text
    assert ".".join(map(str, version)) in text
    assert "foreachBatch" in text
    assert caught.value.sink == "orders"


@pytest.mark.parametrize("version", [(3, 5, 6), (4, 0, 1)])
def test_real_time_mode_before_4_1_is_refused_naming_the_version(
    pretend: Pretend, version: tuple[int, int, int]
) -> None:
    pretend(version)
    with pytest.raises(ConfigurationError) as caught:
        _pyspark.require_feature("realtime", sink="orders")
    text = str(caught.value)
    assert "trigger(realTime=...) needs PySpark 4.1" in text
    assert ".".join(map(str, version)) in text
    assert "processingTime" in text


def test_format_on_the_installed_version() -> None:
    version = _pyspark.installed_version()
    assert version is not None
    if version[:2] >= (4, 1):
        _pyspark.require_feature("format")
    else:
        with pytest.raises(ConfigurationError, match=r"needs PySpark 4\.1"):
            _pyspark.require_feature("format")


def test_the_arrow_schema_has_the_session_time_zone_at_every_depth() -> None:
    from pyspark.sql.types import (
        ArrayType,
        LongType,
        MapType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("at", TimestampType()),
            StructField("local", TimestampNTZType()),
            StructField("many", ArrayType(TimestampType())),
            StructField("nested", StructType([StructField("when", TimestampType())])),
            StructField("by_name", MapType(StringType(), TimestampType())),
        ]
    )
    arrow = _pyspark.arrow_schema(schema, timezone="Europe/Paris", prefers_large_types=False)
    zoned = pa.timestamp("us", tz="Europe/Paris")
    assert arrow.field("id").type == pa.int64()
    assert not arrow.field("id").nullable
    assert arrow.field("at").type == zoned
    assert arrow.field("local").type == pa.timestamp("us")
    assert arrow.field("many").type.value_type == zoned
    assert arrow.field("nested").type.field("when").type == zoned
    assert arrow.field("by_name").type.item_type == zoned
    assert pa.types.is_string(arrow.field("by_name").type.key_type)


def test_register_format_refuses_before_touching_the_session(pretend: Pretend) -> None:
    import twophase

    pretend((4, 0, 4))
    with pytest.raises(ConfigurationError, match=r"this is PySpark 4\.0\.4"):
        twophase.register_format(None, "orders-pg", lambda options: None)  # type: ignore[arg-type,return-value]


class _Conf:
    def __init__(self) -> None:
        self.values: dict[str, str] = {}

    def set(self, key: str, value: str) -> None:
        self.values[key] = value

    def get(self, key: str, default: str | None = None) -> str | None:
        return self.values.get(key, default)

    def unset(self, key: str) -> None:
        self.values.pop(key, None)


class _Query:
    """What a Connect ``StreamingQuery`` has that the adapter reads."""

    def __init__(self, session: object, query_id: str, run_id: str) -> None:
        self._session = session
        self.id = query_id
        self.runId = run_id


class _Session:
    """A Connect session: an id, a configuration, its running queries."""

    def __init__(self) -> None:
        self.session_id = "session-1"
        self.conf = _Conf()
        self.streams = self
        self.active: list[_Query] = []


@pytest.mark.parametrize(("version", "lost"), [((3, 5, 7), True), ((4, 0, 4), False)])
def test_a_connect_batch_error_is_left_in_the_session_where_the_server_loses_it(
    pretend: Pretend, version: tuple[int, int, int], lost: bool, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from twophase._spark import _connect
    from twophase.testing import FakeSink, FakeTarget

    pretend(version)
    assert _pyspark.connect_loses_batch_errors() is lost
    session = _Session()
    query = _Query(session, "q-1", "run-1")
    session.active = [query]
    refused = ConfigurationError("no checkpoint", sink="s", batch_id=3, setting="x")
    sink = FakeSink("s", FakeTarget(tmp_path / "target"))
    try:
        raise RuntimeError("the batch failed") from refused
    except RuntimeError as exc:
        _connect.record_failure(sink, SimpleNamespace(sparkSession=session), exc)  # type: ignore[arg-type]
    found = _connect.recorded_failure(query)
    if not lost:
        assert session.conf.values == {}
        assert found is None
        return
    assert isinstance(found, ConfigurationError)
    assert (found.sink, found.batch_id, found.setting) == ("s", 3, "x")
    assert session.conf.values == {}, "the client removes what it read"
    assert _connect.recorded_failure(query) is None


def test_no_error_is_recorded_for_a_query_that_cannot_be_told_apart(
    pretend: Pretend, tmp_path: Path
) -> None:
    from types import SimpleNamespace

    from twophase._spark import _connect
    from twophase.testing import FakeSink, FakeTarget

    pretend((3, 5, 7))
    session = _Session()
    session.active = [_Query(session, "q-1", "run-1"), _Query(session, "q-2", "run-2")]
    error = ConfigurationError("no checkpoint", sink="s", batch_id=0)
    sink = FakeSink("s", FakeTarget(tmp_path / "target"))
    _connect.record_failure(sink, SimpleNamespace(sparkSession=session), error)  # type: ignore[arg-type]
    assert session.conf.values == {}
    assert _pyspark.connect_recorded_failure(object()) is None  # a classic query

"""twophase_dev._jvm: the class-data archive is named after Java and the jars, used once made."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from twophase_dev import SHORT_LIVED_JVM_OPTIONS, _jvm, spark_class_archive, spark_jvm_options

pytestmark = pytest.mark.unit


@pytest.fixture
def spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    home = tmp_path / "pyspark"
    (home / "jars").mkdir(parents=True)
    for name in ("spark-core.jar", "scala-library.jar"):
        (home / "jars" / name).write_bytes(b"PK" + name.encode())
    monkeypatch.setattr(_jvm, "pyspark_home", lambda: home)
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    _jvm._archive_for.cache_clear()
    yield home
    _jvm._archive_for.cache_clear()


def test_without_the_archive_the_options_are_the_short_lived_ones(spark_home: Path) -> None:
    archive = spark_class_archive()
    assert archive is not None
    assert not archive.exists()
    assert archive.parent == spark_home.parent / "cache" / "jvm"
    assert spark_jvm_options() == SHORT_LIVED_JVM_OPTIONS


def test_once_made_every_spark_jvm_maps_it(spark_home: Path) -> None:
    archive = spark_class_archive()
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = spark_jvm_options().split()
    assert options[: len(SHORT_LIVED_JVM_OPTIONS.split())] == SHORT_LIVED_JVM_OPTIONS.split()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xlog:cds=off" in options


def test_another_jar_or_a_rewritten_one_names_another_archive(spark_home: Path) -> None:
    first = spark_class_archive()
    jar = spark_home / "jars" / "spark-core.jar"
    stat = jar.stat()
    os.utime(jar, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    _jvm._archive_for.cache_clear()
    rewritten = spark_class_archive()
    (spark_home / "jars" / "kafka-clients.jar").write_bytes(b"PK")
    _jvm._archive_for.cache_clear()
    added = spark_class_archive()
    assert len({first, rewritten, added}) == 3, (first, rewritten, added)

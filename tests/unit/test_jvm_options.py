"""twophase_dev._jvm: the class-data archives are named after Java and the jars, used once made."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from twophase_dev import (
    SHORT_LIVED_JVM_OPTIONS,
    DevInfraError,
    KafkaBroker,
    _jvm,
    spark_class_archive,
    spark_jvm_options,
)
from twophase_dev._jvm import make_class_archive
from twophase_dev._kafka._archive import _ArchivingBroker
from twophase_dev._kafka._install import kafka_class_archive, kafka_jvm_options

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


@pytest.fixture
def kafka_jars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Path]]:
    jars = [tmp_path / "maven" / name for name in ("kafka_2.13.jar", "kafka-clients.jar")]
    jars[0].parent.mkdir()
    for jar in jars:
        jar.write_bytes(b"PK" + jar.name.encode())
    monkeypatch.setenv("TWOPHASE_CACHE_DIR", str(tmp_path / "cache"))
    _jvm._archive_for.cache_clear()
    yield jars
    _jvm._archive_for.cache_clear()


def test_a_broker_starts_as_before_until_its_archive_is_made(kafka_jars: list[Path]) -> None:
    archive = kafka_class_archive(kafka_jars)
    assert archive is not None
    assert archive.name.startswith("kafka-")
    assert archive.parent == kafka_jars[0].parent.parent / "cache" / "jvm"
    assert kafka_jvm_options(kafka_jars) == SHORT_LIVED_JVM_OPTIONS
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    options = kafka_jvm_options(kafka_jars).split()
    assert options[: len(SHORT_LIVED_JVM_OPTIONS.split())] == SHORT_LIVED_JVM_OPTIONS.split()
    assert f"-XX:SharedArchiveFile={archive}" in options


def test_the_brokers_archive_follows_its_class_path_and_differs_from_sparks(
    kafka_jars: list[Path], spark_home: Path
) -> None:
    first = kafka_class_archive(kafka_jars)
    reordered = kafka_class_archive(kafka_jars[::-1])
    newer = kafka_jars[0].with_name("kafka-storage.jar")
    newer.write_bytes(b"PK")
    more = kafka_class_archive([*kafka_jars, newer])
    spark = spark_class_archive()
    assert first == kafka_class_archive(list(kafka_jars))
    assert len({first, reordered, more, spark}) == 4, (first, reordered, more, spark)


def _fake_run(partial_at: list[Path], *, dump: bool) -> Callable[[str], None]:
    def run(options: str) -> None:
        (flag,) = (o for o in options.split() if o.startswith("-XX:ArchiveClassesAtExit="))
        partial_at.append(Path(flag.split("=", 1)[1]))
        if dump:
            partial_at[-1].write_bytes(b"dumped")

    return run


def test_making_an_archive_renames_the_dump_and_is_done_once(kafka_jars: list[Path]) -> None:
    archive = kafka_class_archive(kafka_jars)
    partials: list[Path] = []
    made = make_class_archive(archive, "the run", _fake_run(partials, dump=True))
    assert made is not None
    assert made[0] == archive
    assert archive is not None
    assert archive.read_bytes() == b"dumped"
    (partial,) = partials
    assert partial.parent == archive.parent
    assert partial.name.startswith(f".{archive.name}.")
    assert not partial.exists()
    again = make_class_archive(archive, "the run", _fake_run(partials, dump=True))
    assert again == (archive, 0.0)
    assert len(partials) == 1


def test_a_run_that_dumps_nothing_fails_and_leaves_no_archive(kafka_jars: list[Path]) -> None:
    archive = kafka_class_archive(kafka_jars)
    partials: list[Path] = []
    with pytest.raises(DevInfraError, match="the run that makes the class-data archive"):
        make_class_archive(archive, "the run", _fake_run(partials, dump=False))
    assert archive is not None
    assert not archive.exists()
    assert len(partials) == 1
    assert make_class_archive(None, "the run", _fake_run(partials, dump=True)) is None
    assert len(partials) == 1


def test_every_jvm_of_a_broker_maps_it_and_only_the_archiving_broker_dumps(
    kafka_jars: list[Path], tmp_path: Path
) -> None:
    archive = kafka_class_archive(kafka_jars)
    assert archive is not None
    archive.parent.mkdir(parents=True)
    archive.write_bytes(b"archive")
    mapped = f"-XX:SharedArchiveFile={archive}"
    broker = KafkaBroker(work_dir=tmp_path / "broker")
    for main in ("kafka.tools.StorageTool", "kafka.Kafka"):
        assert mapped in broker._java_command(kafka_jars, main)
    archiving = _ArchivingBroker(work_dir=tmp_path / "archiving")
    archiving.dump_options = "-XX:ArchiveClassesAtExit=/dump.jsa"
    storage_tool = archiving._java_command(kafka_jars, "kafka.tools.StorageTool")
    dumping = archiving._java_command(kafka_jars, "kafka.Kafka")
    assert mapped in storage_tool
    assert "-XX:ArchiveClassesAtExit=/dump.jsa" not in storage_tool
    assert "-XX:ArchiveClassesAtExit=/dump.jsa" in dumping
    assert mapped not in dumping

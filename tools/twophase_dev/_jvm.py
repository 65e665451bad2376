"""The options of the short-lived JVMs the dev tools start, and the class-data archives they map.

A test JVM lives seconds on tiny data, so what it costs is mostly starting: loading and verifying
classes and compiling them. Two things cut that cost:

- :data:`SHORT_LIVED_JVM_OPTIONS`: the C1 compiler alone and the serial collector, for every JVM;
- a dynamic class-data-sharing archive (JDK 13+) per kind of JVM (Spark's, Kafka's broker): one
  representative run dumps the classes it loaded into a file (:func:`make_class_archive`, run by
  ``scripts/setup.sh``), and every later JVM of that kind maps that file instead of parsing and
  verifying the jars again (:func:`archive_jvm_options`). An archive's name carries a digest of
  the Java runtime and of the jars on its class path (:func:`class_archive`), so a changed runtime
  or jar gets a new archive and never a stale one; the JVM checks the class path itself too, and
  without the archive it only starts slower. Spark's archive is made here
  (:func:`build_spark_class_archive`), the broker's in ``twophase_dev._kafka._archive``.

Measured in docs/development.md ("Where the suite's time goes").
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._host._files import cache_root

__all__ = [
    "SHORT_LIVED_JVM_OPTIONS",
    "archive_jvm_options",
    "build_spark_class_archive",
    "class_archive",
    "find_java",
    "make_class_archive",
    "pyspark_home",
    "spark_class_archive",
    "spark_jvm_options",
]

#: JVM options of every JVM the dev tools start (Kafka brokers, Spark drivers and executors, the
#: cluster's daemons, the Connect server): the C1 compiler alone and the serial collector. These
#: JVMs live seconds to minutes on small data, where the C2 compiler's threads are the larger part
#: of the CPU they use: a local Spark session that starts, aggregates 200,000 rows and stops used
#: 36 to 40 CPU-seconds with the defaults and 18 to 23 with these (docs/development.md).
SHORT_LIVED_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

#: Logging of the class-data-sharing subsystem off: dumping lists every class it skips (hundreds of
#: lines), and an archive the JVM refuses is not an error for a test (it only starts slower).
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
#: How long the archive of another virtualenv is kept.
_KEEP_SECONDS = 7 * 24 * 3600


def pyspark_home() -> Path:
    """Return the installed PySpark package directory, which is a complete ``SPARK_HOME``.

    Returns
    -------
    pathlib.Path
        The directory holding ``bin/spark-class`` and ``jars/``.

    Raises
    ------
    DevInfraError
        If PySpark is not installed or has no ``bin/spark-class``.
    """
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise DevInfraError("PySpark is not installed: run 'bash scripts/setup.sh'")
    home = Path(next(iter(spec.submodule_search_locations)))
    if not (home / "bin" / "spark-class").is_file():
        raise DevInfraError(f"{home} has no bin/spark-class: is this a complete PySpark install?")
    return home


def find_java() -> Path | None:
    """Return the ``java`` the JVMs start with: ``$JAVA_HOME/bin/java``, else the one on ``PATH``.

    Returns
    -------
    pathlib.Path or None
        The executable, or ``None`` when there is none.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return Path(java_home) / "bin" / "java"
    found = shutil.which("java")
    return Path(found) if found else None


@functools.cache
def _archive_for(kind: str, java: Path, jars: tuple[Path, ...]) -> Path:
    digest = hashlib.sha256()
    for path in [java, *jars]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return cache_root() / "jvm" / f"{kind}-{digest.hexdigest()[:16]}.jsa"


def class_archive(kind: str, jars: Sequence[Path]) -> Path | None:
    """Return where the class-data archive of this Java and these jars lives.

    Parameters
    ----------
    kind : str
        What the JVM is (``"spark"``, ``"kafka"``): the start of the archive's name.
    jars : sequence of pathlib.Path
        The JVM's class path, in its order.

    Returns
    -------
    pathlib.Path or None
        ``~/.cache/twophase/jvm/<kind>-<digest>.jsa``, the digest taken over the ``java``
        executable and each jar's path, size and modification time (the file may not exist
        yet), or ``None`` when no ``java`` is found.
    """
    java = find_java()
    return _archive_for(kind, java.resolve(), tuple(jars)) if java else None


def archive_jvm_options(archive: Path | None) -> str:
    """Return :data:`SHORT_LIVED_JVM_OPTIONS`, plus ``archive`` once it has been made.

    Parameters
    ----------
    archive : pathlib.Path or None
        A :func:`class_archive` path.

    Returns
    -------
    str
        The options; without the archive's file, the short-lived ones alone.
    """
    if archive is None or not archive.is_file():
        return SHORT_LIVED_JVM_OPTIONS
    return f"{SHORT_LIVED_JVM_OPTIONS} -XX:SharedArchiveFile={archive} {_QUIET}"


def make_class_archive(
    archive: Path | None, what: str, run: Callable[[str], None], *, force: bool = False
) -> tuple[Path, float] | None:
    """Make a class-data archive by one representative run, unless it is there already.

    ``run`` gets the JVM options that make its JVM dump the classes it loaded when it exits; the
    file is written under a temporary name and renamed, so a concurrent JVM never maps half an
    archive. Archives of the same kind made more than a week ago for other jars go.

    Parameters
    ----------
    archive : pathlib.Path or None
        Where the archive goes (:func:`class_archive`); ``None`` does nothing.
    what : str
        The run, for the error message (e.g. ``"the Spark session"``).
    run : callable
        Starts the JVM with the options it is given, runs the workload and lets the JVM exit
        cleanly; raises :class:`DevInfraError` if that fails.
    force : bool, optional
        Make it again even if it exists.

    Returns
    -------
    tuple of (pathlib.Path, float) or None
        The archive and the seconds spent making it (0 if it existed), or ``None`` when
        ``archive`` is (no ``java``: nothing to archive for).

    Raises
    ------
    DevInfraError
        If the run failed or its JVM left no archive.
    """
    if archive is None:
        return None
    if archive.is_file() and not force:
        return archive, 0.0
    archive.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    partial = archive.with_name(f".{archive.name}.{os.getpid()}")
    try:
        run(f"{SHORT_LIVED_JVM_OPTIONS} -XX:ArchiveClassesAtExit={partial} {_QUIET}")
        if not partial.is_file():
            raise DevInfraError(f"{what} that makes the class-data archive {archive} left none")
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    partial.replace(archive)
    # Archives of other virtualenvs (other clones, the version matrix) stay while they may be in
    # use; one made more than a week ago goes (a Spark one is about 170 MiB).
    kind = archive.name.rsplit("-", 1)[0]
    for stale in archive.parent.glob(f"{kind}-*.jsa"):
        with contextlib.suppress(FileNotFoundError):
            if stale != archive and time.time() - stale.stat().st_mtime > _KEEP_SECONDS:
                stale.unlink()
    return archive, time.monotonic() - started


def spark_class_archive() -> Path | None:
    """Return where the class-data archive of this Java and this PySpark lives.

    Returns
    -------
    pathlib.Path or None
        The archive's path under ``~/.cache/twophase/jvm`` (it may not exist yet), or ``None`` when
        no ``java`` is found.
    """
    return class_archive("spark", sorted((pyspark_home() / "jars").glob("*.jar")))


def spark_jvm_options() -> str:
    """Return the JVM options of a Spark driver, executor or daemon the dev tools start.

    Returns
    -------
    str
        :data:`SHORT_LIVED_JVM_OPTIONS`, plus the class-data archive of this Java and PySpark once
        :func:`build_spark_class_archive` has made it.
    """
    return archive_jvm_options(spark_class_archive())


#: What the archiving session runs: the paths most tests take (a session, a batch job with a
#: shuffle, a Python UDF, DataFrames from Python, a streaming query through twophase's
#: foreachBatch driver with a fake sink), so that their classes are in the archive.
_WORKLOAD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import twophase
    from twophase.testing import FakeSink, FakeTarget
    from twophase_dev import spark_session

    work, options = Path(sys.argv[1]), sys.argv[2]
    spark = spark_session(
        "twophase-class-archive",
        master="local[2,2]",
        kafka=False,
        extra_conf={"spark.driver.extraJavaOptions": options},
    )
    counts = spark.range(0, 20000).selectExpr("id % 7 AS k", "id").groupBy("k").count().collect()
    assert len(counts) == 7, counts
    spark.udf.register("plus_one", lambda x: x + 1, "long")
    assert spark.sql("SELECT plus_one(41) AS v").collect()[0].v == 42
    for batch in range(2):
        rows = [(batch * 10 + i, f"p{i}") for i in range(10)]
        frame = spark.createDataFrame(rows, "id long, payload string")
        frame.write.mode("append").parquet(str(work / "in"))
    source = spark.readStream.schema("id long, payload string").option("maxFilesPerTrigger", 1)
    frame = source.parquet(str(work / "in")).repartition(2)
    sink = FakeSink("class-archive", FakeTarget(str(work / "target")))
    query = twophase.write_stream(
        frame, sink, checkpoint_location=str(work / "chk"), trigger={"availableNow": True}
    ).start()
    assert query.awaitTermination(300), "the archiving query did not finish"
    spark.stop()
    """
)


def build_spark_class_archive(*, force: bool = False) -> tuple[Path, float] | None:
    """Make the class-data archive of this Java and PySpark, unless it is there already.

    Runs one representative local Spark session in a child process whose driver JVM dumps the
    classes it loaded when it exits (:func:`make_class_archive`).

    Parameters
    ----------
    force : bool, optional
        Make it again even if it exists.

    Returns
    -------
    tuple of (pathlib.Path, float) or None
        The archive and the seconds spent making it (0 if it existed), or ``None`` when no ``java``
        is found (nothing to archive for).

    Raises
    ------
    DevInfraError
        If the archiving session failed or left no archive; the message has its log's end.
    """

    def run(options: str) -> None:
        with tempfile.TemporaryDirectory(prefix="twophase-class-archive-") as work:
            done = subprocess.run(
                [sys.executable, "-c", _WORKLOAD, work, options],
                env={**os.environ, "SPARK_SUBMIT_OPTS": options},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=600,
                check=False,
            )
        if done.returncode != 0:
            raise DevInfraError(
                f"the Spark session that makes the class-data archive failed "
                f"(exit {done.returncode}); its output ends with:\n"
                + "\n".join(done.stdout.splitlines()[-30:])
            )

    return make_class_archive(spark_class_archive(), "the Spark session", run, force=force)

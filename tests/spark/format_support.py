"""Builders the format() tests register: the fake sink or PostgreSQL, with an optional crash.

A builder runs wherever Spark creates the data source: the driver's Python workers (classic) or
the Connect server's. The option ``crash`` (``<step>:<batch>``) installs a step listener that
SIGKILLs the driver there: every Java ancestor of the process (the driver JVM, or the Connect
server), and the Python driver process named by ``$TWOPHASE_TEST_DRIVER_PID`` (classic mode).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from twophase import _pyspark
from twophase.testing import FakeSink, FakeTarget, install_step_listener

DRIVER_PID = "TWOPHASE_TEST_DRIVER_PID"


def skip_unless_format_runs() -> None:
    """Skip the calling test module on a PySpark without format() (before 4.1).

    There format() is refused by name: ``tests/unit/test_pyspark_adapter.py``.
    """
    if (_pyspark.installed_version() or (0, 0, 0))[:2] < (4, 1):
        pytest.skip("format() needs PySpark 4.1 or later", allow_module_level=True)


def _ancestors() -> list[tuple[int, str]]:
    found = []
    pid = os.getppid()
    while pid > 1:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            break
        found.append((pid, comm))
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return found


class KillDriverAt:
    """Step listener: SIGKILL the driver (JVM and Python driver) at one step of one batch."""

    def __init__(self, step: str, batch_id: int) -> None:
        self.step = step
        self.batch_id = batch_id

    def __call__(self, step: str, batch_id: int, index: int | None) -> None:
        if (step, batch_id) != (self.step, self.batch_id):
            return
        victims = [pid for pid, comm in _ancestors() if comm == "java"]
        if os.environ.get(DRIVER_PID):
            victims.append(int(os.environ[DRIVER_PID]))
        for pid in victims:
            os.kill(pid, signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def _with_crash(sink: Any, options: Mapping[str, str]) -> Any:
    if options.get("crash"):
        step, batch = options["crash"].split(":")
        install_step_listener(sink, KillDriverAt(step, int(batch)))
    return sink


def build_fake(options: Mapping[str, str]) -> Any:
    """A fake coordinated sink over the directory ``options['target']``."""
    return _with_crash(FakeSink(options.get("name", "fmt"), FakeTarget(options["target"])), options)


def build_postgres(options: Mapping[str, str]) -> Any:
    """The connector's own builder (``format("twophase-postgres")``), plus ``crash``."""
    from twophase.connectors.jdbc._postgres import FORMAT

    sink = FORMAT.sink_from_options({k: v for k, v in options.items() if k != "crash"})
    return _with_crash(sink, options)


def build_mariadb(options: Mapping[str, str]) -> Any:
    """The connector's own builder (``format("twophase-mariadb")``), plus ``crash``."""
    from twophase.connectors.jdbc._mariadb import FORMAT

    sink = FORMAT.sink_from_options({k: v for k, v in options.items() if k != "crash"})
    return _with_crash(sink, options)


def build_kafka(options: Mapping[str, str]) -> Any:
    """The Kafka sink (the markers protocol): format() must refuse it."""
    from twophase.connectors.kafka import KafkaSink

    return KafkaSink(
        options.get("name", "fmt"), bootstrap_servers=options["bootstrap"], topic=options["topic"]
    )


BUILDERS = {
    "fake": build_fake,
    "postgres": build_postgres,
    "mariadb": build_mariadb,
    "kafka": build_kafka,
}


def start_format_query(
    spark: Any, source: Path, checkpoint: Path, kind: str, options: Mapping[str, str]
) -> Any:
    """Register the builder ``kind`` and start the file-source query through format()."""
    import twophase
    from tests.spark.helpers import SCHEMA

    name = f"twophase-test-{kind}"
    twophase.register_format(spark, name, BUILDERS[kind])
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    writer = (
        df.repartition(2).writeStream.format(name).option("checkpointLocation", str(checkpoint))
    )
    for key, value in options.items():
        writer = writer.option(key, value)
    return writer.trigger(availableNow=True).start()

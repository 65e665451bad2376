"""A Spark driver process of the upgrade tests, run by an earlier release and by the current code.

Usage: python upgrade_driver.py SPEC.json

A plain script that uses only the public API of twophase 0.2.0 (``postgres_sink``,
``twophase.write_stream``, ``twophase.testing.CrashAt`` and ``install_step_listener``), so that
the virtualenv of either release can run it; it imports nothing from the repository (the
SparkSession is made here, not by ``twophase_dev``). SPEC holds the PostgreSQL DSN and one or
more queries, each from a directory of JSON-lines files (one file per micro-batch, two
partitions per batch) into a PostgreSQL table through ``postgres_sink``, from a checkpoint of
its own, all started together and run to the end of their input (``availableNow``)::

    {"app": "...", "dsn": "postgresql://...",
     "queries": [{"name": "...", "protocol": "coordinated" | "markers", "table": "...",
                  "marker_table": "...", "source": "dir", "checkpoint": "dir",
                  "crash": ["decided", 1] | null}]}

A query with a ``crash`` SIGKILLs the driver at that coordinator step of that batch
(``CrashAt(step, batch, hard=True)``). When several queries have one, each waits at its step
until every other has reached its own, so that one kill leaves every query at its crash point.

The driver prints facts for the test as lines ``TWOPHASE-UPGRADE {json}``: the twophase
release and file that the driver and a Python worker import, and how each query ended. It exits
0 when every query finished, 1 when one failed (its error is printed), 3 when a query did not
reach its crash point while another waited at its own.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import traceback
from typing import Any

REPORT_PREFIX = "TWOPHASE-UPGRADE "
STARTED = time.monotonic()
SCHEMA = "id long, payload string"
#: How long a query at its crash point waits for the others to reach theirs.
RENDEZVOUS_SECONDS = 150.0
#: How long a query may take to process its input.
QUERY_SECONDS = 240


def report(kind: str, **facts: Any) -> None:
    facts = {"kind": kind, **facts, "at": round(time.monotonic() - STARTED, 1)}
    print(REPORT_PREFIX + json.dumps(facts, default=str), flush=True)


def where_twophase(_: Any) -> list[str]:
    """Run in a Python worker: the twophase it imports (the release under test, not the tree)."""
    import twophase

    return [twophase.__version__, twophase.__file__]


def spark_session(app: str) -> Any:
    """A ``local[2]`` session for a short test (as ``twophase_dev.spark_test_conf``, no Kafka)."""
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.memory": "1g",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.warehouse.dir": os.path.join(tempfile.gettempdir(), "twophase-upgrade-wh"),
        # The Python workers run this interpreter, hence this release of twophase.
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.streaming.stopTimeout": "60s",
    }
    builder = SparkSession.builder.master("local[2]").appName(app)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def crash_listener(crash: Any, barrier: threading.Barrier) -> Any:
    """``crash`` (a ``CrashAt``), once every crashing query of the process is at its step."""

    def listener(step: str, batch_id: int, index: int | None) -> None:
        if not crash.fired and step == crash.step and batch_id == crash.batch_id:
            report("crash_point", step=step, batch=batch_id)
            try:
                barrier.wait(RENDEZVOUS_SECONDS)
            except threading.BrokenBarrierError:
                print("another query did not reach its crash point", flush=True)
                os._exit(3)
        crash(step, batch_id, index)

    return listener


def main(spec_path: str) -> int:
    with open(spec_path) as f:
        spec = json.load(f)

    import twophase
    from twophase.connectors.jdbc import postgres_sink
    from twophase.testing import CrashAt, install_step_listener

    report("driver", version=twophase.__version__, file=twophase.__file__, python=sys.executable)
    spark = spark_session(spec.get("app", "twophase-upgrade"))
    report("session")
    version, file = spark.sparkContext.parallelize([0], 1).map(where_twophase).collect()[0]
    report("worker", version=version, file=file)

    crashing = [q for q in spec["queries"] if q.get("crash")]
    barrier = threading.Barrier(max(1, len(crashing)))
    queries = []
    for q in spec["queries"]:
        sink = postgres_sink(
            q["name"],
            table=q["table"],
            dsn=spec["dsn"],
            protocol=q["protocol"],
            marker_table=q["marker_table"],
            lock_timeout=5.0,
        )
        if q.get("crash"):
            step, batch = q["crash"]
            install_step_listener(sink, crash_listener(CrashAt(step, batch, hard=True), barrier))
        df = (
            spark.readStream.schema(SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .json(q["source"])
            .repartition(2, "id")
        )
        query = twophase.write_stream(
            df, sink, checkpoint_location=q["checkpoint"], trigger={"availableNow": True}
        ).start()
        queries.append((q["name"], query))

    failed = False
    for name, query in queries:
        try:
            finished = query.awaitTermination(QUERY_SECONDS)
            error: Any = query.exception()
        except Exception as exc:  # a failed query raises from awaitTermination
            finished, error = True, exc
        if not finished:
            report("query", name=name, ok=False, error="did not finish in time")
            print(f"query {name} did not finish in {QUERY_SECONDS} s", flush=True)
            os._exit(2)
        if error is not None:
            failed = True
            print(f"query {name} failed: {error}", flush=True)
            traceback.print_exception(error)
        report("query", name=name, ok=error is None, error=None if error is None else str(error))
    for _name, query in queries:
        if query.isActive:
            query.stop()
    spark.stop()
    report("exit", code=1 if failed else 0)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""One run of a chaos trial's streaming query: a real Spark driver process.

Usage: ``python -m tests.chaos.driver SPEC.json`` (the harness writes the spec and starts this in a
process group of its own).

The driver builds the trial's sink (a probed connector sink, see :mod:`tests.chaos.sinks`, wrapped
by :func:`twophase.testing.with_faults` when task failures are scheduled), its pipeline over a
replayable source, and runs the query with ``trigger(availableNow=True)`` until the input is
processed; a real-time trial (spec ``realtime``, :mod:`tests.chaos.realtime`) runs it with
``trigger={"realTime": ...}`` on ``local[n,4]`` instead, which never ends by itself: the harness
stops it. It reports every coordinator step to the event log (and pauses at the spec's pause
points), and calls ``query.stop()`` from a thread when the harness asks (file ``control/stop``).

Exit codes: 0 the query processed its input; 3 ``query.stop()`` was called (unless the harness
asked for a restart in this process: ``control/stop`` holding ``restart``); 4 the query failed with
``NondeterministicBatchError``; 1 any other failure (the event ``query_failed`` names it, and the
twophase error behind it with whether it is restartable, ``twophase.errors.find_error``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_STOPPED = 3
EXIT_NONDETERMINISTIC = 4

#: Error names looked for in a failed query's message, most specific first.
ERROR_NAMES = (
    "NondeterministicBatchError",
    "ConcurrentQueryError",
    "CoordinatorLogError",
    "CommitFailedError",
    "StackOverflowError",
    "InterruptedException",
    "FatalError",
    "AbortRequiredError",
    "RetriableError",
    "DataError",
    "ConfigurationError",
    "TimeoutException",
)

SCHEMA = "id long, payload string"

#: ``max_bad_rows`` of a trial with bad rows: far more than its batches hold (a few per batch).
BAD_ROWS_MAX = 100
#: What the connectors' errors say when a step ran into a network bound: a connection lost or not
#: made within the JDBC sinks' ``network_timeout`` / ``connect_timeout``, brokers not answering
#: within the Kafka sink's ``operation_timeout`` (``_PURGE_QUEUE``: the records of a producer
#: dropped after its flush ran out of time, e.g. a fence record).
NETWORK_BOUND_NEEDLES = (
    "(a network partition",
    "slow or unreachable",
    "unreachable or busy",
    "(operation_timeout)",
    "(_PURGE_QUEUE)",
    "not acknowledged within",
)


def classify(message: str) -> str:
    """Return the first known error name found in ``message`` (``"other"`` if none)."""
    for name in ERROR_NAMES:
        if name in message:
            return name
    return "other"


def connector_sink(spec: dict[str, Any]) -> Any:
    """Build the trial's sink as the connector's constructor makes it (no probes, no faults)."""
    kind, name = spec["sink"], spec["sink_name"]
    kind = kind.removesuffix("-ha")  # a replicated target: the same sink on other settings
    kind = kind.removesuffix("-rt")  # a real-time trial: the same sink in real-time mode
    target = spec["target"]
    # A trial with bad rows (tests.chaos.harness.draw_bad_rows): refused rows become dead letters.
    letters: dict[str, Any] = {}
    if spec.get("bad_rows"):
        letters = {"bad_rows": "dead_letter", "max_bad_rows": BAD_ROWS_MAX}
    if kind == "kafka":
        from twophase.connectors.kafka import KafkaSink

        if letters:
            letters["dead_letter_topic"] = target["dead_letter_topic"]
        return KafkaSink(
            name,
            bootstrap_servers=target["bootstrap"],
            topic=target["topic"],
            control_topic=target["control_topic"],
            producer_config=target.get("producer_config") or {},
            operation_timeout=target.get("operation_timeout", 30.0),
            local_retries=target.get("local_retries", 3),
            staging=spec["staging"],
            **letters,
        )
    # The JDBC sinks: pg-coordinated, pg-markers, maria-coordinated, maria-markers.
    database, protocol = kind.split("-", 1)
    if database == "maria":
        from twophase.connectors.jdbc import mariadb_sink as factory

        connection = {"url": target["url"]}
    else:
        from twophase.connectors.jdbc import postgres_sink as factory

        connection = {"dsn": target["dsn"]}
    extra = {"staging": spec["staging"]} if protocol == "markers" else {}
    if letters:
        extra.update(letters, dead_letter_table=target["dead_letter_table"])
    if "network_timeout" in target:  # a trial with partitions: short bounds
        extra["network_timeout"] = target["network_timeout"]
    return factory(
        name,
        table=target["table"],
        protocol=protocol,
        lock_timeout=10.0,
        connect_timeout=target.get("connect_timeout", 5),
        **connection,
        **extra,
    )


def build_sink(spec: dict[str, Any]) -> Any:
    """Build the trial's sink: the connector's, probed, with fault rules when given."""
    from tests.chaos.sinks import instrument
    from twophase.testing import FakeTarget

    sink = connector_sink(spec)
    chaos = {"events": spec["events"], "control": spec["control"], "pauses": spec["pauses"]}
    faults = FakeTarget(spec["rules"]) if spec.get("rules") else None
    return instrument(sink, spec["sink"], chaos, faults)


def source(spark: Any, spec: dict[str, Any]) -> Any:
    """The replayable input: Parquet files (one per batch) or a Kafka topic."""
    src = spec["source"]
    if src["kind"] == "files":
        reader = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1)
        return reader.parquet(src["path"])
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", src["bootstrap"])
        .option("subscribe", src["topic"])
        .option("startingOffsets", "earliest")
    )
    if src.get("per_trigger"):  # micro-batches; real-time mode reads as rows come
        reader = reader.option("maxOffsetsPerTrigger", src["per_trigger"])
    return reader.load().selectExpr(
        "CAST(CAST(value AS STRING) AS BIGINT) AS id",
        "CONCAT('p', CAST(value AS STRING)) AS payload",
    )


def pipeline(df: Any, spec: dict[str, Any]) -> Any:
    """Apply the trial's pipeline; the result has columns ``k`` (bigint) and ``v`` (string)."""
    name, n = spec["pipeline"], spec["partitions"]
    if name == "repartition_key":
        df = df.repartition(n, "id")
    elif name == "repartition_rr":
        df = df.repartition(n)
    if name == "deduplicate":
        df = df.dropDuplicates(["id"])
    if name == "aggregate":
        from pyspark.sql import functions as F  # noqa: N812

        counts = df.groupBy(F.expr("id div 4").alias("k")).agg(
            F.count("*").alias("n"), F.sum("id").alias("s")
        )
        out = counts.selectExpr("k", "concat(cast(n AS string), ':', cast(s AS string)) AS v")
    else:
        out = df.selectExpr("id AS k", "payload AS v")
    kafka = spec["sink"].startswith("kafka")
    if spec.get("bad_rows"):
        from tests.chaos.poison import poison

        out = poison(out, spec["bad_rows"], jdbc=not kafka)
    if kafka:
        out = out.selectExpr("CAST(k AS STRING) AS key", "v AS value")
    return out


class StepProbe:
    """Coordinator step listener: one event per step, pausing at the spec's driver points."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.events, self.control, self.pauses = spec["events"], spec["control"], spec["pauses"]

    def __call__(self, step: str, batch_id: int, index: int | None) -> None:
        from tests.chaos.events import probe

        probe(
            self.events,
            self.control,
            self.pauses,
            src="driver",
            name=step,
            batch=batch_id,
            index=index,
        )


class Stopper(threading.Thread):
    """Calls ``query.stop()`` once the harness creates ``control/stop``."""

    def __init__(self, query: Any, spec: dict[str, Any]) -> None:
        super().__init__(name="chaos-stopper", daemon=True)
        self.query, self.spec = query, spec
        self.called = False
        self.restart = False
        self.finished = threading.Event()

    def run(self) -> None:
        from tests.chaos.events import emit

        request = Path(self.spec["control"], "stop")
        while not self.finished.is_set():
            if request.exists():
                self.restart = request.read_text().strip() == "restart"
                request.unlink()
                active = bool(self.query.isActive)
                emit(self.spec["events"], src="driver", name="stop_called", active=active)
                self.called = True
                started = time.monotonic()
                try:
                    self.query.stop()
                    emit(
                        self.spec["events"],
                        src="driver",
                        name="stop_returned",
                        seconds=round(time.monotonic() - started, 3),
                    )
                except Exception as exc:
                    emit(
                        self.spec["events"],
                        src="driver",
                        name="stop_raised",
                        error=classify(str(exc)),
                        message=str(exc)[:2000],
                    )
                return
            time.sleep(0.05)


def run(spec: dict[str, Any]) -> int:
    """Run the query once; return the exit code."""
    import twophase
    from tests.chaos.events import emit
    from twophase.testing import install_step_listener
    from twophase_dev import spark_session

    events = spec["events"]
    emit(events, src="driver", name="driver_started", run=spec["run"])
    realtime = spec.get("realtime")
    # A real-time epoch runs every partition's task at once: a core per partition; task retries
    # inside the epoch.
    master = f"local[{realtime['cores']},{realtime['task_attempts']}]" if realtime else "local[2,3]"
    trigger: dict[str, Any] = {"availableNow": True}
    options: dict[str, Any] = {}
    if realtime:
        trigger = {"realTime": f"{realtime['epoch_seconds']} seconds"}
        options["commit_interval"] = realtime["commit_interval"]
    spark = spark_session(
        f"chaos-{spec['sink_name']}",
        master=master,
        kafka=spec["source"]["kind"] == "kafka",
        extra_conf={
            "spark.local.dir": spec["spark_local_dir"],
            "spark.sql.streaming.stopTimeout": "30s",
            **spec.get("spark_conf", {}),
        },
    )
    sink = build_sink(spec)
    install_step_listener(sink, StepProbe(spec))
    df = pipeline(source(spark, spec), spec)
    while True:
        writer = twophase.write_stream(
            df, sink, checkpoint_location=spec["checkpoint"], trigger=trigger, **options
        )
        if spec["pipeline"] == "aggregate":
            writer = writer.outputMode("update")  # deduplicate: append, the default
        query = writer.start()
        emit(events, src="driver", name="query_started", run=spec["run"])
        stopper = Stopper(query, spec)
        stopper.start()
        try:
            query.awaitTermination()
        except Exception as exc:
            from twophase.errors import find_error

            message = str(exc)
            kind = classify(message)
            found = find_error(exc)
            emit(
                events,
                src="driver",
                name="query_failed",
                error=kind,
                twophase_error=None if found is None else type(found).__name__,
                restartable=None if found is None else found.restartable,
                network_bound=any(needle in message for needle in NETWORK_BOUND_NEEDLES),
                message=message[:4000],
            )
            print(f"query failed ({kind}):\n{message}", file=sys.stderr)
            return EXIT_NONDETERMINISTIC if kind == "NondeterministicBatchError" else EXIT_FAILED
        finally:
            stopper.finished.set()
        if not stopper.called:
            emit(events, src="driver", name="query_finished")
            return EXIT_DONE
        stopper.join(timeout=60)
        emit(events, src="driver", name="query_stopped", restart=stopper.restart)
        if not stopper.restart:
            return EXIT_STOPPED
        # Start the query again in this process, with the same sink object, as an
        # application that stops and restarts its query would.


def main(argv: list[str]) -> None:
    """Entry point: run, then leave without waiting for Spark (the harness reaps the group)."""
    spec = json.loads(Path(argv[0]).read_text())
    try:
        code = run(spec)
    except BaseException:
        traceback.print_exc()
        code = EXIT_FAILED
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])

"""How promptly rows reach Python under Spark's real-time mode, by path and setting (issue 54).

A Kafka topic of 2 partitions receives records at a steady rate; a query with
``trigger(realTime=...)`` hands them to Python, which notes when each row arrives. The latency of a
row is its arrival time in Python minus its Kafka timestamp (``CreateTime``, set by the producer
on this machine, so both clocks are the same). Each path runs in its own Spark JVM, since
``spark.buffer.size`` is read when the JVM starts; medians of ``--runs`` runs of each path's
p50/p95/p99 are printed as a table. Usage::

    scripts/bench.sh realtime-paths                     # every path, 2 runs each (~30 minutes)
    .venv/bin/python benchmarks/bench_realtime_paths.py --runs 3 --paths foreach,foreach-buf64
    .venv/bin/python benchmarks/bench_realtime_paths.py --rates 1000 --seconds 20 --runs 1

The broker is ``$TWOPHASE_KAFKA_BOOTSTRAP`` if set (``twophase-dev up``), else one started here.
Paths (``--paths``, comma-separated):

* ``foreach`` -- a Python ``ForeachWriter``, default settings.
* ``foreach-buf64`` -- the same with ``spark.buffer.size=64`` (the JVM sends each pickled batch
  to the Python worker at once instead of filling 64 KiB first).
* ``foreach-buf64-epoch5s`` -- the same with ``trigger(realTime="5 seconds")``.
* ``pyds`` -- a Python data source stream writer (``DataSourceStreamWriter``), which real-time
  mode refuses unless ``spark.sql.streaming.realTimeMode.allowlistCheck=false``; default
  settings otherwise.
* ``mapinarrow`` -- ``df.mapInArrow(f)`` writing from ``f`` into a ``noop`` sink; also refused
  unless ``allowlistCheck=false``; default settings otherwise.
* ``mapinarrow-buf64-batch1`` -- the same with ``spark.buffer.size=64`` and
  ``spark.sql.execution.arrow.maxRecordsPerBatch=1`` (one Arrow batch per row).
* ``mapinarrow-sqlbuf64-batch1`` -- ``maxRecordsPerBatch=1`` with the session's
  ``spark.sql.execution.pandas.udf.buffer.size=64`` (the buffer of Arrow runners, which falls
  back to ``spark.buffer.size``) instead of the JVM-wide ``spark.buffer.size``.
* ``mapinarrow-buf64-batch100`` -- the same as ``mapinarrow-buf64-batch1`` with
  ``maxRecordsPerBatch=100``.

Nothing here is imported by the library or the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

#: Spark settings of each path, and the trigger's epoch when it is not ``--epoch``.
PATHS: dict[str, dict[str, Any]] = {
    "foreach": {"sink": "foreach", "conf": {}},
    "foreach-buf64": {"sink": "foreach", "conf": {"spark.buffer.size": "64"}},
    "foreach-buf64-epoch5s": {
        "sink": "foreach",
        "conf": {"spark.buffer.size": "64"},
        "epoch": "5 seconds",
    },
    "pyds": {
        "sink": "pyds",
        "conf": {"spark.sql.streaming.realTimeMode.allowlistCheck": "false"},
    },
    "mapinarrow": {
        "sink": "mapinarrow",
        "conf": {"spark.sql.streaming.realTimeMode.allowlistCheck": "false"},
    },
    "mapinarrow-buf64-batch1": {
        "sink": "mapinarrow",
        "conf": {
            "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
            "spark.buffer.size": "64",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
        },
    },
    "mapinarrow-sqlbuf64-batch1": {
        "sink": "mapinarrow",
        "conf": {
            "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
            "spark.sql.execution.pandas.udf.buffer.size": "64",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "1",
        },
    },
    "mapinarrow-buf64-batch100": {
        "sink": "mapinarrow",
        "conf": {
            "spark.sql.streaming.realTimeMode.allowlistCheck": "false",
            "spark.buffer.size": "64",
            "spark.sql.execution.arrow.maxRecordsPerBatch": "100",
        },
    },
}
_VALUE = b"x" * 100


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ------------------------------------------------------------------ executor side (child process)
class ArrivalLog:
    """Appends ``kafka timestamp, arrival time`` of each row to a file of its own (picklable)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._file: Any = None

    def start(self, partition: int, epoch: int) -> None:
        name = f"{partition}-{epoch}-{uuid.uuid4().hex}.txt"
        self._file = open(os.path.join(self.directory, name), "a", buffering=1)  # noqa: SIM115

    def row(self, kafka_ts: float) -> None:
        self._file.write(f"{kafka_ts:.3f} {time.time():.3f}\n")

    def stop(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ForeachLatencyWriter:
    """A plain Python ``ForeachWriter``: notes when each row reaches ``process``."""

    def __init__(self, directory: str) -> None:
        self.log = ArrivalLog(directory)

    def open(self, partition_id: int, epoch_id: int) -> bool:
        self.log.start(partition_id, epoch_id)
        return True

    def process(self, row: Any) -> None:
        self.log.row(row.ts)

    def close(self, error: Any) -> None:
        self.log.stop()


def _register_latency_source(spark: Any) -> None:
    """Register ``latency_sink``, a Python data source whose stream writer notes arrivals."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamWriter, WriterCommitMessage

    class LatencyStreamWriter(DataSourceStreamWriter):
        def __init__(self, directory: str) -> None:
            self.directory = directory

        def write(self, iterator: Any) -> WriterCommitMessage:
            from pyspark import TaskContext

            context = TaskContext.get()
            log = ArrivalLog(self.directory)
            log.start(context.partitionId() if context else -1, 0)
            try:
                for row in iterator:
                    log.row(row.ts)
            finally:
                log.stop()
            return WriterCommitMessage()

        def commit(self, messages: Any, batchId: int) -> None:  # noqa: N803 (PySpark's name)
            pass

        def abort(self, messages: Any, batchId: int) -> None:  # noqa: N803 (PySpark's name)
            pass

    class LatencySink(DataSource):
        @classmethod
        def name(cls) -> str:
            return "latency_sink"

        def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
            return LatencyStreamWriter(self.options["dir"])

    spark.dataSource.register(LatencySink)


def _arrow_arrivals(directory: str) -> Any:
    """A ``mapInArrow`` function that notes when each row arrives and returns no rows."""

    def arrivals(batches: Any) -> Any:
        from pyspark import TaskContext

        context = TaskContext.get()
        log = ArrivalLog(directory)
        log.start(context.partitionId() if context else -1, 0)
        try:
            for batch in batches:
                for kafka_ts in batch.column("ts").to_pylist():
                    log.row(kafka_ts)
        finally:
            log.stop()
        yield from ()

    return arrivals


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _arrivals(directory: Path) -> list[tuple[float, float]]:
    rows = []
    for path in directory.glob("*.txt"):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 2:
                rows.append((float(parts[0]), float(parts[1])))
    return rows


def _produce(bootstrap: str, topic: str, rate: float, seconds: float) -> int:
    """Produce ``rate`` records/s for ``seconds`` into both partitions in turn; return the count."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "1"})
    total = int(rate * seconds)
    started = time.monotonic()
    for i in range(total):
        delay = started + i / rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, value=_VALUE, partition=i % 2)
        producer.poll(0)
    producer.flush(30)
    return total


def _one_rate(spark: Any, path: dict[str, Any], args: argparse.Namespace, rate: float) -> dict:
    from pyspark.sql import functions as F  # noqa: N812 (PySpark's convention)

    from twophase_dev import attach_kafka

    topic = f"rt-{uuid.uuid4().hex[:10]}"
    attach_kafka(args.bootstrap).create_topic(topic, partitions=2)
    out = Path(tempfile.mkdtemp(prefix="rt-arrivals-"))
    checkpoint = tempfile.mkdtemp(prefix="rt-checkpoint-")
    epoch = path.get("epoch", args.epoch)
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("timestamp").cast("double").alias("ts"), "partition", "offset", "value")
    )
    writer = (
        df.writeStream.outputMode("update")  # the only output mode real-time mode accepts
        .option("checkpointLocation", checkpoint)
        .trigger(realTime=epoch)
    )
    if path["sink"] == "foreach":
        writer = writer.foreach(ForeachLatencyWriter(str(out)))
    elif path["sink"] == "pyds":
        writer = writer.format("latency_sink").option("dir", str(out))
    else:
        writer = (
            df.mapInArrow(_arrow_arrivals(str(out)), "ts double")
            .writeStream.outputMode("update")
            .option("checkpointLocation", checkpoint)
            .trigger(realTime=epoch)
            .format("noop")
        )
    query = writer.start()
    try:
        time.sleep(args.warmup)
        load_before = _load()
        produced = _produce(args.bootstrap, topic, rate, args.seconds)
        deadline = time.monotonic() + float(epoch.split()[0]) + args.drain
        while time.monotonic() < deadline and query.isActive:
            if len(_arrivals(out)) >= produced:
                break
            time.sleep(0.5)
        error = None if query.isActive else str(query.exception())
    finally:
        with contextlib.suppress(Exception):
            query.stop()
    rows = _arrivals(out)
    latencies = [arrived - kafka_ts for kafka_ts, arrived in rows]
    result: dict[str, Any] = {
        "rate": rate,
        "epoch": epoch,
        "produced": produced,
        "arrived": len(rows),
        "load": load_before,
        "error": error,
    }
    if latencies:
        result.update(
            {f"p{q}": round(_percentile(latencies, q), 3) for q in (50, 95, 99)},
            max=round(max(latencies), 3),
        )
    return result


def child(args: argparse.Namespace) -> int:
    """Run one path at every rate in this process's own Spark JVM; print a JSON line."""
    from twophase_dev import spark_session

    path = PATHS[args.child]
    conf = {"spark.sql.streaming.stopTimeout": "30s", **path["conf"]}
    spark = spark_session(f"bench-rt-{args.child}", extra_conf=conf)
    min_epoch = spark.conf.get("spark.sql.streaming.realTimeMode.minBatchDuration")
    _log(f"  spark.sql.streaming.realTimeMode.minBatchDuration = {min_epoch}")
    if path["sink"] == "pyds":
        _register_latency_source(spark)
    results = []
    for rate in args.rates:
        try:
            results.append(_one_rate(spark, path, args, rate))
        except Exception as exc:  # a refused path is a result, not a crash of the benchmark
            results.append({"rate": rate, "error": f"{type(exc).__name__}: {exc}"[:400]})
        results[-1]["min_epoch"] = min_epoch
        _log(f"  {args.child} @ {rate:g}/s: {results[-1]}")
    print("RESULT " + json.dumps(results), flush=True)
    spark.stop()
    return 0


# ------------------------------------------------------------------ driver (parent process)
def _run_child(name: str, args: argparse.Namespace, bootstrap: str) -> list[dict]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--bootstrap",
        bootstrap,
        "--rates",
        ",".join(f"{r:g}" for r in args.rates),
        "--seconds",
        str(args.seconds),
        "--epoch",
        args.epoch,
        "--warmup",
        str(args.warmup),
        "--drain",
        str(args.drain),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (proc.stderr or proc.stdout)[-1500:]
    return [{"rate": r, "error": f"child exited {proc.returncode}: {tail}"} for r in args.rates]


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None and not r.get("error")]
    return statistics.median(values) if values else None


def _table(results: dict[str, list[dict]], rates: list[float]) -> str:
    head = f"{'path':<24}{'rate/s':>8}{'runs':>6}{'p50 s':>9}{'p95 s':>9}{'p99 s':>9}"
    lines = [head + "  arrived/produced  load (1 min)", "-" * 100]
    for name, runs in results.items():
        for rate in rates:
            at = [r for r in runs if r.get("rate") == rate]
            good = [r for r in at if not r.get("error")]
            if not good:
                errors = {str(r.get("error"))[:70] for r in at}
                lines.append(f"{name:<24}{rate:>8g}  refused or failed: {'; '.join(errors)}")
                continue
            cells = [_median(good, k) for k in ("p50", "p95", "p99")]
            arrived = "/".join(str(int(_median(good, k) or 0)) for k in ("arrived", "produced"))
            loads = ", ".join(f"{r['load'][0]:.1f}" for r in good)
            lines.append(
                f"{name:<24}{rate:>8g}{len(good):>6}"
                + "".join(f"{c:>9.2f}" if c is not None else f"{'-':>9}" for c in cells)
                + f"  {arrived:>16}  {loads}"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated, see above")
    parser.add_argument("--runs", type=int, default=2, help="runs of each path (default 2)")
    parser.add_argument("--rates", default="2,1000", help="records/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="production time per rate")
    parser.add_argument("--epoch", default="20 seconds", help="trigger(realTime=...)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before producing")
    parser.add_argument("--drain", type=float, default=15.0, help="seconds past an epoch to wait")
    parser.add_argument("--json", type=Path, help="also write every run's numbers here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    if args.child:
        return child(args)

    import pyspark

    from twophase_dev import KafkaBroker

    names = [n.strip() for n in args.paths.split(",") if n.strip()]
    unknown = [n for n in names if n not in PATHS]
    if unknown:
        parser.error(f"unknown path(s) {unknown}; choose from {', '.join(PATHS)}")
    broker = None
    bootstrap = os.environ.get("TWOPHASE_KAFKA_BOOTSTRAP")
    if not bootstrap:
        broker = KafkaBroker(log_dir=Path(tempfile.mkdtemp(prefix="rt-kafka-"))).start()
        bootstrap = broker.bootstrap_servers
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = _load()
    results: dict[str, list[dict]] = {n: [] for n in names}
    try:
        for run in range(args.runs):
            for name in names:  # interleaved, so that a change of load touches every path
                _log(f"run {run + 1}/{args.runs}: {name} (load {_load()[0]:.1f})")
                results[name].extend(_run_child(name, args, bootstrap))
    finally:
        if broker is not None:
            broker.stop()
    print(
        f"\nreal-time mode, rows into Python: PySpark {pyspark.__version__}, local[2], Kafka "
        f"2 partitions, trigger(realTime='{args.epoch}') unless the path says otherwise, "
        f"{args.seconds:g} s of records per rate; medians of {args.runs} run(s) of each run's "
        f"percentile of (arrival in Python - Kafka timestamp)\n"
        f"started {started}, commit {commit}, load average at start {load_start}, "
        f"at end {_load()}\n"
    )
    print(_table(results, args.rates))
    if args.json:
        args.json.write_text(
            json.dumps(
                {"started": started, "commit": commit, "load": load_start, "runs": results},
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

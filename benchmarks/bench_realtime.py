"""Real-time mode against micro-batches: produce-to-visible latency and backlog throughput.

A Kafka source topic of 2 partitions; a producer paced at ``--rates`` records/s for ``--seconds``
puts its sequence number and wall time in each record's value (``"<seq> <time> "``, padded to 100
bytes). A reader notes when it first sees each row: for PostgreSQL a poller that selects the new
rows of each Kafka partition every 20 ms (``WHERE kp = p AND seq > last``; a partition commits its
rows in order), for Kafka a ``read_committed`` consumer. Latency = seen - produced, on one clock.
Each variant runs in its own child process with its own Spark JVM (``local[2]``). Usage::

    eval "$(.venv/bin/python -m twophase_dev env)"   # else a broker and a server start here
    scripts/bench.sh realtime                          # every variant, 1,000 and 2,500/s
    .venv/bin/python benchmarks/bench_realtime.py --rates 1000 --seconds 10 --runs 1 \\
        --backlog 20000 --variants rt-postgres,mb-postgres --json build/bench-realtime.json

Variants (``--variants``, comma-separated):

* ``rt-postgres`` -- twophase real-time mode into PostgreSQL (``protocol="markers"``):
  ``trigger={"realTime": --epoch}``, ``commit_interval=--commit-interval``,
  ``arrow_batch_rows=--arrow-batch-rows``.
* ``rt-kafka`` -- the same into a Kafka topic with ``KafkaSink``.
* ``mb-postgres`` -- twophase micro-batches into PostgreSQL (markers) as fast as they go
  (``trigger={"processingTime": "0 seconds"}``).
* ``mb-kafka`` -- the same into Kafka.
* ``spark-kafka-rt`` -- Spark's own Kafka sink under real-time mode (at-least-once).

The stream never pauses while rows are measured: a few warm-up records go first (the rows are
measured once the pipeline shows them), and after the measured ones the producer goes on at the
same rate until every measured row is seen. In real-time mode a row leaves the JVM only when the
next row of its partition arrives or the epoch ends (``docs/development.md``, "Real-time mode:
how rows reach Python"), so the last row before a pause would wait for the epoch's end.

Throughput (``--backlog N``): N records are produced before the query starts; rows/s = N / (the
time the last of them is seen - the query's start, sink set-up included). A trickle of 100
records/s follows the backlog for the same reason as above (they are not counted). The table
gives medians of ``--runs`` runs of each run's percentiles, and rt/mb ratios of the rows/s; "p50
1st->last" is the median latency of the rows produced in the first and in the last second: a rate
the pipeline does not hold shows as a latency that grows.

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
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_common import ROOT, load_average

#: What each variant runs: the query's mode and the sink.
VARIANTS: dict[str, dict[str, str]] = {
    "rt-postgres": {"mode": "realtime", "sink": "postgres"},
    "rt-kafka": {"mode": "realtime", "sink": "kafka"},
    "mb-postgres": {"mode": "microbatch", "sink": "postgres"},
    "mb-kafka": {"mode": "microbatch", "sink": "kafka"},
    "spark-kafka-rt": {"mode": "spark-realtime", "sink": "kafka"},
}
#: Bytes of every source record's value.
VALUE_BYTES = 100
#: Seconds between two polls of the PostgreSQL reader.
POLL_INTERVAL = 0.02
#: Records/s of the warm-up and of the trickle after a backlog.
TRICKLE_RATE = 100.0
#: Warm-up rows the reader must see before the measured ones are produced.
WARM_ROWS = 10


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _seconds(text: str) -> float:
    """Seconds of a Spark interval such as ``"30 seconds"`` or ``"1 minute"``."""
    number, _, unit = text.strip().partition(" ")
    unit = unit.strip().lower()
    if unit.startswith(("millisecond", "ms")):
        return float(number) / 1000
    if unit.startswith("minute"):
        return float(number) * 60
    if unit.startswith("hour"):
        return float(number) * 3600
    return float(number)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``values`` (not empty).

    Parameters
    ----------
    values
        The samples.
    q
        The percentile, 0 to 100.

    Returns
    -------
    float
        The sample at that rank.
    """
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def _value(seq: int) -> bytes:
    return f"{seq} {time.time():.6f} ".encode().ljust(VALUE_BYTES, b"x")


def _parse(value: bytes) -> tuple[int, float]:
    seq, ts, _ = value.split(b" ", 2)
    return int(seq), float(ts)


# ------------------------------------------------------------------ producing (child process)
class Feeder(threading.Thread):
    """Produces a paced stream into both partitions in turn (record ``seq`` to ``seq % 2``).

    First warm-up records at ``warm_rate`` until :attr:`warm` is set, then ``count`` measured
    records at ``rate``, then more at ``rate`` until :attr:`stopping` is set.

    Parameters
    ----------
    bootstrap
        The brokers.
    topic
        The source topic (2 partitions).
    first
        The first sequence number.
    warm_rate
        Records/s before :attr:`warm` is set.
    rate
        Records/s of the measured records and after them.
    count
        Measured records (0: none).
    """

    def __init__(
        self, bootstrap: str, topic: str, first: int, warm_rate: float, rate: float, count: int
    ) -> None:
        super().__init__(name="bench-feeder", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.next_seq, self.warm_rate, self.rate, self.count = first, warm_rate, rate, count
        self.warm = threading.Event()
        self.measured = threading.Event()
        self.stopping = threading.Event()
        self.first_measured = -1
        self.started_at = self.ended_at = 0.0
        self.failed: list[str] = []

    def _paced(self, producer: Any, rate: float, until: Callable[[int], bool]) -> None:
        start, n = time.monotonic(), 0
        while not until(n):
            delay = start + n / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._send(producer)
            n += 1

    def _send(self, producer: Any) -> None:
        seq = self.next_seq
        self.next_seq += 1
        producer.produce(self.topic, value=_value(seq), partition=seq % 2, on_delivery=self._done)
        producer.poll(0)

    def _done(self, err: Any, _msg: Any) -> None:
        if err is not None:
            self.failed.append(str(err))

    def run(self) -> None:
        """Produce the three phases."""
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 0, "acks": "1"})
        try:
            self._paced(
                producer, self.warm_rate, lambda _n: self.warm.is_set() or self.stopping.is_set()
            )
            self.first_measured = self.next_seq
            self.started_at = time.time()
            self._paced(producer, self.rate, lambda n: n >= self.count or self.stopping.is_set())
            self.ended_at = time.time()
            self.measured.set()
            self._paced(producer, self.rate, lambda _n: self.stopping.is_set())
        finally:
            self.measured.set()
            producer.flush(30)

    def measured_range(self) -> range:
        """The sequence numbers of the measured records."""
        return range(self.first_measured, self.first_measured + self.count)


def produce_backlog(bootstrap: str, topic: str, count: int) -> None:
    """Produce ``count`` records (sequence 0 to count - 1) as fast as the broker takes them."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "1"})
    failed: list[str] = []
    for seq in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    value=_value(seq),
                    partition=seq % 2,
                    on_delivery=lambda err, _m: failed.append(str(err)) if err else None,
                )
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
        producer.poll(0)
    if producer.flush(60) or failed:
        raise RuntimeError(f"could not produce the backlog: {failed[:3]}")


# ------------------------------------------------------------------ readers (child process)
class Reader(threading.Thread):
    """Notes when each row is first seen: ``seen[seq] = (produced, seen)`` (wall times).

    Subclasses poll their sink in :meth:`poll`; the thread loops until :meth:`close`.
    """

    def __init__(self) -> None:
        super().__init__(name="bench-reader", daemon=True)
        self.seen: dict[int, tuple[float, float]] = {}
        self.duplicates = 0
        self.error: str | None = None
        self._closing = threading.Event()

    def poll(self) -> None:
        """Read what is new once; override."""
        raise NotImplementedError

    def run(self) -> None:
        """Poll until closed; keep the first error."""
        try:
            while not self._closing.is_set():
                self.poll()
        except Exception as exc:
            self.error = f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        """Stop polling and wait for the thread."""
        self._closing.set()
        self.join(30)

    def note(self, seq: int, produced: float, now: float) -> None:
        """Record one row as seen at ``now``."""
        if seq in self.seen:
            self.duplicates += 1
        else:
            self.seen[seq] = (produced, now)

    def count_in(self, seqs: range) -> int:
        """How many of ``seqs`` were seen."""
        seen = self.seen
        return sum(1 for s in seqs if s in seen)


class PostgresReader(Reader):
    """Selects each Kafka partition's new rows every :data:`POLL_INTERVAL` seconds."""

    def __init__(self, dsn: str, table: str) -> None:
        super().__init__()
        import psycopg2

        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True  # every SELECT sees the latest commits
        self.table = table
        self.last = [-1, -1]

    def poll(self) -> None:
        """One SELECT of the rows after the last seen of each partition."""
        started = time.monotonic()
        with self.conn.cursor() as cur:
            cur.execute(
                f"SELECT kp, seq, ts FROM {self.table} "
                "WHERE (kp = 0 AND seq > %s) OR (kp = 1 AND seq > %s)",
                self.last,
            )
            rows = cur.fetchall()
        now = time.time()
        for kp, seq, ts in rows:
            self.note(seq, ts, now)
            self.last[kp] = max(self.last[kp], seq)
        self._closing.wait(max(0.0, POLL_INTERVAL - (time.monotonic() - started)))

    def close(self) -> None:
        """Stop polling and close the connection."""
        super().close()
        self.conn.close()


class KafkaReader(Reader):
    """A ``read_committed`` consumer of the whole target topic from its beginning."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__()
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"bench-rt-{uuid.uuid4().hex}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 20,
            }
        )
        partitions = self.consumer.list_topics(topic, timeout=10).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])

    def poll(self) -> None:
        """Take the next record, if one comes within 50 ms."""
        msg = self.consumer.poll(0.05)
        if msg is None:
            return
        now = time.time()
        if msg.error():
            if not msg.error().retriable() and msg.error().fatal():
                raise RuntimeError(msg.error().str())
            return
        seq, produced = _parse(msg.value())
        self.note(seq, produced, now)

    def close(self) -> None:
        """Stop polling and close the consumer."""
        super().close()
        self.consumer.close()


# ------------------------------------------------------------------ one query (child process)
class Target:
    """The sink's destination of one query: a fresh table or topic, and its reader."""

    def __init__(self, sink: str, args: argparse.Namespace) -> None:
        self.kind = sink
        self.args = args
        self.name = f"bench_rt_{uuid.uuid4().hex[:10]}"
        if sink == "postgres":
            import psycopg2

            conn = psycopg2.connect(args.pg_dsn)
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE {self.name} (seq bigint NOT NULL, ts double precision NOT NULL,"
                    " kp integer NOT NULL, v text)"
                )
                cur.execute(f"CREATE INDEX ON {self.name} (kp, seq)")
            conn.close()
        else:
            from twophase_dev import attach_kafka

            attach_kafka(args.bootstrap).create_topic(self.name, partitions=2)

    def reader(self) -> PostgresReader | KafkaReader:
        """A started reader of the destination."""
        reader: PostgresReader | KafkaReader
        if self.kind == "postgres":
            reader = PostgresReader(self.args.pg_dsn, self.name)
        else:
            reader = KafkaReader(self.args.bootstrap, self.name)
        reader.start()
        return reader

    def drop(self) -> None:
        """Drop the table (a topic is left to the broker)."""
        if self.kind == "postgres":
            import psycopg2

            conn = psycopg2.connect(self.args.pg_dsn)
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS {self.name}")
            conn.close()


def start_query(
    spark: Any, variant: str, args: argparse.Namespace, source: str, target: Target
) -> Any:
    """Start the variant's query from ``source`` (earliest offsets) into ``target``.

    Parameters
    ----------
    spark
        The child's session.
    variant
        A key of :data:`VARIANTS`.
    args
        The child's arguments.
    source
        The source topic.
    target
        The destination.

    Returns
    -------
    pyspark.sql.streaming.StreamingQuery
        The running query.
    """
    from pyspark.sql import functions as F  # noqa: N812 (PySpark's convention)

    import twophase
    from twophase.connectors.jdbc import postgres_sink
    from twophase.connectors.kafka import KafkaSink

    mode = VARIANTS[variant]["mode"]
    checkpoint = tempfile.mkdtemp(prefix="bench-rt-checkpoint-")
    df = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
    )
    if target.kind == "postgres":
        parts = F.split(F.col("value").cast("string"), " ")
        df = df.select(
            parts.getItem(0).cast("long").alias("seq"),
            parts.getItem(1).cast("double").alias("ts"),
            F.col("partition").alias("kp"),
            F.col("value").cast("string").alias("v"),
        )
        sink: Any = postgres_sink(
            target.name, table=target.name, dsn=args.pg_dsn, protocol="markers"
        )
    else:
        df = df.select("value")
        sink = KafkaSink(target.name, bootstrap_servers=args.bootstrap, topic=target.name)
    if mode == "spark-realtime":
        return (
            df.writeStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap)
            .option("topic", target.name)
            .option("checkpointLocation", checkpoint)
            .outputMode("update")  # the only output mode real-time mode accepts
            .trigger(realTime=args.epoch)
            .start()
        )
    if mode == "realtime":
        writer = twophase.write_stream(
            df,
            sink,
            checkpoint_location=checkpoint,
            trigger={"realTime": args.epoch},
            commit_interval=args.commit_interval,
            arrow_batch_rows=args.arrow_batch_rows,
        )
    else:
        writer = twophase.write_stream(
            df, sink, checkpoint_location=checkpoint, trigger={"processingTime": "0 seconds"}
        )
    return writer.start()


def _query_error(query: Any) -> str | None:
    if query.isActive:
        return None
    error = query.exception()
    return f"the query stopped: {error}" if error else "the query stopped"


def _stop(query: Any) -> None:
    with contextlib.suppress(Exception):
        query.stop()


def _wait(
    reader: Reader, seqs: range, query: Any, deadline: float, also: Callable[[], bool] | None
) -> str | None:
    """Wait until every row of ``seqs`` is seen (or the deadline, or a failure); say why not."""
    while True:
        if reader.error:
            return f"the reader failed: {reader.error}"
        if (also is None or also()) and reader.count_in(seqs) >= len(seqs):
            return None
        error = _query_error(query)
        if error:
            return error
        if time.monotonic() > deadline:
            return None  # the count says what is missing
        time.sleep(0.2)


def latency_run(spark: Any, variant: str, args: argparse.Namespace, rate: float) -> dict:
    """One rate: warm up, produce ``rate`` records/s for ``--seconds``, measure each row.

    Returns
    -------
    dict
        Percentiles of the latency (s), counts, the producer's achieved rate, the load.
    """
    from twophase_dev import attach_kafka

    source = f"bench-rt-src-{uuid.uuid4().hex[:10]}"
    attach_kafka(args.bootstrap).create_topic(source, partitions=2)
    target = Target(VARIANTS[variant]["sink"], args)
    reader = target.reader()
    count = int(rate * args.seconds)
    feeder = Feeder(args.bootstrap, source, 0, TRICKLE_RATE, rate, count)
    query = start_query(spark, variant, args, source, target)
    error = None
    load = load_average()
    try:
        feeder.start()
        warm_deadline = time.monotonic() + args.warmup_timeout
        while len(reader.seen) < WARM_ROWS and not error:
            error = _query_error(query) or (reader.error and f"the reader failed: {reader.error}")
            if time.monotonic() > warm_deadline:
                error = f"no {WARM_ROWS} warm-up rows seen within {args.warmup_timeout:g} s"
            time.sleep(0.1)
        feeder.warm.set()
        load = load_average()
        if not error:
            deadline = time.monotonic() + args.seconds + _seconds(args.epoch) + args.drain
            error = _wait(reader, feeder.measured_range(), query, deadline, feeder.measured.is_set)
    finally:
        feeder.stopping.set()
        feeder.join(60)
        _stop(query)
        reader.close()
    seqs = feeder.measured_range()
    rows, copies = target_totals(target, seqs, reader)
    target.drop()
    latencies = [reader.seen[s][1] - reader.seen[s][0] for s in seqs if s in reader.seen]
    span = feeder.ended_at - feeder.started_at
    result: dict[str, Any] = {
        "rate": rate,
        "produced": count,
        "achieved_rate": round(count / span, 1) if span > 0 else None,
        "seen": len(latencies),
        "in_sink": rows,
        "duplicates": copies,
        "load": load,
        "error": error or (f"produce failed: {feeder.failed[:3]}" if feeder.failed else None),
    }
    if latencies:
        result.update({f"p{q}": round(percentile(latencies, q), 4) for q in (50, 95, 99)})
        result["max"] = round(max(latencies), 4)
        result["p50_by_second"] = by_second([reader.seen[s] for s in seqs if s in reader.seen])
    return result


def by_second(rows: list[tuple[float, float]]) -> list[float]:
    """The p50 latency of the rows produced in each second of the run (does it grow?).

    Parameters
    ----------
    rows
        ``(produced, seen)`` wall times.

    Returns
    -------
    list of float
        One median per second from the first row produced.
    """
    start = min(p for p, _ in rows)
    buckets: dict[int, list[float]] = {}
    for produced, seen in rows:
        buckets.setdefault(int(produced - start), []).append(seen - produced)
    return [round(statistics.median(buckets[k]), 3) for k in sorted(buckets)]


def target_totals(target: Target, seqs: range, reader: Reader) -> tuple[int, int]:
    """Rows of ``seqs`` the destination holds, and copies (a fresh look for PostgreSQL)."""
    if target.kind == "postgres":
        import psycopg2

        conn = psycopg2.connect(target.args.pg_dsn)
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"SELECT count(*), count(DISTINCT seq) FROM {target.name} "
                    "WHERE seq >= %s AND seq < %s",
                    (seqs.start, seqs.stop),
                )
                total, distinct = cur.fetchone()
        finally:
            conn.close()
        return int(distinct), int(total - distinct)
    return reader.count_in(seqs), reader.duplicates


def backlog_run(spark: Any, variant: str, args: argparse.Namespace) -> dict:
    """Produce ``--backlog`` records, then start the query; time until all are seen.

    Returns
    -------
    dict
        Rows/s from the query's start to the last row seen, counts, the load.
    """
    from twophase_dev import attach_kafka

    source = f"bench-rt-src-{uuid.uuid4().hex[:10]}"
    attach_kafka(args.bootstrap).create_topic(source, partitions=2)
    count = args.backlog
    produce_backlog(args.bootstrap, source, count)
    target = Target(VARIANTS[variant]["sink"], args)
    reader = target.reader()
    feeder = Feeder(args.bootstrap, source, count, TRICKLE_RATE, TRICKLE_RATE, 0)
    feeder.warm.set()
    seqs = range(count)
    load = load_average()
    started = time.time()
    query = start_query(spark, variant, args, source, target)
    try:
        feeder.start()  # the trickle: the backlog's last rows need rows after them
        error = _wait(reader, seqs, query, time.monotonic() + args.backlog_timeout, None)
    finally:
        feeder.stopping.set()
        feeder.join(60)
        _stop(query)
        reader.close()
    rows, copies = target_totals(target, seqs, reader)
    target.drop()
    times = [reader.seen[s][1] for s in seqs if s in reader.seen]
    result: dict[str, Any] = {
        "rows": count,
        "seen": len(times),
        "in_sink": rows,
        "duplicates": copies,
        "load": load,
        "error": error,
    }
    if times and len(times) == count:
        last = max(times)
        result.update(
            seconds=round(last - started, 3),
            rows_per_s=round(count / (last - started), 1),
            first_seen_s=round(min(times) - started, 3),
        )
    return result


def child(args: argparse.Namespace) -> int:
    """Run one variant at every rate, then its backlog, in this process's Spark JVM."""
    from twophase_dev import spark_session

    spark = spark_session(
        f"bench-rt-{args.child}",
        extra_conf={"spark.sql.streaming.stopTimeout": "30s"},
        log_level="ERROR",
    )
    out: dict[str, Any] = {"latency": [], "backlog": None}
    for rate in args.rates:
        try:
            result = latency_run(spark, args.child, args, rate)
        except Exception as exc:  # a failed variant is a result, not a crash of the benchmark
            result = {"rate": rate, "error": f"{type(exc).__name__}: {exc}"[:1000]}
        _log(f"  {args.child} @ {rate:g}/s: {result}")
        out["latency"].append(result)
    if args.backlog:
        try:
            out["backlog"] = backlog_run(spark, args.child, args)
        except Exception as exc:
            out["backlog"] = {"rows": args.backlog, "error": f"{type(exc).__name__}: {exc}"[:1000]}
        _log(f"  {args.child} backlog: {out['backlog']}")
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
    return 0


# ------------------------------------------------------------------ driver (parent process)
def _run_child(name: str, args: argparse.Namespace) -> dict:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--bootstrap",
        args.bootstrap,
        "--pg-dsn",
        args.pg_dsn,
        "--rates",
        ",".join(f"{r:g}" for r in args.rates),
        "--seconds",
        str(args.seconds),
        "--epoch",
        args.epoch,
        "--commit-interval",
        str(args.commit_interval),
        "--arrow-batch-rows",
        str(args.arrow_batch_rows),
        "--backlog",
        str(args.backlog),
        "--backlog-timeout",
        str(args.backlog_timeout),
        "--warmup-timeout",
        str(args.warmup_timeout),
        "--drain",
        str(args.drain),
    ]
    per_rate = args.warmup_timeout + args.seconds + _seconds(args.epoch) + args.drain + 90
    timeout = 180 + per_rate * len(args.rates) + (args.backlog_timeout + 90 if args.backlog else 0)
    try:
        proc = subprocess.run(
            argv, stdout=subprocess.PIPE, text=True, check=False, cwd=ROOT, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        error = f"the child ran over {timeout:.0f} s"
    else:
        for line in proc.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT ") :])
        error = f"the child exited {proc.returncode} without a result (its log is above)"
    return {
        "latency": [{"rate": r, "error": error} for r in args.rates],
        "backlog": {"rows": args.backlog, "error": error} if args.backlog else None,
    }


def _median(runs: list[dict], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _cell(value: float | None, fmt: str) -> str:
    return "-" if value is None else fmt.format(value)


def _counts(runs: list[dict], produced: str) -> str:
    """``seen/produced`` of each run, and what the sink holds when it differs."""
    cells = []
    for r in runs:
        text = f"{r.get('seen', 0)}/{r.get(produced, 0)}"
        if r.get("in_sink") is not None and r["in_sink"] != r.get("seen"):
            text += f" (sink {r['in_sink']})"
        cells.append(text)
    return ", ".join(cells)


def latency_table(results: dict[str, list[dict]], rates: list[float]) -> str:
    """The markdown table of latencies: one line per variant and rate.

    Parameters
    ----------
    results
        Variant -> every run's child result (``{"latency": [...], "backlog": ...}``).
    rates
        The rates measured.

    Returns
    -------
    str
        The table.
    """
    lines = [
        "| variant | rate/s | runs | p50 s | p95 s | p99 s | max s | p50 1st->last s "
        "| seen/produced | dup | load |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|--:|---|",
    ]
    notes = []
    for name, runs in results.items():
        for rate in rates:
            at = [r for run in runs for r in run["latency"] if r.get("rate") == rate]
            good = [r for r in at if r.get("p50") is not None]
            cells = [_cell(_median(good, k), "{:.3f}") for k in ("p50", "p95", "p99", "max")]
            dup = sum(r.get("duplicates") or 0 for r in at)
            load = ", ".join(f"{r['load'][0]:.1f}" for r in at if r.get("load"))
            trend = [r["p50_by_second"] for r in good if r.get("p50_by_second")]
            first = statistics.median(t[0] for t in trend) if trend else None
            last = statistics.median(t[-1] for t in trend) if trend else None
            growth = f"{first:.2f}->{last:.2f}" if trend else "-"
            lines.append(
                f"| {name} | {rate:g} | {len(good)} | {' | '.join(cells)} | {growth} "
                f"| {_counts(at, 'produced')} | {dup} | {load} |"
            )
            for r in at:
                if r.get("error") or r.get("seen") != r.get("produced") or r.get("duplicates"):
                    notes.append(f"{name} @ {rate:g}/s: {r.get('error') or 'rows missing'}")
    return "\n".join(lines + [""] + [f"- {n}" for n in notes])


def backlog_table(results: dict[str, list[dict]]) -> str:
    """The markdown table of backlog throughput and the rt/mb ratios.

    Parameters
    ----------
    results
        Variant -> every run's child result.

    Returns
    -------
    str
        The table, then one line per ratio.
    """
    lines = [
        "| variant | backlog rows | runs | rows/s | s to all seen | s to first seen "
        "| seen/produced | dup |",
        "|---|--:|--:|--:|--:|--:|---|--:|",
    ]
    rates: dict[str, float | None] = {}
    notes = []
    for name, runs in results.items():
        at = [run["backlog"] for run in runs if run.get("backlog")]
        if not at:
            continue
        good = [r for r in at if r.get("rows_per_s") is not None]
        rates[name] = _median(good, "rows_per_s")
        dup = sum(r.get("duplicates") or 0 for r in at)
        lines.append(
            f"| {name} | {at[0]['rows']} | {len(good)} | {_cell(rates[name], '{:,.0f}')} "
            f"| {_cell(_median(good, 'seconds'), '{:.2f}')} "
            f"| {_cell(_median(good, 'first_seen_s'), '{:.2f}')} | {_counts(at, 'rows')} "
            f"| {dup} |"
        )
        notes.extend(f"{name} backlog: {r['error']}" for r in at if r.get("error"))
    lines.append("")
    for sink, label in (("postgres", "PostgreSQL"), ("kafka", "Kafka")):
        rt, mb = rates.get(f"rt-{sink}"), rates.get(f"mb-{sink}")
        if rt and mb:
            lines.append(
                f"throughput rt/mb, {label}: {rt / mb:.2f}x ({rt:,.0f} / {mb:,.0f} rows/s)"
            )
    return "\n".join(lines + [f"- {n}" for n in notes])


def _servers(args: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    """Fill ``args.bootstrap`` and ``args.pg_dsn``: the dev servers', else servers started here."""
    args.bootstrap = os.environ.get("TWOPHASE_KAFKA_BOOTSTRAP")
    args.pg_dsn = os.environ.get("TWOPHASE_PG_DSN")
    work = Path(tempfile.mkdtemp(prefix="bench-rt-"))
    if not args.bootstrap:
        from twophase_dev import KafkaBroker

        _log("starting a Kafka broker ...")
        broker = KafkaBroker(log_dir=work / "kafka").start()
        stack.callback(broker.stop)
        args.bootstrap = broker.bootstrap_servers
    if not args.pg_dsn:
        from twophase_dev import PostgresServer

        _log("starting a PostgreSQL server ...")
        server = PostgresServer(log_dir=work / "pg").start()
        stack.callback(server.stop)
        args.pg_dsn = server.dsn


def _pg_settings(dsn: str) -> dict[str, str]:
    import psycopg2

    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            out = {}
            for name in ("server_version", "fsync", "synchronous_commit"):
                cur.execute(f"SHOW {name}")
                out[name] = str(cur.fetchone()[0])
            return out
    finally:
        conn.close()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, checked: rates and variants as lists.

    Parameters
    ----------
    argv
        The arguments (default: ``sys.argv[1:]``).

    Returns
    -------
    argparse.Namespace
        With ``rates`` a list of floats and ``variants`` a list of names.
    """
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--rates", default="1000,2500", help="records/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per rate")
    parser.add_argument("--runs", type=int, default=1, help="runs of each variant (default 1)")
    parser.add_argument("--epoch", default="30 seconds", help="trigger realTime (real-time)")
    parser.add_argument("--commit-interval", type=float, default=0.2, help="twophase real-time")
    parser.add_argument(
        "--arrow-batch-rows", type=int, default=1, help="twophase real-time: rows per Arrow batch"
    )
    parser.add_argument("--backlog", type=int, default=200_000, help="records; 0: no backlog run")
    parser.add_argument("--backlog-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument("--warmup-timeout", type=float, default=180.0, help="seconds")
    parser.add_argument("--drain", type=float, default=30.0, help="seconds past an epoch to wait")
    parser.add_argument("--json", type=Path, help="also write every run's numbers here")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--pg-dsn", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.rates = [float(r) for r in args.rates.split(",") if r.strip()]
    args.variants = [n.strip() for n in args.variants.split(",") if n.strip()]
    unknown = [n for n in args.variants if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {unknown}; choose from {', '.join(VARIANTS)}")
    if args.child and args.child not in VARIANTS:
        parser.error(f"unknown variant {args.child}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run every variant ``--runs`` times, interleaved; print the tables."""
    args = parse_args(argv)
    if args.child:
        return child(args)
    import pyspark

    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    load_start = load_average()
    results: dict[str, list[dict]] = {n: [] for n in args.variants}
    with contextlib.ExitStack() as stack:
        _servers(args, stack)
        pg = _pg_settings(args.pg_dsn)
        for run in range(args.runs):
            for name in args.variants:  # interleaved, so that a change of load touches each
                _log(f"run {run + 1}/{args.runs}: {name} (load {load_average()[0]:.1f})")
                results[name].append(_run_child(name, args))
    print(
        f"\nreal-time mode against micro-batches: PySpark {pyspark.__version__}, local[2], a "
        f"source topic of 2 partitions, {args.seconds:g} s of records per rate, "
        f"trigger realTime '{args.epoch}', commit_interval {args.commit_interval:g} s, "
        f"arrow_batch_rows {args.arrow_batch_rows}, "
        f"micro-batches at processingTime 0; PostgreSQL {pg['server_version']} (fsync "
        f"{pg['fsync']}, synchronous_commit {pg['synchronous_commit']}); medians of {args.runs} "
        f"run(s) of each run's percentile of (seen by the reader - produced)\n"
        f"started {started}, commit {commit}, load average at start {load_start}, "
        f"at end {load_average()}\n"
    )
    print(latency_table(results, args.rates))
    if args.backlog:
        print()
        print(backlog_table(results))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in vars(args).items() if k not in {"json", "child", "pg_dsn"}}
        args.json.write_text(
            json.dumps(
                {
                    "started": started,
                    "commit": commit,
                    "load": load_start,
                    "postgresql": pg,
                    "settings": settings,
                    "runs": results,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

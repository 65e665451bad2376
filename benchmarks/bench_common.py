"""What every comparison of the benchmark suite shares (``benchmarks/run.py`` drives them).

* :class:`Env` -- the servers and the Spark session, started on first use and stopped at the end:
  one Kafka broker, one *durable* PostgreSQL cluster (fsync, synchronous_commit and
  full_page_writes on; ``max_prepared_transactions=1400`` so that the coordinated protocol can
  hold 1,000 in-doubt transactions), one ``local[2]`` SparkSession with Spark's Kafka connector
  and the PostgreSQL JDBC driver (resolved from Maven Central with
  ``twophase_dev.resolve_classpath``).
* :class:`Comparison` -- what one comparison records: measurements (samples, median, spread),
  checks against goals (a ratio against a baseline measured in the same run, or a limit), plot
  data and notes; it becomes one entry of ``results.json``.
* small helpers: statistics, load average, the Python workers' memory, streaming queries that stop
  after a number of micro-batches.

Nothing here is imported by the library or the tests.
"""

from __future__ import annotations

import contextlib
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

#: The PostgreSQL JDBC driver Spark's JDBC writer uses (Maven Central).
PG_JDBC = "org.postgresql:postgresql:42.7.13"
#: MariaDB Connector/J, the driver of Spark's JDBC writer into MariaDB (Maven Central).
MARIADB_JDBC = "org.mariadb.jdbc:mariadb-java-client:3.5.11"
#: Durable, as a production server: the InnoDB log and the binary log are flushed at every
#: commit and XA PREPARE (the dev server flushes neither); room for the benchmark's tables.
MARIADB_SETTINGS = {
    "innodb_flush_log_at_trx_commit": "1",
    "sync_binlog": "1",
    "innodb_doublewrite": "1",
    "innodb_buffer_pool_size": "1G",
    "innodb_log_file_size": "512M",
    "max_allowed_packet": "256M",
}
#: The coordinated protocol must be able to hold 1,000 in-doubt transactions (comparison
#: "recovery"); the connector leaves a quarter of the server's slots free, so 1,400 gives a limit
#: of 1,050.
MAX_PREPARED = 1400
#: Durable, as a production server: every commit, PREPARE and COMMIT PREPARED is flushed.
PG_SETTINGS = {
    "fsync": "on",
    "synchronous_commit": "on",
    "full_page_writes": "on",
    "shared_buffers": "'512MB'",
    "max_wal_size": "'8GB'",
    "max_connections": "200",
    "checkpoint_timeout": "'30min'",
}


# ------------------------------------------------------------------ statistics
def summary(samples: Sequence[float]) -> dict[str, Any]:
    """Median and spread of ``samples`` (min, max, quartiles), JSON-ready."""
    values = sorted(float(s) for s in samples)
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None, "p25": None, "p75": None}
    if len(values) >= 2:
        q = statistics.quantiles(values, n=4, method="inclusive")
        p25, p75 = q[0], q[2]
    else:
        p25 = p75 = values[0]
    return {
        "n": len(values),
        "median": statistics.median(values),
        "min": values[0],
        "max": values[-1],
        "p25": p25,
        "p75": p75,
    }


def spread_text(s: dict[str, Any], fmt: str = "{:,.0f}") -> str:
    """``median (min-max)`` for a report line."""
    if not s.get("n"):
        return "-"
    if s["n"] == 1:
        return fmt.format(s["median"])
    return f"{fmt.format(s['median'])} ({fmt.format(s['min'])}-{fmt.format(s['max'])})"


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages of the machine."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def log(message: str) -> None:
    """Progress line on stdout, flushed (the suite runs for minutes)."""
    print(message, flush=True)


def ratio_spread(candidate: dict[str, Any], baseline: dict[str, Any]) -> list[float]:
    """Spread of ``candidate / baseline``: worst and best pairing of the samples' extremes.

    For many samples (per-batch times) the quartiles instead of min and max: one slow batch among
    thousands says nothing about the ratio.
    """
    lo, hi = ("p25", "p75") if min(candidate["n"], baseline["n"]) >= 10 else ("min", "max")
    value = candidate["median"] / baseline["median"] if baseline["median"] else float("nan")
    low = candidate[lo] / baseline[hi] if baseline[hi] else value
    high = candidate[hi] / baseline[lo] if baseline[lo] else value
    return [low, high]


# ------------------------------------------------------------------ results
@dataclass
class Comparison:
    """The results of one comparison, as stored in ``results.json``."""

    name: str
    title: str
    quick: bool
    params: dict[str, Any] = field(default_factory=dict)
    measurements: list[dict[str, Any]] = field(default_factory=list)
    checks: list[dict[str, Any]] = field(default_factory=list)
    series: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    started: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    load_before: list[float] = field(default_factory=load_average)
    load_after: list[float] = field(default_factory=list)
    seconds: float = 0.0
    _t0: float = field(default_factory=time.perf_counter)

    def measure(
        self, group: str, name: str, unit: str, samples: Sequence[float], **extra: Any
    ) -> dict[str, Any]:
        """Record one measurement (all samples kept) and return it."""
        entry = {
            "group": group,
            "name": name,
            "unit": unit,
            "samples": [float(s) for s in samples],
            **summary(samples),
            **extra,
        }
        self.measurements.append(entry)
        return entry

    def get(self, group: str, name: str) -> dict[str, Any]:
        """The measurement recorded as ``group`` / ``name``."""
        for entry in self.measurements:
            if entry["group"] == group and entry["name"] == name:
                return entry
        raise KeyError((group, name))

    def ratio(
        self,
        label: str,
        candidate: dict[str, Any],
        baseline: dict[str, Any],
        *,
        goal: float | None,
        higher_is_better: bool = True,
    ) -> dict[str, Any]:
        """Check ``candidate / baseline`` (medians, same run) against ``goal`` and print it."""
        value = candidate["median"] / baseline["median"] if baseline["median"] else float("nan")
        low, high = ratio_spread(candidate, baseline)
        return self._check(
            label,
            "ratio",
            value,
            goal,
            ">=" if higher_is_better else "<=",
            unit="x",
            candidate=candidate["name"],
            baseline=baseline["name"],
            group=candidate["group"],
            spread=[low, high],
        )

    def limit(
        self, label: str, value: float, goal: float | None, op: str, unit: str, **extra: Any
    ) -> dict[str, Any]:
        """Check an absolute value (added milliseconds, seconds...) against ``goal``."""
        return self._check(label, "limit", value, goal, op, unit=unit, **extra)

    def _check(
        self, label: str, kind: str, value: float, goal: float | None, op: str, **extra: Any
    ) -> dict[str, Any]:
        met: bool | None = None
        if goal is not None:
            met = bool(value >= goal) if op == ">=" else bool(value <= goal)
        entry = {"label": label, "kind": kind, "value": value, "goal": goal, "op": op, "met": met}
        entry.update(extra)
        self.checks.append(entry)
        unit = extra.get("unit", "")
        shown = f"{value:.2f}{unit}" if unit == "x" else f"{value:,.1f} {unit}"
        verdict = "" if met is None else (" MET" if met else " MISSED")
        goal_text = "" if goal is None else f"   goal {op} {goal:g}{'x' if unit == 'x' else ''}"
        log(f"  >> {label}: {shown}{goal_text}{verdict}")
        return entry

    def finish(self) -> dict[str, Any]:
        """The JSON entry of this comparison."""
        self.seconds = time.perf_counter() - self._t0
        self.load_after = load_average()
        return {
            "name": self.name,
            "title": self.title,
            "quick": self.quick,
            "started": self.started,
            "seconds": round(self.seconds, 1),
            "load_before": self.load_before,
            "load_after": self.load_after,
            "params": self.params,
            "measurements": self.measurements,
            "checks": self.checks,
            "series": self.series,
            "notes": self.notes,
        }


# ------------------------------------------------------------------ environment
def _run(conn: Any, statements: Sequence[str], fetch: bool) -> Any:
    """Run ``statements`` on ``conn``, then close it; the last one's rows if ``fetch``."""
    try:
        with conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)
            return cur.fetchall() if fetch else None
    finally:
        conn.close()


class Env:
    """Servers and Spark, each started on first use, all stopped by :meth:`close`."""

    def __init__(self, quick: bool, reps: int | None = None) -> None:
        self.quick = quick
        self.reps = reps if reps is not None else (1 if quick else 3)
        self.work = Path(tempfile.mkdtemp(prefix="twophase-bench-"))
        self._kafka: Any = None
        self._pg: Any = None
        self._maria: Any = None
        self._spark: Any = None
        # Executors import the benchmark modules (mapInArrow functions, their per-worker caches).
        paths = [str(BENCH_DIR), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)

    # -- servers
    @property
    def kafka(self) -> Any:
        """The Kafka broker (``bootstrap_servers``, ``create_topic``)."""
        if self._kafka is None:
            from twophase_dev import KafkaBroker

            log("starting a Kafka broker ...")
            self._kafka = KafkaBroker(heap="1g", log_dir=self.work / "kafka-logs").start()
        return self._kafka

    @property
    def pg(self) -> Any:
        """The durable PostgreSQL server (``dsn``, ``jdbc_url``, ``connect()``)."""
        if self._pg is None:
            from twophase_dev import PostgresServer

            log("starting a durable PostgreSQL server ...")
            self._pg = PostgresServer(
                max_prepared_transactions=MAX_PREPARED,
                settings=PG_SETTINGS,
                log_dir=self.work / "pg-logs",
            ).start()
        return self._pg

    @property
    def maria(self) -> Any:
        """The durable MariaDB server (``password_url``, ``jdbc_url``, ``connect()``)."""
        if self._maria is None:
            from twophase_dev import MariaDBServer

            log("starting a durable MariaDB server ...")
            self._maria = MariaDBServer(
                settings=MARIADB_SETTINGS, log_dir=self.work / "mariadb-logs"
            ).start()
        return self._maria

    def maria_sql(self, *statements: str, fetch: bool = False) -> Any:
        """Run statements in autocommit on the MariaDB server; the last one's rows if asked."""
        return _run(self.maria.connect(autocommit=True), statements, fetch)

    def sql(self, *statements: str, fetch: bool = False) -> Any:
        """Run statements in autocommit on the PostgreSQL server; the last one's rows if asked."""
        conn = self.pg.connect()
        conn.autocommit = True
        return _run(conn, statements, fetch)

    # -- Spark
    @property
    def spark(self) -> Any:
        """The local[2] SparkSession with the Kafka connector and both JDBC drivers."""
        if self._spark is None:
            from twophase_dev import resolve_classpath, spark_kafka_jars, spark_session

            log("starting Spark (local[2]) ...")
            jars = [
                *spark_kafka_jars(),
                *resolve_classpath([PG_JDBC], name="bench-pg-jdbc"),
                *resolve_classpath([MARIADB_JDBC], name="bench-mariadb-jdbc"),
            ]
            self._spark = spark_session(
                "twophase-bench",
                extra_conf={
                    "spark.jars": ",".join(str(j) for j in jars),
                    "spark.driver.memory": "2g",
                    "spark.sql.shuffle.partitions": "4",
                    "spark.sql.streaming.numRecentProgressUpdates": "1000",
                    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
                    "spark.sql.warehouse.dir": str(self.work / "warehouse"),
                },
                log_level="ERROR",
            )
        return self._spark

    def checkpoint(self) -> str:
        """A fresh checkpoint location (local file system, like most test setups)."""
        return str(self.work / "chk" / uuid.uuid4().hex)

    def close(self) -> None:
        """Stop Spark and the servers."""
        import shutil

        if self._spark is not None:
            with contextlib.suppress(Exception):
                self._spark.stop()
        if self._kafka is not None:
            with contextlib.suppress(Exception):
                self._kafka.stop()
        if self._pg is not None:
            with contextlib.suppress(Exception):
                self._pg.stop()
        if self._maria is not None:
            with contextlib.suppress(Exception):
                self._maria.stop()
        shutil.rmtree(self.work, ignore_errors=True)

    def versions(self) -> dict[str, str]:
        """Versions of what is measured, for the report."""
        import importlib.metadata as md

        out = {"python": platform.python_version()}
        for dist in ("pyspark", "pyarrow", "confluent-kafka", "psycopg2-binary", "PyMySQL"):
            with contextlib.suppress(md.PackageNotFoundError):
                out[dist] = md.version(dist)
        with contextlib.suppress(Exception):
            import confluent_kafka

            out["librdkafka"] = confluent_kafka.libversion()[0]
        if self._kafka is not None:
            out["kafka broker"] = str(self._kafka.version)
        if self._pg is not None:
            with contextlib.suppress(Exception):
                out["postgresql"] = str(self.sql("SHOW server_version", fetch=True)[0][0])
        out["postgresql jdbc"] = PG_JDBC.rsplit(":", 1)[-1]
        if self._maria is not None:
            with contextlib.suppress(Exception):
                out["mariadb"] = str(self.maria_sql("SELECT VERSION()", fetch=True)[0][0])
            out["mariadb connector/j"] = MARIADB_JDBC.rsplit(":", 1)[-1]
        return out


# ------------------------------------------------------------------ streaming helpers
@dataclass
class BatchTimer:
    """A ``foreachBatch`` function around another one that times the first ``count`` batches.

    Batches after those are skipped (nothing written), so that stopping the query never
    interrupts a real write. ``times`` holds ``(batch_id, seconds)`` of every timed batch.
    """

    fn: Callable[[Any, int], None]
    count: int
    times: list[tuple[int, float]] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def __call__(self, df: Any, batch_id: int) -> None:
        if self.done.is_set():
            return
        started = time.perf_counter()
        try:
            self.fn(df, batch_id)
        except BaseException as exc:
            self.error = exc
            self.done.set()
            raise
        self.times.append((batch_id, time.perf_counter() - started))
        if len(self.times) >= self.count:
            self.done.set()


def run_batches(
    writer: Any, timer: BatchTimer, *, timeout: float = 1800.0
) -> list[tuple[int, float]]:
    """Start ``writer`` (a DataStreamWriter whose foreachBatch is ``timer``), wait, stop."""
    query = writer.start()
    try:
        deadline = time.monotonic() + timeout
        while not timer.done.wait(0.05):
            if query.exception() is not None:
                raise RuntimeError(f"streaming query failed: {query.exception()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(timer.times)} of {timer.count} batches in {timeout} s")
    finally:
        query.stop()
    if timer.error is not None:
        raise RuntimeError(f"batch failed: {timer.error!r}") from timer.error
    return timer.times


def await_query(query: Any) -> None:
    """Wait for an ``availableNow`` query; raise its failure."""
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()))


# ------------------------------------------------------------------ worker memory
def _children(pid: int) -> list[int]:
    kids: list[int] = []
    task_dir = Path(f"/proc/{pid}/task")
    with contextlib.suppress(OSError):
        for task in task_dir.iterdir():
            with contextlib.suppress(OSError):
                kids.extend(int(c) for c in (task / "children").read_text().split())
    return kids


def python_workers() -> list[int]:
    """PIDs of this driver's PySpark daemon and workers (descendants running ``pyspark``)."""
    found = []
    stack = _children(os.getpid())
    while stack:
        pid = stack.pop()
        stack.extend(_children(pid))
        with contextlib.suppress(OSError):
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"pyspark.daemon" in cmd or b"pyspark.worker" in cmd:
                found.append(pid)
    return found


def rss_mb(pid: int) -> float:
    """Resident set size of ``pid`` in MiB (0 when gone)."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@contextlib.contextmanager
def sample_worker_rss(interval: float = 0.05) -> Iterator[dict[str, float]]:
    """Sample the Python workers' RSS while the block runs: peak per process and in total."""
    peaks = {"max_process_mb": 0.0, "max_total_mb": 0.0, "samples": 0}
    stop = threading.Event()

    def sample() -> None:
        pids: list[int] = []
        last_scan = 0.0
        while not stop.is_set():
            now = time.monotonic()
            if now - last_scan > 1.0:  # new workers appear rarely
                pids, last_scan = python_workers(), now
            sizes = [rss_mb(p) for p in pids]
            if sizes:
                peaks["max_process_mb"] = max(peaks["max_process_mb"], max(sizes))
                peaks["max_total_mb"] = max(peaks["max_total_mb"], sum(sizes))
                peaks["samples"] += 1
            stop.wait(interval)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peaks
    finally:
        stop.set()
        thread.join()


def fmt_rate(value: float) -> str:
    """Rows or records per second, for a log line."""
    return f"{value:>12,.0f}/s"


def machine() -> dict[str, Any]:
    """The machine, for the report."""
    mem_kb = 0
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem_kb = int(line.split()[1])
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory_gib": round(mem_kb / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python_executable": sys.executable,
    }

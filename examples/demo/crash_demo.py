"""Crash demo: the orders pipeline, SIGKILLed and restarted, stays exactly-once.

What it does:

1. starts a Kafka broker and a PostgreSQL server through :mod:`twophase_dev` on free loopback ports
   (or reuses the ones ``--bootstrap-servers`` / ``--dsn`` or ``$TWOPHASE_KAFKA_BOOTSTRAP`` /
   ``$TWOPHASE_PG_DSN`` name), and writes a known, seeded stream of JSON order events to a new
   topic;
2. runs the Spark driver of ``examples/demo/orders_pipeline.py`` as a subprocess: per-customer
   totals upserted into PostgreSQL (twophase, coordinated protocol), every enriched event
   published to Kafka (twophase ``KafkaSink``), and the same events appended by a naive
   ``foreachBatch`` with plain INSERTs, as three queries of one driver;
3. while it runs, SIGKILLs the driver and everything it started -- the Python driver, the JVM and
   the Python workers -- ``--kills`` times and restarts it from its checkpoints. Each kill comes
   at a random (seeded) point in the run, at a moment when every query is writing a batch (read
   from Spark's checkpoint: ``offsets/N`` written, ``commits/N`` not yet): a kill between batches
   would test nothing. Once, a Python worker SIGKILLs itself in the middle of a task, a task
   failure that Spark retries;
4. shows progress as it goes (batches per query, crashes, recoveries, and what each kill left
   behind), then reads every target back and prints one summary: records in, records out,
   duplicates and losses per sink, batches, what recovery did (from the driver's
   ``twophase sink=... batch=...`` metrics lines), and the wall time.

Exit status: 0 when both twophase sinks hold every input event exactly once (the naive sink's
duplicates are expected and only reported), 1 otherwise, 2 for a setup problem, 130 on Ctrl-C.

Assumptions: a Linux machine prepared by ``scripts/setup.sh`` (Java 17+, PostgreSQL binaries, the
project's virtualenv); two cores are enough (about two minutes with the defaults). A reused
PostgreSQL server needs ``max_prepared_transactions > 0`` and a superuser DSN. Every run uses its
own topics, schema and checkpoints, so runs never see each other's data.

Guarantees shown, and their limits: see ``examples/demo/orders_pipeline.py``. The naive sink only
loses anything to a kill that lands after one of its partitions committed and before Spark recorded
the batch (each kill says what it caught). So until one kill has caught it there, the next kill
also watches for that window -- the naive table holding rows of a batch Spark has not recorded --
and lands at once when it opens: every run shows the duplicates the guarantee prevents. The other
kills land at their seeded points; another ``--seed`` moves them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The examples' shared helper, examples/_spark.py, one directory up.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import _spark
import orders_pipeline as pipeline

from twophase.connectors.jdbc import list_prepared_transactions
from twophase.errors import ConfigurationError
from twophase_dev import DevInfraError

HERE = Path(__file__).resolve().parent
QUERIES = ("totals", "enriched", "naive")
#: The metrics line every twophase sink logs per batch (see docs/operations.md, "Metrics").
METRICS = re.compile(
    r"twophase sink=(?P<sink>\S+) batch=(?P<batch>\d+) protocol=\S+ outcome=(?P<outcome>\S+) "
    r"rows=(?P<rows>\d+) .*?skipped=(?P<skipped>\d+) .*?"
    r"recovered_committed=(?P<rc>\d+) recovered_aborted=(?P<ra>\d+)"
)
NAIVE_DONE = re.compile(r"naive batch=(?P<batch>\d+) rows=(?P<rows>\d+)")
#: Sink names in the metrics lines -> query names.
SINKS = {"orders_totals": "totals", "orders_enriched": "enriched"}
LABELS = {
    "totals": "PostgreSQL upsert  (twophase, coordinated protocol)",
    "enriched": "Kafka topic        (twophase KafkaSink)",
    "naive": "PostgreSQL INSERT  (naive foreachBatch)",
}


@dataclass
class QueryStats:
    """What the driver logs say about one query, over all driver runs."""

    batches: set[int] = field(default_factory=set)
    interrupted: int = 0  # kills that caught the query with a batch in flight
    already_committed: int = 0  # replays skipped: the batch had committed before the crash
    recovered_batches: int = 0  # batches finished from an earlier run's decision
    decisions_finished: int = 0  # recovered_committed
    orphans_aborted: int = 0  # recovered_aborted
    partitions_skipped: int = 0  # markers protocol: partitions whose marker showed them committed

    @property
    def recoveries(self) -> int:
        """Return the recovery actions seen in the metrics lines."""
        return (
            self.already_committed
            + self.recovered_batches
            + self.decisions_finished
            + self.orphans_aborted
            + self.partitions_skipped
        )


class Progress:
    """Reads the driver logs as they grow and Spark's checkpoints; keeps per-query statistics."""

    def __init__(self, checkpoints: Path, expected_batches: int) -> None:
        self.checkpoints = checkpoints
        self.expected = expected_batches
        self.stats = {q: QueryStats() for q in QUERIES}
        self.new_batches_this_run = 0  # batches never seen finished before this driver run
        self._offsets: dict[Path, int] = {}

    def read(self, log: Path) -> list[str]:
        """Parse the complete lines added to ``log``; return notes about recoveries."""
        notes: list[str] = []
        with contextlib.suppress(FileNotFoundError), open(log, "rb") as f:
            f.seek(self._offsets.get(log, 0))
            data = f.read()
            end = data.rfind(b"\n") + 1
            self._offsets[log] = self._offsets.get(log, 0) + end
            for line in data[:end].decode(errors="replace").splitlines():
                notes.extend(self._line(line))
        return notes

    def _line(self, line: str) -> list[str]:
        if m := NAIVE_DONE.search(line):
            self._finished("naive", int(m["batch"]))
            return []
        m = METRICS.search(line)
        if m is None or m["sink"] not in SINKS:
            return []
        name, batch = SINKS[m["sink"]], int(m["batch"])
        s = self.stats[name]
        self._finished(name, batch)
        s.already_committed += m["outcome"] == "already-committed"
        s.recovered_batches += m["outcome"] == "recovered"
        s.decisions_finished += int(m["rc"])
        s.orphans_aborted += int(m["ra"])
        s.partitions_skipped += int(m["skipped"])
        what = {
            "already-committed": [
                "it had committed just before the kill, the replay wrote nothing"
            ],
            "recovered": ["finished from the decision recorded before the kill"],
        }.get(m["outcome"], [])
        for key, label in (
            ("rc", "decided transaction(s) committed"),
            ("ra", "in-doubt transaction(s) rolled back or slot(s) fenced"),
            ("skipped", "partition(s) found committed by their marker, skipped"),
        ):
            if int(m[key]):
                what.append(f"{m[key]} {label}")
        return [f"recovery: {name} batch {batch}: {', '.join(what)}"] if what else []

    def _finished(self, query: str, batch: int) -> None:
        if batch not in self.stats[query].batches:
            self.stats[query].batches.add(batch)
            self.new_batches_this_run += 1

    def spark_batches(self, query: str) -> tuple[int, int]:
        """Return (last batch started, last batch committed) from the query's checkpoint."""

        def last(sub: str) -> int:
            names = (p.name for p in (self.checkpoints / query / sub).glob("[0-9]*"))
            return max((int(n) for n in names if n.isdigit()), default=-1)

        return last("offsets"), last("commits")

    def in_flight(self) -> dict[str, int]:
        """Return query -> the batch it is writing now (started, not committed)."""
        found = {}
        for q in QUERIES:
            started, committed = self.spark_batches(q)
            if started > committed:
                found[q] = started
        return found

    def unfinished(self) -> list[str]:
        """Return the queries that have input left (as far as the expected batch count tells)."""
        return [q for q in QUERIES if self.spark_batches(q)[1] + 1 < self.expected]

    def fraction(self) -> float:
        """Return how far the queries are, 0..1 (batches done over the expected count)."""
        done = [min(1.0, len(s.batches) / self.expected) for s in self.stats.values()]
        return sum(done) / len(done)

    def line(self) -> str:
        """Return the live progress line."""
        parts = "  ".join(f"{q} {len(s.batches)}" for q, s in self.stats.items())
        recoveries = sum(s.recoveries for s in self.stats.values())
        return f"batches done (of ~{self.expected}): {parts}  recoveries {recoveries}"


class Console:
    """Event lines, plus a progress line redrawn in place on a terminal (every 5 s otherwise)."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.tty = sys.stdout.isatty()
        self._last = ""
        self._last_print = 0.0

    def _stamp(self, text: str) -> str:
        return f"[{time.monotonic() - self.started:6.1f}s] {text}"

    def event(self, text: str) -> None:
        """Print one event line."""
        if self.tty:
            sys.stdout.write("\r\x1b[K")
        print(self._stamp(text), flush=True)
        self._last = ""

    def live(self, text: str) -> None:
        """Show the progress line."""
        if self.tty:
            width = shutil.get_terminal_size().columns - 1
            sys.stdout.write("\r\x1b[K" + self._stamp(text)[:width])
            sys.stdout.flush()
        elif text != self._last and time.monotonic() - self._last_print >= 5:
            print(self._stamp(text), flush=True)
            self._last, self._last_print = text, time.monotonic()

    def clear(self) -> None:
        """Erase the progress line."""
        if self.tty:
            sys.stdout.write("\r\x1b[K")
            sys.stdout.flush()


@dataclass
class KillPlan:
    """Seeded kill points: a fraction of the run per driver kill, and one for the worker."""

    driver_at: list[float]
    worker_at: float | None
    rng: random.Random

    @classmethod
    def make(cls, kills: int, worker: bool, seed: int) -> KillPlan:
        """Spread the driver kills over 10-80 % of the run, one at a random point of each slice."""
        rng = random.Random(seed)
        lo, hi = 0.10, 0.80
        width = (hi - lo) / max(kills, 1)
        driver_at = [lo + (i + rng.random()) * width for i in range(kills)]
        return cls(driver_at, rng.uniform(0.15, 0.6) if worker else None, rng)


# ------------------------------------------------------------------------------------ processes


def worker_claim(kill_file: Path) -> dict[str, Any] | None:
    """Return what the killed worker wrote (pid, query), or None while no worker was killed."""
    try:
        return dict(json.loads(Path(f"{kill_file}.claimed").read_text()))
    except (OSError, ValueError):
        return None  # not claimed yet, or the worker is still writing it


def descendants(pid: int) -> set[int]:
    """Return the pids of every process below ``pid`` (Linux ``/proc``; empty elsewhere)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError, IndexError):  # a zombie waiting for its parent is dead
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def kill_driver(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the driver and everything it started: Python driver, JVM, Python workers.

    The driver runs in a process group of its own, but PySpark's worker daemon moves itself and
    its workers into another one (``os.setpgid(0, 0)``): both groups and every other descendant
    are killed at once, so no worker outlives the driver to finish a task on its own.
    """
    below = descendants(proc.pid)
    groups = {proc.pid}
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    groups.discard(os.getpgid(0))  # never the demo's own group
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(p) for p in below):
        time.sleep(0.1)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C: the demo stops its driver and servers and says so, without a traceback."""


#: What ends the demo with a message instead of a traceback.
_STOPS = (ConfigurationError, DevInfraError, RuntimeError, TimeoutError)
#: Set by the first Ctrl-C. Throwaway servers share the terminal's process group and stop on it
#: too, so a driver or a check that fails afterwards is part of the interruption, not a failure.
_interrupted = False


def _on_sigint(_signum: int, _frame: Any) -> None:
    global _interrupted
    _interrupted = True
    raise Interrupted


@contextlib.contextmanager
def servers(
    args: argparse.Namespace, log_dir: Path, say: Callable[[str], None]
) -> Iterator[tuple[str, str]]:
    """Yield Kafka and PostgreSQL: given, named by the environment, kept, or throwaway ones."""
    from twophase_dev import ENV_KAFKA_BOOTSTRAP, ENV_PG_DSN, DevState

    bootstrap = args.bootstrap_servers or os.environ.get(ENV_KAFKA_BOOTSTRAP)
    dsn = args.dsn or os.environ.get(ENV_PG_DSN)
    if bootstrap:
        say(f"Kafka: reusing {bootstrap}")
    if dsn:
        say(f"PostgreSQL: reusing {dsn}")
    started = time.monotonic()
    if args.keep_servers and not (bootstrap and dsn):
        # Started as 'twophase-dev up' does (or found running from an earlier --keep-servers)
        # and recorded, so that 'twophase-dev env' and 'twophase-dev down' find them.
        state = DevState()
        wanted = [s for s, have in (("postgres", dsn), ("kafka", bootstrap)) if not have]
        for line in state.up(wanted).lines:
            say(line)
        env = state.env()
        yield bootstrap or env[ENV_KAFKA_BOOTSTRAP], dsn or env[ENV_PG_DSN]
        return
    with _spark.servers(bootstrap, dsn, log_dir) as found:
        if not (bootstrap and dsn):
            say(
                f"started Kafka {found[0]} and PostgreSQL {found[1]} on free ports in "
                f"{time.monotonic() - started:.0f} s (stopped at the end)"
            )
        yield found


# ------------------------------------------------------------------------------------ the demo


@dataclass
class Demo:
    """One run of the demo: its settings, targets, and what happened."""

    args: argparse.Namespace
    console: Console
    work: Path
    bootstrap: str = ""
    dsn: str = ""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    kills: list[float] = field(default_factory=list)
    worker_kills: int = 0
    runs: int = 0
    naive_at_risk: int = 0  # naive rows committed for a batch Spark had not recorded, at a kill
    baseline_gids: set[str] = field(default_factory=set)

    @property
    def topic(self) -> str:
        """Return the input topic."""
        return f"demo-orders-{self.run_id}"

    @property
    def out_topic(self) -> str:
        """Return the Kafka sink's topic."""
        return f"demo-orders-enriched-{self.run_id}"

    @property
    def schema(self) -> str:
        """Return the PostgreSQL schema of this run's tables."""
        return f"demo_{self.run_id}"

    def prepare(self, events: list[dict[str, Any]]) -> None:
        """Create the topics and tables, write the input."""
        pipeline.check_prepared_transactions(self.dsn)
        pipeline.create_topics(self.bootstrap, {self.topic: 3, self.out_topic: 3})
        pipeline.create_tables(self.dsn, self.schema)
        pipeline.produce_events(self.bootstrap, self.topic, events)
        self.baseline_gids = {t.gid for t in list_prepared_transactions(self.dsn)}
        self.console.event(
            f"wrote {len(events)} order events to topic {self.topic}; the sinks write to "
            f"{self.schema}.customer_totals, topic {self.out_topic} and "
            f"{self.schema}.order_events_naive"
        )

    def command(self, kill_file: Path) -> list[str]:
        """Return the driver's command line."""
        a = self.args
        return [
            sys.executable,
            str(HERE / "orders_pipeline.py"),
            *("--bootstrap-servers", self.bootstrap, "--dsn", self.dsn),
            *("--topic", self.topic, "--out-topic", self.out_topic, "--schema", self.schema),
            *("--checkpoints", str(self.work / "checkpoints"), "--batch-size", str(a.batch_size)),
            *("--kill-worker-file", str(kill_file)),
        ]

    def naive_rows(self, batch_id: int) -> int:
        """Return the rows the naive sink already committed for ``batch_id``."""
        import psycopg2

        with contextlib.closing(psycopg2.connect(self.dsn)) as conn, conn.cursor() as cur:
            cur.execute(
                f'SELECT count(*) FROM "{self.schema}".order_events_naive WHERE batch_id = %s',
                (batch_id,),
            )
            return int(cur.fetchone()[0])

    def kill(self, driver: subprocess.Popen[bytes], progress: Progress, how: str) -> None:
        """SIGKILL the driver's processes, count the kill, and say what it left behind."""
        kill_driver(driver)
        self.kills.append(time.monotonic() - self.console.started)
        self.console.event(f"SIGKILL driver run {self.runs} {how}")
        self.describe_kill(progress, progress.in_flight())

    def naive_caught(self, progress: Progress) -> bool:
        """Whether the naive sink has committed rows of a batch Spark has not recorded yet."""
        batch = progress.in_flight().get("naive")
        return batch is not None and self.naive_rows(batch) > 0

    def describe_kill(self, progress: Progress, in_flight: dict[str, int]) -> None:
        """Say what the kill left behind, query by query."""
        parts = []
        for q in QUERIES:
            if q not in in_flight:
                continue
            batch = in_flight[q]
            progress.stats[q].interrupted += 1
            if q == "totals":
                new = [
                    t
                    for t in list_prepared_transactions(self.dsn)
                    if t.gid not in self.baseline_gids and t.identity.startswith("orders_totals")
                ]
                parts.append(
                    f"totals batch {batch} ({len(new)} prepared transaction(s) left in doubt: "
                    "recovery commits or rolls them back)"
                    if new
                    else f"totals batch {batch} (no transaction left prepared: PostgreSQL rolls "
                    "back what the dead connections had open)"
                )
            elif q == "enriched":
                parts.append(
                    f"enriched batch {batch} (its open Kafka transactions stay invisible to "
                    "read_committed readers until recovery fences them)"
                )
            else:
                rows = self.naive_rows(batch)
                self.naive_at_risk += rows
                parts.append(
                    f"naive batch {batch} ({rows} rows already committed: they will be inserted "
                    "again)"
                    if rows
                    else f"naive batch {batch} (nothing committed yet: no harm this time)"
                )
        self.console.event("  in flight: " + ("; ".join(parts) or "nothing"))

    def run_driver(self, progress: Progress, plan: KillPlan, kill_file: Path) -> bool:
        """Run the driver once; return True if it was killed on purpose (restart it)."""
        self.runs += 1
        log = self.work / f"driver-{self.runs}.log"
        with open(log, "wb") as out:
            # A session of its own: Ctrl-C in the terminal reaches the demo, which kills it.
            driver = subprocess.Popen(
                self.command(kill_file),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        how = "from its checkpoints" if self.runs > 1 else "(Spark needs 10-30 s to start)"
        self.console.event(f"driver run {self.runs} started {how}, pid {driver.pid}, log {log}")
        progress.new_batches_this_run = 0
        kill_at: float | None = None
        armed_since: float | None = None
        try:
            while driver.poll() is None:
                for note in progress.read(log):
                    self.console.event(note)
                if self.worker_kills == 0 and (claim := worker_claim(kill_file)):
                    self.worker_kills = 1
                    self.console.event(
                        f"Python worker {claim.get('pid')} SIGKILLed itself in the middle of a "
                        f"task of query {claim.get('query')}: Spark retries the task"
                    )
                done = progress.fraction()
                if plan.worker_at is not None and done >= plan.worker_at:
                    kill_file.touch()  # the next task of any query claims it, then dies
                    plan.worker_at = None
                next_kill = len(self.kills)
                hunting = next_kill < len(plan.driver_at) and self.naive_at_risk == 0
                if hunting and progress.new_batches_this_run > 0 and self.naive_caught(progress):
                    # Until a kill has caught the naive sink between its commit and Spark's, the
                    # next kill also watches for that window, so that every run shows what the
                    # guarantee prevents: it lands at once when the naive sink has committed part
                    # of a batch that Spark has not recorded yet.
                    self.kill(
                        driver,
                        progress,
                        f"at {100 * done:.0f}% of the input, right after the naive sink "
                        "committed rows of a batch Spark had not recorded",
                    )
                    return True
                if (
                    next_kill < len(plan.driver_at)
                    and done >= plan.driver_at[next_kill]
                    and progress.new_batches_this_run > 0  # the restart made progress
                ):
                    # Wait until every query with input left is writing a batch (10 s at most),
                    # then kill at a random point up to a second later if they still are.
                    armed_since = armed_since or time.monotonic()
                    writing = progress.in_flight()
                    everyone = bool(writing) and set(progress.unfinished()) <= writing.keys()
                    waited_enough = time.monotonic() - armed_since > 10
                    if kill_at is None and (everyone or waited_enough):
                        kill_at = time.monotonic() + plan.rng.uniform(0.0, 1.0)
                    elif kill_at is not None and time.monotonic() >= kill_at:
                        if not (everyone or waited_enough):
                            kill_at = None  # a query finished its batch meanwhile: wait again
                            continue
                        self.kill(
                            driver,
                            progress,
                            f"at {100 * done:.0f}% of the input: Python driver, JVM and Python "
                            "workers",
                        )
                        return True
                if time.monotonic() - self.console.started > self.args.timeout:
                    raise TimeoutError(f"the demo took more than {self.args.timeout:.0f} s")
                self.console.live(
                    f"driver run {self.runs}  {progress.line()}  crashes {len(self.kills)}"
                )
                time.sleep(0.02 if hunting else 0.2)
        finally:
            if driver.poll() is None:
                kill_driver(driver)
        for note in progress.read(log):
            self.console.event(note)
        if driver.returncode != 0:
            if _interrupted:
                raise Interrupted
            self.console.clear()
            tail = log.read_text(errors="replace").splitlines()[-30:]
            print("\n".join(tail), file=sys.stderr)
            raise RuntimeError(f"driver run {self.runs} failed (exit {driver.returncode}): {log}")
        return False


def summary(
    demo: Demo,
    results: dict[str, pipeline.SinkResult],
    progress: Progress,
    events: int,
    aborted_records: int,
) -> str:
    """Return the final tables."""
    rows = [
        f"{'sink':<42} {'in':>6} {'out':>6} {'dup':>5} {'lost':>5} {'batches':>8}  result",
        f"{'-' * 42} {'-' * 6} {'-' * 6} {'-' * 5} {'-' * 5} {'-' * 8}  {'-' * 14}",
    ]
    for name, r in results.items():
        if r.exact:
            verdict = "exactly once"
        elif name == "naive":
            verdict = f"{r.duplicates} DUPLICATES" + (f", {r.lost} LOST" if r.lost else "")
        else:
            verdict = "NOT EXACTLY ONCE"
        rows.append(
            f"{LABELS[name]:<42} {events:>6} {r.records_out:>6} {r.duplicates:>5} {r.lost:>5} "
            f"{len(progress.stats[name].batches):>8}  {verdict}"
        )
    t, k, n = (progress.stats[q] for q in QUERIES)
    lines = [
        "",
        f"{'what the kills did, and recovery (twophase metrics lines)':<58} {'totals':>8} "
        f"{'enriched':>9} {'naive':>6}",
    ]
    table: list[tuple[str, object, object, object]] = [
        (
            "batches caught mid-write by a kill, then rerun",
            t.interrupted,
            k.interrupted,
            n.interrupted,
        ),
        ("decided transactions committed by recovery", t.decisions_finished, "-", "-"),
        (
            "in-doubt transactions rolled back / Kafka slots fenced",
            t.orphans_aborted,
            k.orphans_aborted,
            "-",
        ),
        ("partitions skipped on replay (marker found)", "-", k.partitions_skipped, "-"),
        ("replayed batches found already committed", t.already_committed, k.already_committed, "-"),
    ]
    for label, a, b, c in table:
        lines.append(f"  {label:<56} {a:>8} {b:>9} {c:>6}")
    kill_times = ", ".join(f"{s:.0f} s" for s in demo.kills)
    notes = [
        "",
        f"totals: {results['totals'].detail}; out = the events counted in them.",
        f"enriched: {aborted_records} more record(s) of aborted attempts sit in the topic; "
        "read_committed consumers never see them."
        if aborted_records
        else "enriched: no record of an aborted attempt in the topic.",
        f"driver SIGKILLs: {len(demo.kills)} (at {kill_times or '-'}),"
        f" Python worker SIGKILLs: {demo.worker_kills}, driver runs: {demo.runs}, "
        f"seed {demo.args.seed}, wall time {time.monotonic() - demo.console.started:.0f} s",
    ]
    return "\n".join(rows + lines + notes)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bash scripts/demo.sh",
        description="Crash demo: order events from Kafka through Spark into PostgreSQL and Kafka "
        "with twophase's exactly-once sinks, beside a naive foreachBatch, while the Spark driver "
        "is SIGKILLed and restarted; then every sink is checked (see examples/demo/crash_demo.py).",
        epilog="Servers: throwaway ones on free ports unless --bootstrap-servers/--dsn or "
        "TWOPHASE_KAFKA_BOOTSTRAP/TWOPHASE_PG_DSN name running ones "
        '(eval "$(.venv/bin/twophase-dev env)"). Exit status 0 when both twophase sinks hold '
        "every event exactly once.",
    )
    add = parser.add_argument
    add("--events", type=int, default=3000, help="order events to stream (default 3000)")
    add("--kills", type=int, default=3, help="driver SIGKILLs, at random points (default 3)")
    add("--seed", type=int, default=7, help="seed of the events and the kill points (default 7)")
    add(
        "--keep-servers",
        action="store_true",
        help="leave Kafka and PostgreSQL running afterwards (as 'twophase-dev up'; "
        "'twophase-dev down' stops them), and keep the work directory",
    )
    add("--no-worker-kill", dest="worker_kill", action="store_false", help="no Python worker kill")
    add("--customers", type=int, default=40, help="distinct customers (default 40)")
    add("--batch-size", type=int, default=400, help="events per micro-batch (default 400)")
    add("--bootstrap-servers", metavar="HOST:PORT", help="use this Kafka broker")
    add("--dsn", help="use this PostgreSQL server (a superuser's DSN)")
    add(
        "--work-dir",
        type=Path,
        help="checkpoints and logs (default: a temporary directory, removed after a success)",
    )
    add("--timeout", type=float, default=600, help="give up after this many seconds (default 600)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if min(args.events, args.customers, args.batch_size) < 1 or args.kills < 0:
        parser.error("--events, --customers and --batch-size must be positive, --kills >= 0")
    console = Console(time.monotonic())
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="twophase-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    demo = Demo(args, console, work)
    events = pipeline.generate_events(args.events, args.customers, args.seed)
    console.event(
        f"twophase crash demo: {args.events} order events, {args.kills} driver kill(s), "
        f"{'one' if args.worker_kill else 'no'} Python worker kill, seed {args.seed}"
    )
    ok = False
    signal.signal(signal.SIGINT, _on_sigint)
    try:
        with servers(args, work / "logs", console.event) as (demo.bootstrap, demo.dsn):
            demo.prepare(events)
            progress = Progress(work / "checkpoints", math.ceil(args.events / args.batch_size))
            plan = KillPlan.make(args.kills, args.worker_kill, args.seed)
            while demo.run_driver(progress, plan, work / "kill-python-worker"):
                pass
            console.clear()
            console.event("driver finished: every query consumed the input; checking the sinks")
            if len(demo.kills) < args.kills:
                console.event(
                    f"note: only {len(demo.kills)} of {args.kills} kills happened before the "
                    "input was consumed (pass more --events)"
                )
            results = {
                "totals": pipeline.check_totals(demo.dsn, demo.schema, events),
                "enriched": pipeline.check_enriched(demo.bootstrap, demo.out_topic, events),
                "naive": pipeline.check_naive(demo.dsn, demo.schema, events),
            }
            everything = pipeline.read_topic(demo.bootstrap, demo.out_topic, "read_uncommitted")
            aborted = sum(everything.values()) - results["enriched"].records_out
        print()
        print(summary(demo, results, progress, len(events), aborted))
        bad = [LABELS[n] for n in ("totals", "enriched") if not results[n].exact]
        if bad:
            print(f"\nFAILED: not exactly once: {'; '.join(bad)}")
            return 1
        dup = results["naive"].duplicates
        print(
            "\nOK: both twophase sinks hold every event exactly once; "
            + (
                f"the naive foreachBatch inserted {dup} duplicate rows."
                if dup
                else "the naive foreachBatch was lucky: no kill caught it after a commit "
                "(its input ran out first; pass more --events)."
            )
        )
        if args.keep_servers:
            print(
                "\nThe servers keep running: 'eval \"$(.venv/bin/twophase-dev env)\"' makes the"
                " next demo (and the tests) reuse them; '.venv/bin/twophase-dev down' stops them."
            )
        ok = True
        return 0
    except (
        KeyboardInterrupt,
        ConfigurationError,
        DevInfraError,
        RuntimeError,
        TimeoutError,
    ) as exc:
        if _interrupted or isinstance(exc, KeyboardInterrupt):
            console.clear()
            console.event("interrupted (Ctrl-C): the driver and the demo's servers are stopped")
            return 130
        if isinstance(exc, ConfigurationError):
            console.event(f"setup problem: {exc}")
            return 2
        if isinstance(exc, DevInfraError):
            console.event(f"could not start the local servers: {exc}")
            return 2
        console.event(f"FAILED: {exc}")
        return 1
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up
        if ok and not args.work_dir and not args.keep_servers:
            shutil.rmtree(work, ignore_errors=True)
        else:
            console.event(f"checkpoints and driver logs: {work}")


if __name__ == "__main__":
    sys.exit(main())

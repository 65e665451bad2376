"""Real-time trials of the chaos harness: a query in Spark's real-time mode, fed while it runs.

The ``-rt`` sinks (named only by ``--sinks``) run the trial's query with
``twophase.write_stream(..., trigger={"realTime": "<5-20> seconds"}, commit_interval=0.1)``
(``docs/realtime.md``): ``pg-markers-rt`` (PostgreSQL, the markers protocol), ``maria-markers-rt``
(MariaDB, the markers protocol) and ``kafka-rt`` (:class:`~twophase.connectors.kafka.KafkaSink`).
Their input is a Kafka topic of 2-3 partitions that the harness produces *while the query runs*
(:class:`Producer`): 2-4 bursts of 100-400 rows at 150-400 rows/s with pauses of 1-8 s between
them, starting a second after the first run's query started; the pipeline is the deterministic
passthrough (casts and a projection, which real-time mode takes). The driver runs on
``local[n,4]``, one core per topic partition (every task of an epoch runs at once) and four
attempts per task, so that Spark retries a task inside its epoch.

Faults are placed on the clock of the production, not at protocol steps: an epoch is one long
task per partition, committing every ``commit_interval``, and its driver takes no coordinator
step per batch. Each of a trial's 1-3 faults (:func:`fault_kinds`: the driver's process groups
SIGKILLed, the Python workers SIGKILLed (``kill_workers``), the target's database restarted, the
Kafka broker restarted -- the source's, and for ``kafka-rt`` the target's too -- or
``query.stop()`` from a thread of the driver) fires either ``t`` seconds after the production
began, or (:data:`HOOK_CHANCE`) *at* the first participant hook of one partition that a task
reaches after ``t`` seconds (``begin_transaction``, the first ``write``, ``commit_with_marker``
or its completion): the task waits there, in the middle of a commit, while the fault acts. Such a
pause point is *armed* (:func:`tests.chaos.events.probe`): the executors pass it until the harness
creates ``control/arm-<id>`` at ``t``.

A real-time query never ends by itself. Once the production is over and every fault has acted
(or :data:`SETTLE_SECONDS` past the epoch have gone by without the rest), the harness waits for
every produced row to be visible in the target -- a partition's last row before a pause waits in
Spark's JVM for the partition's next row or the epoch's end, so this takes up to an epoch --
stops the query cleanly (``query.stop()``), starts it once more from its checkpoint (the epoch
the stop cut short is replayed: its committed prefix must be skipped), lets it run past one epoch
and stops it cleanly again. Only then is the target checked, by the harness's usual check.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from tests.chaos.events import emit

__all__ = [
    "BASE",
    "BURSTS",
    "BURST_PAUSE",
    "BURST_ROWS",
    "COMMIT_INTERVAL",
    "EPOCH_SECONDS",
    "FINAL_RUN_MARGIN",
    "FINAL_RUN_WAIT",
    "HOOKS",
    "HOOK_CHANCE",
    "RATES",
    "RT_SINKS",
    "SETTLE_SECONDS",
    "TASK_ATTEMPTS",
    "TOPIC_PARTITIONS",
    "WORKER_WAIT",
    "Producer",
    "fault_kinds",
    "kill_python_workers",
    "python_workers",
    "servers_needed",
]

#: The real-time sinks and the micro-batch sink each is built as (same connector, same server).
BASE = {"pg-markers-rt": "pg-markers", "maria-markers-rt": "maria-markers", "kafka-rt": "kafka"}
RT_SINKS = tuple(BASE)
#: The epoch's length is drawn from this range, in whole seconds (Spark's floor is 5 s).
EPOCH_SECONDS = (5, 20)
#: Seconds between a partition's commits (``write_stream(commit_interval=...)``).
COMMIT_INTERVAL = 0.1
#: ``spark.task.maxFailures`` of the driver (``local[n,4]``): a task killed is retried in its epoch.
TASK_ATTEMPTS = 4
#: Partitions of the input topic (and of the Kafka target), one task each per epoch.
TOPIC_PARTITIONS = (2, 3)
#: Bursts of the production (the first warms the query up, the last comes after the faults),
#: rows per burst, rows per second, seconds of pause before each burst between them.
BURSTS = (3, 5)
BURST_ROWS = (200, 800)
RATES = (150, 400)
BURST_PAUSE = (1.0, 6.0)
#: The participant hooks a fault may wait at (the probes of :mod:`tests.chaos.sinks`).
HOOKS = ("begin_transaction", "write", "commit_with_marker", "commit_with_marker_done")
#: The chance that a fault fires at a hook of one partition rather than at its time.
HOOK_CHANCE = 0.4
#: Seconds (beyond the epoch's length) after the production ended that faults not reached yet are
#: given up, and the trial ends.
SETTLE_SECONDS = 10.0
#: Seconds the final run goes on past one epoch after its query started, before its clean stop.
FINAL_RUN_MARGIN = 3.0
#: Seconds the final run waits at most for the rows the stop before it left uncommitted.
FINAL_RUN_WAIT = 90.0
#: Seconds a ``kill_workers`` fault looks for Python workers while the driver runs.
WORKER_WAIT = 15.0
#: How a PySpark worker process names its module (``python -m pyspark.daemon``, ...).
_WORKER_MODULES = (b"pyspark.daemon", b"pyspark.worker")


def servers_needed(sinks: Iterable[str]) -> list[str]:
    """Return ``sinks``, each real-time sink replaced by its base sink, and Kafka (its input)."""
    needed = [BASE.get(s, s) for s in sinks]
    if any(s in BASE for s in sinks):
        needed.append("kafka")
    return list(dict.fromkeys(needed))


def fault_kinds(sink: str, database: str | None) -> list[str]:
    """The fault kinds a real-time trial of ``sink`` draws among (``database``: pg or maria)."""
    kinds = ["kill_driver", "kill_workers", "query_stop", "kafka_restart"]
    if database == "pg":
        kinds += ["pg_restart_fast", "pg_restart_immediate"]
    elif database == "maria":
        kinds += ["maria_restart_fast", "maria_restart_kill"]
    return kinds


class Producer(threading.Thread):
    """Produces a trial's input while its query runs: bursts of rows at a rate, with pauses.

    Burst 0 warms the query up: the producer then waits until :attr:`ready` is set (the harness
    sets it when a task first commits, its Python worker up) and notes the time in
    :attr:`clock_at`, the start of the faults' clock. Bursts 1 to n-2 follow, each after its
    pause; the last burst waits until :attr:`final` is set (the faults are over). Row ``n`` of
    the input (in order over the bursts) goes to partition ``n % partitions``, with its id as
    key and value. The producer is idempotent (a broker restarted during a burst makes it send
    again without duplicating a row) and waits up to five minutes for each delivery.

    Parameters
    ----------
    bootstrap
        The broker's bootstrap servers.
    topic
        The input topic.
    bursts
        The ids of each burst (at least two).
    partitions
        The topic's partitions.
    rate
        Rows per second within a burst.
    pauses
        Seconds before bursts 1 to n-2 (one fewer than the bursts between the first and last).
    events
        The trial's event log (``burst_started``, ``burst_done``, ``production_done``).
    """

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        bursts: Sequence[Sequence[int]],
        partitions: int,
        rate: float,
        pauses: Sequence[float],
        events: Path,
    ) -> None:
        super().__init__(name="chaos-rt-producer", daemon=True)
        self.bootstrap, self.topic, self.bursts = bootstrap, topic, bursts
        self.partitions, self.rate, self.pauses, self.events = partitions, rate, pauses, events
        self.ready = threading.Event()
        self.final = threading.Event()
        #: Wall-clock time the faults' clock started (None: not yet).
        self.clock_at: float | None = None
        #: Monotonic time the bursts before the last were produced, and the last (None: not yet).
        self.middle_done_at: float | None = None
        self.done_at: float | None = None
        #: Wall-clock time the last row was handed to the producer.
        self.last_row_at: float | None = None
        self.errors: list[str] = []
        self._n = 0

    def run(self) -> None:
        """Produce every burst, then flush; failures go to :attr:`errors`."""
        from confluent_kafka import Producer as KafkaProducer

        try:
            producer = KafkaProducer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 300_000,
                    "log_level": 0,  # a broker restarted is a fault of the trial: no noise
                }
            )
            last = len(self.bursts) - 1
            self._burst(producer, 0)
            if not self.ready.wait(300):
                self.errors.append("no task committed within 300 s of the first burst")
            self.clock_at = time.time()
            emit(self.events, src="harness", name="clock_started")
            for b in range(1, last):
                time.sleep(self.pauses[b - 1])
                self._burst(producer, b)
            self.middle_done_at = time.monotonic()
            self.final.wait()
            self._burst(producer, last)
            left = producer.flush(300)
            if left:
                self.errors.append(f"{left} rows not delivered after 300 s")
        except Exception as exc:
            self.errors.append(repr(exc))
        finally:
            emit(self.events, src="harness", name="production_done", errors=self.errors[:5])
            if self.middle_done_at is None:
                self.middle_done_at = time.monotonic()
            self.done_at = time.monotonic()

    def _burst(self, producer: Any, b: int) -> None:
        """Produce burst ``b`` at the rate."""
        ids = self.bursts[b]

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                self.errors.append(str(err))

        emit(self.events, src="harness", name="burst_started", burst=b, rows=len(ids))
        began = time.monotonic()
        for k, i in enumerate(ids):
            producer.produce(
                self.topic,
                key=str(i),
                value=str(i),
                partition=self._n % self.partitions,
                on_delivery=delivered,
            )
            self._n += 1
            producer.poll(0)
            wait = began + (k + 1) / self.rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        self.last_row_at = time.time()
        emit(self.events, src="harness", name="burst_done", burst=b)


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid (from ``/proc``)."""
    found: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            found.setdefault(int(stat.rsplit(")", 1)[1].split()[1]), []).append(int(entry))
    return found


def _is_worker(pid: int) -> bool:
    with contextlib.suppress(OSError):
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        return b"python" in command.split(b"\0", 1)[0] and any(
            module in command for module in _WORKER_MODULES
        )
    return False


def python_workers(driver_pid: int) -> list[int]:
    """The PySpark worker processes of a driver process's JVM (forked by its worker daemon).

    The daemon runs in a process group of its own, so they are found by parent: the driver's
    children (the JVM), their daemon children, the daemon's worker children.
    """
    children = _children()
    jvms = children.get(driver_pid, [])
    daemons = [d for jvm in jvms for d in children.get(jvm, []) if _is_worker(d)]
    return [w for d in daemons for w in children.get(d, []) if _is_worker(w)]


def kill_python_workers(
    driver_pid: int, alive: Callable[[], bool], wait: float = WORKER_WAIT
) -> tuple[bool, str]:
    """SIGKILL the Python workers of a driver's JVM; return whether any died, and what was done.

    Workers exist while tasks run Python (a restarted query forks them when its first rows
    come): without any, it looks again for up to ``wait`` seconds while ``alive()``.
    """
    deadline = time.monotonic() + wait
    workers = python_workers(driver_pid)
    while not workers and alive() and time.monotonic() < deadline:
        time.sleep(0.2)
        workers = python_workers(driver_pid)
    if not workers:
        return False, "no Python worker found"
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    left = list(workers)
    while left and time.monotonic() < deadline:
        left = [pid for pid in left if not _gone(pid)]
        time.sleep(0.05)
    dead = len(workers) - len(left)
    return dead > 0, f"{dead} of {len(workers)} Python workers killed ({workers})"


def _gone(pid: int) -> bool:
    """Whether ``pid`` is gone or a zombie its parent has not reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"

"""A seeded, randomised chaos harness for the real sinks under a real Spark driver.

``scripts/chaos.sh --trials N --seed S [--sinks kafka,pg-coordinated,pg-markers]`` (or
``python -m tests.chaos``) runs N trials. Trial ``i`` draws everything from
``random.Random(f"{S}:{i}")``:

* a sink: Kafka (the markers protocol), PostgreSQL with prepared transactions (the coordinated
  protocol) or without (the markers protocol), or -- only when ``--sinks`` names them --
  MariaDB with XA transactions (``maria-coordinated``) or a marker table (``maria-markers``);
* a pipeline: a deterministic passthrough, ``repartition(n, key)``, ``repartition(n)`` (round robin,
  not deterministic across runs) or an aggregation by key (update mode, deterministic output);
  sinks of the markers protocol get ``staging=True`` only for the round-robin pipeline, and only
  when drawn;
* the input: a few micro-batches from Parquet files (one file per batch), or a Kafka topic for the
  Kafka sink;
* 1-3 faults, each bound to a point of the run (a coordinator step on the driver, a hook of one
  task, or the start of the query) and fired there at once (the process waits at the point until the
  fault is done) or after a random delay: the driver's process groups SIGKILLed, PostgreSQL
  restarted (fast or immediate shutdown), MariaDB restarted (SIGTERM) or crashed (SIGKILL), the
  Kafka broker restarted, the broker frozen (SIGSTOP) past the producer's request timeout,
  ``query.stop()`` from a thread of the driver, or a task failure
  (``twophase.testing.with_faults``); for ``pg-coordinated`` and ``maria-coordinated``, a zombie:
  an attempt of a task that Spark gave up on, which opens its transaction when the task reaches the
  point and tries to prepare only after the trial's last driver has exited
  (:mod:`tests.chaos.zombie`);
* for the replicated (``-ha``) sinks, named only by ``--sinks`` (:mod:`tests.chaos.ha`): exactly
  one ``failover`` of PostgreSQL or MariaDB to a synchronous standby, or one ``broker_restart``
  of a 3-broker Kafka cluster (one broker, or a rolling restart), beside 0-2 of the faults above;
* where the harness can run its servers in network namespaces of their own (root), 0-2 network
  partitions of the sink's server, short (1-2 s, below the sinks' bounds: a pause) or long (8-15 s,
  past them: a step may fail, restartably), drawn from a stream of their own so that the rest of
  the trial is the one drawn without them; a trial with a partition runs its sink with short
  network bounds (:data:`SHORT_BOUNDS`).
* in one trial in three (``--bad-rows``), from a stream of its own too, 1-5 poison rows per batch:
  the pipeline gives their keys a value the target refuses, and the sink sets them aside with
  ``bad_rows="dead_letter"`` (:func:`draw_bad_rows`).

The real-time sinks, named only by ``--sinks`` (``pg-markers-rt``, ``maria-markers-rt``,
``kafka-rt``; :mod:`tests.chaos.realtime`), draw a trial of their own: the passthrough pipeline
in Spark's real-time mode (``trigger={"realTime": "<5-20> seconds"}``, ``local[n,4]``) over a
Kafka topic of 2-3 partitions that the harness produces while the query runs (3-5 bursts with
pauses, the last after the faults), and 1-3 faults on the production's clock, at a time or at a
task's hook reached after a time: the driver's process groups SIGKILLed, its Python workers
SIGKILLed (``kill_workers``: Spark retries the tasks in the epoch), the database restarted, the
Kafka broker restarted, ``query.stop()``. Once every row but the last of each partition is
visible, the query is stopped cleanly, started once more and stopped cleanly again; no partition
and no bad rows are drawn.

The driver (:mod:`tests.chaos.driver`) runs in a process group of its own and is started again
after every exit until its query has processed the input (a real-time trial: until its final
clean stop), or until the trial's time runs out. Then
the target is checked by content -- every output key once, with its value -- and for leftovers: no
prepared transaction of the trial in ``pg_prepared_xacts`` (``XA RECOVER`` on MariaDB); last
stable offset equal to the high watermark on every partition of the Kafka output and control
topics (and dead-letter topic); with bad rows, every poison key once in the dead letters, with its
error class, and nothing else there.

Each trial prints one line; the run ends with a summary table, and exits non-zero on any duplicate,
loss, wrong value or leftover, a ``NondeterministicBatchError`` where it is not allowed (a
deterministic pipeline, or staging on), or a trial that never finished. See ``docs/chaos.md``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.chaos import ha, realtime
from tests.chaos.driver import NETWORK_BOUND_NEEDLES
from tests.chaos.events import emit, go, matches, read_events
from tests.chaos.poison import (
    BAD_ROW_CLASSES,
    BAD_ROWS_TOPIC_BYTES,
    FIXED_KEYS,
    JDBC_KINDS,
    KAFKA_KINDS,
    jdbc_table,
)
from tests.integration.kafka.kafka_support import unstable_partitions
from twophase._engine._steps import Step
from twophase.testing import COORDINATED_STEPS, MARKER_STEPS, FakeTarget

__all__ = [
    "DEFAULT_SINKS",
    "FAILING_FINDINGS",
    "FAULT_KINDS",
    "PIPELINES",
    "SINKS",
    "STATEFUL",
    "TEST_PIPELINES",
    "Fault",
    "Infra",
    "TrialPlan",
    "TrialResult",
    "draw_bad_rows",
    "draw_plan",
    "main",
    "run_trial",
    "run_trials",
]

ROOT = Path(__file__).resolve().parents[2]

SINKS = (
    "kafka",
    "pg-coordinated",
    "pg-markers",
    "maria-coordinated",
    "maria-markers",
    *ha.HA_SINKS,
    *realtime.RT_SINKS,
)
#: The sinks drawn when ``--sinks`` is not given. The MariaDB sinks are left out, so that a seed
#: draws the same trials as before they existed (a sink is drawn among the sinks given);
#: ``--sinks maria-coordinated,maria-markers`` (or a list naming them) draws them. So are the
#: replicated (``-ha``) sinks of :mod:`tests.chaos.ha` and the real-time (``-rt``) sinks of
#: :mod:`tests.chaos.realtime`, which come after them in :data:`SINKS`.
DEFAULT_SINKS = ("kafka", "pg-coordinated", "pg-markers")
#: The sinks whose target is Kafka.
KAFKA_SINKS = frozenset({"kafka", "kafka-ha", "kafka-rt"})
#: The protocol of each sink: ``coordinated`` (prepared on executors, committed by the driver) or
#: ``markers`` (each partition commits with a marker).
PROTOCOL = {
    "kafka": "markers",
    "pg-coordinated": "coordinated",
    "pg-markers": "markers",
    "maria-coordinated": "coordinated",
    "maria-markers": "markers",
    "pg-coordinated-ha": "coordinated",
    "pg-markers-ha": "markers",
    "maria-coordinated-ha": "coordinated",
    "maria-markers-ha": "markers",
    "kafka-ha": "markers",
    "pg-markers-rt": "markers",
    "maria-markers-rt": "markers",
    "kafka-rt": "markers",
}
#: The database server of each JDBC sink: ``pg`` or ``maria`` (Kafka has none).
DATABASE = {
    "pg-coordinated": "pg",
    "pg-markers": "pg",
    "maria-coordinated": "maria",
    "maria-markers": "maria",
    "pg-coordinated-ha": "pg",
    "pg-markers-ha": "pg",
    "maria-coordinated-ha": "maria",
    "maria-markers-ha": "maria",
    "pg-markers-rt": "pg",
    "maria-markers-rt": "maria",
}
#: Former names of the PostgreSQL sinks, still taken by ``--sinks``.
FORMER_SINK_NAMES = {"pg-A": "pg-coordinated", "pg-B": "pg-markers"}
PIPELINES = ("passthrough", "repartition_key", "repartition_rr", "aggregate")
#: Pipelines a test may name but a seed never draws (drawing them would change what every
#: recorded seed draws): ``deduplicate`` is ``dropDuplicates(["id"])``, a stateful passthrough.
TEST_PIPELINES = ("deduplicate",)
#: Pipelines whose batches hold Spark state (a state store per shuffle partition).
STATEFUL = frozenset({"aggregate", "deduplicate"})
#: Pipelines whose partitions may differ from one run to the next.
NONDETERMINISTIC = frozenset({"repartition_rr"})
FAULT_KINDS = (
    "kill_driver",
    "pg_restart_fast",
    "pg_restart_immediate",
    "maria_restart_fast",
    "maria_restart_kill",
    "kafka_restart",
    "kafka_freeze",
    "query_stop",
    "task_failure",
    "zombie",
    "partition_short",
    "partition_long",
    "failover",
    "broker_restart",
    "kill_workers",
)

#: Restart faults of each database server, by kind: the mode of ``server.restart(mode=...)``.
RESTART_MODES = {
    "pg_restart_fast": "fast",  # PostgreSQL's fast shutdown
    "pg_restart_immediate": "immediate",  # PostgreSQL's immediate shutdown (a crash)
    "maria_restart_fast": "fast",  # MariaDB's normal shutdown (SIGTERM)
    "maria_restart_kill": "kill",  # MariaDB crashed (SIGKILL)
}
#: Sinks that may draw a ``zombie`` fault (the JDBC coordinated protocol, :mod:`.zombie`).
ZOMBIE_SINKS = frozenset(
    {"pg-coordinated", "maria-coordinated", "pg-coordinated-ha", "maria-coordinated-ha"}
)

_PROTOCOL_STEPS = {
    "coordinated": tuple(s for s in COORDINATED_STEPS if s != Step.START),
    "markers": tuple(s for s in MARKER_STEPS if s != Step.START),
}
_PROTOCOL_POINTS = {
    "coordinated": ("begin_transaction", "write", "pre_commit", "pre_commit_done"),
    "markers": ("begin_transaction", "write", "commit_with_marker", "commit_with_marker_done"),
}
#: Coordinator steps a fault may be bound to ("start" is before anything of the batch).
DRIVER_STEPS = {sink: _PROTOCOL_STEPS[PROTOCOL[sink]] for sink in SINKS}
#: Task probes of :mod:`tests.chaos.sinks` a fault may be bound to.
TASK_POINTS = {sink: _PROTOCOL_POINTS[PROTOCOL[sink]] for sink in SINKS}
#: Hooks a task failure may be injected into (``with_faults`` rules): the points but the last.
FAILABLE_HOOKS = {sink: TASK_POINTS[sink][:3] for sink in SINKS}
#: librdkafka's ``request.timeout.ms`` for the chaos sinks: a freeze outlasts it.
KAFKA_REQUEST_TIMEOUT_MS = 5000

#: Network partitions of the sink's server (a "wire" cut of its network namespace), by kind: the
#: range their length is drawn from, in seconds. ``partition_short`` stays below the sinks' short
#: bounds (:data:`SHORT_BOUNDS`): TCP sends a segment lost at the cut again 0.2, 0.6, 1.4 and 3.0 s
#: later (a SYN 1 and 3 s later), so after a cut of at most 2 s the next try gets through before
#: ``TCP_USER_TIMEOUT`` and ``connect_timeout`` (4 s) or ``request.timeout.ms`` (5 s): a pause.
#: ``partition_long`` lasts well past them: a step may fail with a restartable error.
PARTITION_SECONDS = {"partition_short": (1.0, 2.0), "partition_long": (8.0, 15.0)}
#: The kinds of :data:`PARTITION_SECONDS`, in their draw order.
PARTITION_KINDS = tuple(PARTITION_SECONDS)
#: How many partitions a trial draws (when they can be drawn), and how often: half the trials
#: none, and 0.6 on average. They come from a random stream of their own (see :func:`draw_plan`).
PARTITION_COUNTS = ((0, 1, 2), (5, 4, 1))
#: The network bounds of the sinks of a trial that draws a partition (the other trials keep the
#: bounds they always had): JDBC ``network_timeout`` and ``connect_timeout``; Kafka
#: ``operation_timeout`` per call and ``local_retries`` calls, 5 s per step like
#: ``request.timeout.ms``.
SHORT_BOUNDS = {
    "network_timeout": 4.0,
    "connect_timeout": 4,
    "operation_timeout": 2.5,
    "local_retries": 2,
}
#: A query failure up to this many seconds after a server fault (a partition, a restart, a
#: freeze) ended may be that fault's (a step fails within the bounds, its batch's retries and
#: clean-up come after); it is counted as the partition's when the partition is the server fault
#: that began last before it (:meth:`_Trial.attribute_failures`).
PARTITION_FAILURE_GRACE = 30.0
#: A partition does not fire while another partition of the server is in force or less than this
#: many seconds after it healed: the two would make one longer outage (TCP's next try after a
#: heal comes up to a few seconds late), and a "short" one would not be short.
PARTITION_GAP = 5.0
#: Fault kinds that act on the trial's server: their failures compete with a partition's.
SERVER_FAULTS = frozenset(
    {
        *RESTART_MODES,
        "kafka_restart",
        "kafka_freeze",
        *PARTITION_SECONDS,
        "failover",
        "broker_restart",
    }
)

#: Bad rows (:func:`draw_bad_rows`): how often a trial carries them, drawn from a stream of its
#: own so that the rest of the trial is the one drawn without them (and before they existed).
BAD_ROWS_CHANCE = 1 / 3
#: How many input rows of each batch are poison, at most (at least one).
BAD_ROWS_PER_BATCH = 5
#: ``--bad-rows``: the chance of bad rows in a trial.
BAD_ROWS_MODES = {"drawn": BAD_ROWS_CHANCE, "always": 1.0, "never": 0.0}
EXIT_DONE, EXIT_FAILED, EXIT_STOPPED, EXIT_NONDETERMINISTIC = 0, 1, 3, 4


# ------------------------------------------------------------------------------------- plans


@dataclass
class Fault:
    """One scheduled fault: what, where it is bound, and how it landed.

    ``kind`` is one of :data:`FAULT_KINDS`, or ``barrier`` (tests only): not a fault, it holds the
    process at its point until the point ``params["until"]`` is reached, to order two events.
    """

    kind: str
    #: Where it fires: ``src`` (``driver`` / ``task``), ``name`` (step, hook or ``query_started``),
    #: ``batch``, ``partition``, ``index`` -- unset fields match anything. A real-time trial's
    #: fault fires at a time (``clock:production``, ``delay`` seconds after the production began)
    #: or at a task's hook reached ``params["after"]`` seconds after it began (sync, armed).
    point: dict[str, Any]
    #: Fire at the point while the process that reached it waits; else after ``delay`` seconds.
    sync: bool = False
    delay: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    fired: bool = False
    detail: str = ""
    #: What proves a partition: the counters of the cut and the times it began and ended.
    evidence: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """Return ``kind@point(timing)`` with the outcome mark (+ fired, - did not)."""
        p = self.point
        where = f"{p.get('src')}:{p.get('name')}"
        if p.get("batch") is not None:
            where += f":b{p['batch']}"
        if p.get("partition") is not None:
            where += f"{':' if p.get('batch') is None else ''}p{p['partition']}"
        if p.get("index") is not None:
            where += f"#{p['index']}"
        extra = ""
        if self.kind == "task_failure":
            extra = f"[{self.params.get('error')}]"
        elif self.kind == "kafka_freeze" or self.kind in PARTITION_SECONDS:
            extra = f"[{self.params.get('seconds')}s]"
        elif self.kind == "query_stop" and self.params.get("restart") == "in-process":
            extra = "[in-process restart]"
        elif self.kind == "broker_restart":
            target = self.params.get("target")
            if target == "rolling":
                extra = f"[rolling {','.join(map(str, self.params.get('order', ())))}]"
            else:
                extra = f"[{target} {self.params.get('mode')}]"
        timing = (
            "" if self.kind == "task_failure" else ("(sync)" if self.sync else f"(+{self.delay}s)")
        )
        if "after" in self.params:  # a real-time trial's hook, armed after that many seconds
            timing = f"(after {self.params['after']}s, sync)"
        return f"{self.kind}{extra}@{where}{timing}{'+' if self.fired else '-'}"


@dataclass
class TrialPlan:
    """Everything a trial does, drawn from its seed (or written by a test)."""

    seed: str
    index: int
    sink: str
    pipeline: str
    partitions: int
    staging: bool
    source: str
    batches: int
    rows: int
    topic_partitions: int
    faults: list[Fault]
    #: Extra Spark settings of the driver (tests only; drawn trials use none).
    spark_conf: dict[str, str] = field(default_factory=dict)
    #: Poison output keys -> their kind (:data:`BAD_ROW_CLASSES`): the sink runs with
    #: ``bad_rows="dead_letter"`` and each must end in the dead letters once. Empty: none.
    bad_rows: dict[int, str] = field(default_factory=dict)
    #: A real-time trial (:mod:`tests.chaos.realtime`): the epoch's length in seconds (0: a
    #: micro-batch trial), the rate of the production (rows per second) and the pauses between
    #: its bursts (``batches`` bursts of ``rows`` rows), in seconds.
    epoch_seconds: int = 0
    rate: int = 0
    burst_pauses: list[float] = field(default_factory=list)

    @property
    def realtime(self) -> bool:
        """Whether the query runs in real-time mode (an ``-rt`` sink)."""
        return self.epoch_seconds > 0

    @property
    def production_seconds(self) -> float:
        """How long a real-time trial's production between its first and last bursts takes."""
        return (self.batches - 2) * self.rows / self.rate + sum(self.burst_pauses)

    @property
    def short_bounds(self) -> bool:
        """Whether the sink runs with :data:`SHORT_BOUNDS` (the trial has a partition)."""
        return any(f.kind in PARTITION_SECONDS for f in self.faults)

    @property
    def nondeterministic(self) -> bool:
        """Whether the pipeline may lay a replayed batch out differently."""
        return self.pipeline in NONDETERMINISTIC

    @property
    def write_partitions(self) -> int:
        """How many partitions (tasks) each batch has at the sink."""
        if self.pipeline == "passthrough":
            return self.topic_partitions if self.source == "kafka" else 1
        if self.pipeline in STATEFUL:
            return 2  # spark.sql.shuffle.partitions of spark_session()
        return self.partitions

    def describe(self) -> str:
        """Return the sink, pipeline and input in one short string."""
        pipe = self.pipeline
        if pipe.startswith("repartition"):
            pipe += f"({self.partitions})"
        staging = " staging" if self.staging else ""
        source = f"{self.source}:{self.batches}x{self.rows}"
        if self.realtime:
            source += f"@{self.rate}/s/p{self.topic_partitions} realTime={self.epoch_seconds}s"
        bad = f" bad_rows={len(self.bad_rows)}" if self.bad_rows else ""
        return f"sink={self.sink} pipeline={pipe}{staging} input={source}{bad}"


def _draw_point(
    rng: random.Random,
    plan_sink: str,
    batches: int,
    parts: int,
    steps: Sequence[str] | None = None,
) -> dict[str, Any]:
    where = rng.random()
    batch = rng.randrange(batches)
    if where < 0.45:
        step = rng.choice(steps or DRIVER_STEPS[plan_sink])
        return {
            "src": "driver",
            "name": step,
            "batch": batch,
            "index": 0 if step == Step.COMMITTED_HANDLE else None,
        }
    if where < 0.9:
        hook = rng.choice(TASK_POINTS[plan_sink])
        return {"src": "task", "name": hook, "batch": batch, "partition": rng.randrange(parts)}
    return {"src": "driver", "name": "query_started"}


def _draw_timing(rng: random.Random, point: dict[str, Any]) -> tuple[bool, float]:
    """Draw whether a fault fires at its point (sync) or after a delay, and the delay."""
    if point["name"] == "query_started":
        return False, round(rng.uniform(0.0, 6.0), 2)
    # A batch of this size takes a few tenths of a second: land within it.
    sync = rng.random() < 0.4
    return sync, 0.0 if sync else round(rng.uniform(0.0, 0.4), 2)


def _draw_partition(rng: random.Random, sink: str, batches: int, parts: int) -> Fault:
    """Draw a partition of the sink's server: its kind, length, point and timing."""
    kind = rng.choice(PARTITION_KINDS)
    low, high = PARTITION_SECONDS[kind]
    seconds = round(rng.uniform(low, high), 1)
    point = _draw_point(rng, sink, batches, parts)
    sync, delay = _draw_timing(rng, point)
    return Fault(kind, point, sync=sync, delay=delay, params={"seconds": seconds})


def _draw_ha_fault(rng: random.Random, plan: TrialPlan) -> Fault:
    """Draw the one fault of a replicated sink's target (:mod:`tests.chaos.ha`)."""
    sink, parts = plan.sink, plan.write_partitions
    kind = ha.HA_FAULT[sink]
    # Steps every run of the trial reaches (``staged`` only with staging).
    steps = [s for s in DRIVER_STEPS[sink] if s != Step.STAGED or plan.staging]
    if kind == "broker_restart":
        target = rng.choice(ha.BROKER_TARGETS)
        params: dict[str, Any] = {"target": target}
        if target == "coordinator":  # a task with a transaction: its coordinator is known
            point: dict[str, Any] = {
                "src": "task",
                "name": rng.choice(("write", "commit_with_marker")),
                "batch": rng.randrange(plan.batches),
                "partition": rng.randrange(parts),
            }
        else:
            point = _draw_point(rng, sink, plan.batches, parts, steps)
        if target == "rolling":
            params["order"] = rng.sample([1, 2, 3], 3)
        else:
            params["mode"] = rng.choice(("term", "kill"))
        if target == "leader":
            params["partition"] = rng.randrange(plan.topic_partitions)
        if target == "any":
            params["node"] = rng.randint(1, 3)
    else:
        point, params = _draw_point(rng, sink, plan.batches, parts, steps), {}
    sync, delay = _draw_timing(rng, point)
    return Fault(kind, point, sync=sync, delay=delay, params=params)


def _draw_fault(rng: random.Random, sink: str, batches: int, parts: int) -> Fault:
    kinds = ["kill_driver", "query_stop", "task_failure"]
    if sink in ha.HA_SINKS:
        pass  # their target's own fault is drawn apart (_draw_ha_fault)
    elif sink == "kafka":
        kinds += ["kafka_restart", "kafka_freeze"]
    else:  # the restarts of the sink's database server, in RESTART_MODES' order
        kinds += [k for k in RESTART_MODES if k.startswith(f"{DATABASE[sink]}_")]
    if sink in ZOMBIE_SINKS:
        kinds.append("zombie")
    kind = rng.choice(kinds)
    if kind == "zombie":
        # An attempt of this task that Spark gave up on, waking after the trial's last run.
        point = {
            "src": "task",
            "name": rng.choice(("write", "pre_commit")),
            "batch": rng.randrange(batches),
            "partition": rng.randrange(parts),
        }
        return Fault(kind, point)
    if kind == "task_failure":
        point = {
            "src": "task",
            "name": rng.choice(FAILABLE_HOOKS[sink]),
            "batch": rng.randrange(batches),
            "partition": rng.randrange(parts),
        }
        error = rng.choice(["AbortRequiredError", "RetriableError", "kill"])
        return Fault(kind, point, params={"error": error})
    point = _draw_point(rng, sink, batches, parts)
    sync, delay = _draw_timing(rng, point)
    params: dict[str, Any] = {}
    if kind == "kafka_freeze":
        params["seconds"] = round(KAFKA_REQUEST_TIMEOUT_MS / 1000 + rng.uniform(1.0, 4.0), 1)
    if kind == "query_stop":
        params["restart"] = rng.choice(["process", "in-process"])
    return Fault(kind, point, sync=sync, delay=delay, params=params)


def _draw_realtime(rng: random.Random, seed: str | int, index: int, sink: str) -> TrialPlan:
    """Draw a real-time trial of ``sink`` (:mod:`tests.chaos.realtime`), going on with ``rng``.

    The input: ``batches`` bursts of ``rows`` rows at ``rate`` rows per second into a topic of
    2-3 partitions, with pauses before the bursts between the first and the last; the epoch's
    length; 1-3 faults, each at a time of the faults' clock (which starts once the first burst is
    committed), up to half an epoch past the bursts between, or at the first hook of one
    partition reached after a time within them.
    """
    rt = realtime
    partitions = rng.randint(*rt.TOPIC_PARTITIONS)
    bursts = rng.randint(*rt.BURSTS)
    plan = TrialPlan(
        seed=str(seed),
        index=index,
        sink=sink,
        pipeline="passthrough",
        partitions=partitions,
        staging=False,
        source="kafka",
        batches=bursts,
        rows=rng.randint(*rt.BURST_ROWS),
        topic_partitions=partitions,
        faults=[],
        epoch_seconds=rng.randint(*rt.EPOCH_SECONDS),
        rate=rng.randrange(rt.RATES[0], rt.RATES[1] + 1, 50),
        burst_pauses=[round(rng.uniform(*rt.BURST_PAUSE), 1) for _ in range(bursts - 2)],
    )
    span = plan.production_seconds
    burst = plan.rows / plan.rate
    last_start = span - burst  # the last burst before the final one begins
    kinds = rt.fault_kinds(sink, DATABASE.get(sink))
    for _ in range(rng.randint(1, 3)):
        kind = rng.choice(kinds)
        params: dict[str, Any] = {}
        if kind == "query_stop":
            params["restart"] = rng.choice(["process", "in-process"])
        if rng.random() < rt.HOOK_CHANCE:
            # At a hook of one partition, the first reached after a time before the last burst
            # of the clock ends (rows still to come make its tasks commit again).
            hook = rng.choice(rt.HOOKS)
            point = {"src": "task", "name": hook, "partition": rng.randrange(partitions)}
            params["after"] = round(rng.uniform(0.5, last_start + burst / 2), 1)
            plan.faults.append(Fault(kind, point, sync=True, params=params))
        else:  # at a time of the clock, up to half an epoch past its bursts
            delay = round(rng.uniform(0.5, span + plan.epoch_seconds / 2), 1)
            point = {"src": "clock", "name": "production"}
            plan.faults.append(Fault(kind, point, delay=delay, params=params))
    return plan


def draw_bad_rows(
    seed: str | int, index: int, plan: TrialPlan, chance: float = BAD_ROWS_CHANCE
) -> dict[int, str]:
    """Draw the poison output keys of trial ``index`` (none in most trials), and their kinds.

    From ``random.Random(f"{seed}:{index}:bad_rows")``: a trial has bad rows with probability
    ``chance`` (:data:`BAD_ROWS_CHANCE`, one in three; a trial drawn with them has the same ones
    at any higher chance), then 1-:data:`BAD_ROWS_PER_BATCH` poison input rows in every batch,
    at drawn positions; the key they give (the id, or ``id div 4`` for the aggregation) is
    poison: the pipeline gives it a row the target refuses (:func:`tests.chaos.poison.poison`),
    the same on every replay. JDBC sinks draw one of :data:`~tests.chaos.poison.JDBC_KINDS` per
    key (NOT NULL, too long, CHECK, an out-of-range value, a foreign key, a unique key), Kafka a
    record too large for its topic.
    """
    rng = random.Random(f"{seed}:{index}:bad_rows")
    if rng.random() >= chance:
        return {}
    kinds = KAFKA_KINDS if plan.sink in KAFKA_SINKS else JDBC_KINDS
    poison: dict[int, str] = {}
    for batch in range(plan.batches):
        count = min(rng.randint(1, BAD_ROWS_PER_BATCH), plan.rows)
        for position in sorted(rng.sample(range(plan.rows), count)):
            row = batch * 1000 + position
            key = row // 4 if plan.pipeline == "aggregate" else row
            kind = rng.choice(kinds)
            poison.setdefault(key, kind)  # two rows of one group: the group's key once
    return poison


def draw_plan(
    seed: str | int,
    index: int,
    sinks: Sequence[str] = DEFAULT_SINKS,
    *,
    network_partitions: bool = False,
    bad_rows: float = 0.0,
) -> TrialPlan:
    """Draw trial ``index`` of run ``seed`` (from ``random.Random(f"{seed}:{index}")``).

    With ``network_partitions``, 0-2 network partitions (:data:`PARTITION_COUNTS`) are drawn
    after the other faults from a stream of their own,
    ``random.Random(f"{seed}:{index}:partitions")``: the rest of the trial is the one drawn
    without them (and before they existed). Poison rows are drawn the same way, with probability
    ``bad_rows``, from ``random.Random(f"{seed}:{index}:bad_rows")`` (:func:`draw_bad_rows`).
    A real-time sink (``-rt``) draws a trial of its own (:func:`_draw_realtime`), with neither.
    """
    rng = random.Random(f"{seed}:{index}")
    sink = rng.choice([s for s in SINKS if s in sinks])  # the same draw whatever the order given
    if sink in realtime.RT_SINKS:
        return _draw_realtime(rng, seed, index, sink)  # no partitions, no bad rows
    pipeline = rng.choice(PIPELINES)
    partitions = rng.randint(2, 4)
    staging = PROTOCOL[sink] == "markers" and pipeline in NONDETERMINISTIC and rng.random() < 0.5
    kafka_source = sink == "kafka" and pipeline != "aggregate" and rng.random() < 0.3
    plan = TrialPlan(
        seed=str(seed),
        index=index,
        sink=sink,
        pipeline=pipeline,
        partitions=partitions,
        staging=staging,
        source="kafka" if kafka_source else "files",
        batches=rng.randint(2, 4),
        rows=rng.randint(20, 300),
        topic_partitions=rng.randint(1, 3),
        faults=[],
    )
    if sink in ha.HA_SINKS:
        # Exactly one fault of the replicated target, and 0-2 others: 1-3 in all, as elsewhere.
        plan.faults = [
            _draw_fault(rng, sink, plan.batches, plan.write_partitions)
            for _ in range(rng.randint(0, 2))
        ]
        plan.faults.append(_draw_ha_fault(rng, plan))
        if bad_rows:
            plan.bad_rows = draw_bad_rows(seed, index, plan, bad_rows)
        return plan  # no partitions: the replicated targets run outside network namespaces
    plan.faults = [
        _draw_fault(rng, sink, plan.batches, plan.write_partitions)
        for _ in range(rng.randint(1, 3))
    ]
    if network_partitions:
        cut_rng = random.Random(f"{seed}:{index}:partitions")
        count = cut_rng.choices(*PARTITION_COUNTS)[0]
        plan.faults += [
            _draw_partition(cut_rng, sink, plan.batches, plan.write_partitions)
            for _ in range(count)
        ]
    if bad_rows:
        plan.bad_rows = draw_bad_rows(seed, index, plan, bad_rows)
    return plan


def input_ids(plan: TrialPlan) -> list[int]:
    """Every input id: ``batch * 1000 + i`` (so 4-id groups never straddle two batches)."""
    return [b * 1000 + i for b in range(plan.batches) for i in range(plan.rows)]


def expected_output(plan: TrialPlan) -> dict[int, str]:
    """The output key -> value the target must hold exactly once each (poison keys left out)."""
    ids = input_ids(plan)
    if plan.pipeline != "aggregate":
        return {i: f"p{i}" for i in ids if i not in plan.bad_rows}
    groups: dict[int, list[int]] = collections.defaultdict(list)
    for i in ids:
        groups[i // 4].append(i)
    return {k: f"{len(v)}:{sum(v)}" for k, v in groups.items() if k not in plan.bad_rows}


# ------------------------------------------------------------------------------ infrastructure


@dataclass
class Infra:
    """The servers trials run against (any of them may be missing if no trial needs it)."""

    kafka: Any = None
    pg_a: Any = None
    pg_b: Any = None
    #: One MariaDB server for both MariaDB sinks (the markers protocol needs no special server).
    maria: Any = None
    #: The replicated targets of the ``-ha`` sinks (:mod:`tests.chaos.ha`): a PostgreSQL primary
    #: and synchronous standby, a MariaDB primary and semi-synchronous replica (each pair shared
    #: by both protocols), a 3-broker Kafka cluster.
    pg_ha: Any = None
    maria_ha: Any = None
    kafka_ha: Any = None
    #: The network namespace (``twophase_dev.NetworkNamespace``) each server runs in, by the
    #: attribute holding the server: only servers :func:`own_infra` started in one. The harness
    #: process made them, and only it can cut and heal them (the cut is kept in the object).
    namespaces: dict[str, Any] = field(default_factory=dict)
    #: Why partitions are not drawn; empty when every server runs in a namespace of its own.
    no_partitions: str = "the servers do not run in network namespaces of this harness"

    #: The attributes holding servers.
    SERVERS = ("kafka", "pg_a", "pg_b", "maria")

    @property
    def partitions(self) -> bool:
        """Whether ``partition_*`` faults can be drawn (and fired) against these servers."""
        return not self.no_partitions

    @staticmethod
    def attribute(sink: str) -> str:
        """The attribute holding the server of ``sink``."""
        sink = realtime.BASE.get(sink, sink)  # a real-time sink: its base sink's server
        if sink in ha.HA_SINKS:
            return "kafka_ha" if sink == "kafka-ha" else f"{DATABASE[sink]}_ha"
        if sink == "kafka":
            return "kafka"
        if DATABASE[sink] == "maria":
            return "maria"
        return "pg_a" if sink == "pg-coordinated" else "pg_b"

    def namespace(self, sink: str) -> Any:
        """The network namespace of the server of ``sink``, None if it has none of ours."""
        return self.namespaces.get(self.attribute(sink))

    def ha_pair(self, sink: str) -> Any:
        """The primary and standby of a replicated JDBC sink (``*-ha``)."""
        return self.pg_ha if DATABASE[sink] == "pg" else self.maria_ha

    def kafka_of(self, sink: str) -> Any:
        """The Kafka broker or cluster of a Kafka sink."""
        return self.kafka_ha if sink == "kafka-ha" else self.kafka

    def db(self, sink: str) -> Any:
        """The database server of a JDBC sink (``pg-*`` or ``maria-*``; the primary for ``-ha``)."""
        sink = realtime.BASE.get(sink, sink)
        if sink in ha.HA_SINKS:
            return self.ha_pair(sink).primary
        if DATABASE[sink] == "maria":
            return self.maria
        return self.pg_a if sink == "pg-coordinated" else self.pg_b

    def pg(self, sink: str) -> Any:
        """The PostgreSQL server of a ``pg-coordinated`` / ``pg-markers`` sink."""
        return self.db(sink)

    def server_of(self, kind: str, sink: str) -> Any:
        """The server a fault of ``kind`` acts on."""
        return self.kafka if kind.startswith("kafka") else self.db(sink)


def _server_env(sink: str) -> str:
    """The environment variable that makes :func:`own_infra` reuse a running server of ``sink``."""
    from twophase_dev import ENV_KAFKA_BOOTSTRAP, ENV_MARIADB_URL, ENV_PG_DSN, ENV_PG_NOPREP_DSN

    if sink in ha.HA_SINKS:
        return ""  # always the harness's own
    sink = realtime.BASE.get(sink, sink)
    if sink == "kafka":
        return ENV_KAFKA_BOOTSTRAP
    if DATABASE[sink] == "maria":
        return ENV_MARIADB_URL
    return ENV_PG_DSN if sink == "pg-coordinated" else ENV_PG_NOPREP_DSN


def partition_support(sinks: Sequence[str]) -> str:
    """Tell why partitions cannot be drawn for ``sinks`` here; empty when they can.

    They need root, network namespaces with a veth pair (one is made and removed to find out) and
    servers the harness starts itself, inside them: a server reused through a ``TWOPHASE_*``
    variable runs outside.
    """
    from twophase_dev import DevInfraError, NetworkNamespace

    if all(s in ha.HA_SINKS for s in sinks):
        return "the replicated targets (-ha sinks) run on 127.0.0.1, outside network namespaces"
    if all(s in realtime.RT_SINKS for s in sinks):
        return "real-time trials (-rt sinks) draw none: their servers run outside namespaces"
    sinks = realtime.servers_needed(sinks)
    reused = sorted(
        {_server_env(s) for s in sinks if _server_env(s) and os.environ.get(_server_env(s))}
    )
    if reused:
        return f"{', '.join(reused)} set: such servers do not run in a namespace of the harness"
    if os.geteuid() != 0:
        return "not root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    try:
        NetworkNamespace.remove_stale()
        with NetworkNamespace(f"tp-chaosprobe-{os.getpid()}"):
            pass
    except DevInfraError as exc:
        return f"cannot make a network namespace here: {exc}"
    return ""


@contextlib.contextmanager
def own_infra(sinks: Sequence[str], log_dir: Path, *, partitions: bool = True) -> Iterator[Infra]:
    """Start the servers ``sinks`` need (or reuse those of ``twophase-dev up``), stop them after.

    With ``partitions`` (and :func:`partition_support`), each server it starts runs in a network
    namespace of its own (``tp-chaos<server>-<pid>``), removed after the server stops. A real-time
    sink needs its base sink's server and the Kafka broker of its input.
    """
    from twophase_dev import (
        ENV_KAFKA_BOOTSTRAP,
        ENV_MARIADB_URL,
        ENV_PG_DSN,
        ENV_PG_NOPREP_DSN,
        KafkaBroker,
        KafkaCluster,
        MariaDBServer,
        NetworkNamespace,
        PostgresServer,
        attach_kafka,
        attach_mariadb,
        attach_postgres,
        clean_stale_work_dirs,
    )

    clean_stale_work_dirs()
    started: list[Any] = []
    infra = Infra()
    infra.no_partitions = partition_support(sinks) if partitions else "turned off (--no-partitions)"
    sinks = realtime.servers_needed(sinks)

    def namespace(attribute: str) -> Any:
        """A new namespace for the server held by ``attribute``, None without partitions."""
        if not infra.partitions:
            return None
        netns = NetworkNamespace(f"tp-chaos{attribute.replace('_', '')}-{os.getpid()}")
        infra.namespaces[attribute] = netns.create()
        return netns

    try:
        if "kafka" in sinks:
            if os.environ.get(ENV_KAFKA_BOOTSTRAP):
                infra.kafka = attach_kafka(os.environ[ENV_KAFKA_BOOTSTRAP])
            else:
                broker = KafkaBroker(log_dir=log_dir / "kafka", netns=namespace("kafka"))
                started.append(broker)
                infra.kafka = broker.start()
        for sink, env, prepared in (
            ("pg-coordinated", ENV_PG_DSN, 64),
            ("pg-markers", ENV_PG_NOPREP_DSN, 0),
        ):
            if sink not in sinks:
                continue
            if os.environ.get(env):
                server = attach_postgres(os.environ[env], max_prepared_transactions=prepared)
            else:
                server = PostgresServer(
                    max_prepared_transactions=prepared,
                    log_dir=log_dir / f"postgres-{sink}",
                    netns=namespace(Infra.attribute(sink)),
                )
                started.append(server)
                server.start()
            if sink == "pg-coordinated":
                infra.pg_a = server
            else:
                infra.pg_b = server
        if any(DATABASE.get(s) == "maria" for s in sinks):
            if os.environ.get(ENV_MARIADB_URL):
                infra.maria = attach_mariadb(os.environ[ENV_MARIADB_URL])
            else:
                maria = MariaDBServer(log_dir=log_dir / "mariadb", netns=namespace("maria"))
                started.append(maria)
                infra.maria = maria.start()
        # The replicated targets, always the harness's own, on 127.0.0.1 (a standby and a
        # replica of twophase_dev copy a primary there).
        if any(DATABASE.get(s) == "pg" and s in ha.HA_SINKS for s in sinks):
            pair = ha.PostgresPair(log_dir / "postgres-ha")
            started.append(pair)
            infra.pg_ha = pair.start()
        if any(DATABASE.get(s) == "maria" and s in ha.HA_SINKS for s in sinks):
            maria_pair = ha.MariaDBPair(log_dir / "mariadb-ha")
            started.append(maria_pair)
            infra.maria_ha = maria_pair.start()
        if "kafka-ha" in sinks:
            cluster = KafkaCluster(log_dir=log_dir / "kafka-cluster")
            started.append(cluster)
            infra.kafka_ha = cluster.start()
        yield infra
    finally:
        for server in reversed(started):
            with contextlib.suppress(Exception):
                server.stop()
        for netns in infra.namespaces.values():  # heals a cut, removes the veth pair
            with contextlib.suppress(Exception):
                netns.destroy()


class _ServerOps:
    """One long-lived thread that restarts servers.

    The servers are started with a parent-death signal (``setpriv --pdeathsig``), which the kernel
    sends when the *thread* that started them exits: a server restarted from a short-lived fault
    thread would be shut down as soon as that thread ends. Every restart therefore runs here.
    """

    _lock = threading.Lock()
    _executor: Any = None

    @classmethod
    def run(cls, action: Callable[[], Any]) -> Any:
        from concurrent.futures import ThreadPoolExecutor

        with cls._lock:
            if cls._executor is None:
                cls._executor = ThreadPoolExecutor(1, thread_name_prefix="chaos-server-ops")
            executor = cls._executor
        return executor.submit(action).result()


def ensure_running(infra: Infra) -> list[str]:
    """Start again a managed server that is not running (a fault must never outlive its trial)."""
    notes = []
    for name in Infra.SERVERS:
        server = getattr(infra, name)
        if server is None or not getattr(server, "managed", False) or server.is_running():
            continue
        notes.append(f"{name} was down before the trial: started again")
        _ServerOps.run(server.start)
    # The replicated targets: a new standby after a failover, every broker back and in sync.
    for pair in (infra.pg_ha, infra.maria_ha):
        if pair is not None:
            notes += _ServerOps.run(pair.ensure_ready)
    if infra.kafka_ha is not None:
        notes += _ServerOps.run(lambda: ha.ensure_cluster(infra.kafka_ha))
    return notes


# ------------------------------------------------------------------------------- the driver


def _proc_stat(pid: int) -> tuple[int, int, int] | None:
    """Return ``(ppid, pgid, starttime)`` of a live process, None if it is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[1].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[1]), int(fields[2]), int(fields[19])


class Driver:
    """One driver process (``python -m tests.chaos.driver``) in a process group of its own.

    The JVM runs in the driver's group; PySpark's worker daemon makes a group of its own for the
    Python workers. Both groups (every group a descendant was seen in) are killed together.
    """

    def __init__(self, spec_path: Path, log_path: Path) -> None:
        self.log_path = log_path
        self.spec_path = spec_path
        with open(log_path, "w") as log:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.driver", str(spec_path)],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.popen.pid
        #: pid -> (start time, process group) of every descendant seen.
        self.members: dict[int, tuple[int, int]] = {}
        self.killed = False
        self._lock = threading.Lock()
        self.scan()

    def alive(self) -> bool:
        """Whether the driver process still runs."""
        return self.popen.poll() is None

    def scan(self) -> None:
        """Record the driver's descendants (while it lives: orphans lose their parent link)."""
        children: dict[int, list[int]] = collections.defaultdict(list)
        stats: dict[int, tuple[int, int, int]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            stat = _proc_stat(int(entry))
            if stat is not None:
                stats[int(entry)] = stat
                children[stat[0]].append(int(entry))
        todo = [self.pid]
        with self._lock:
            while todo:
                pid = todo.pop()
                if pid in stats:
                    self.members[pid] = (stats[pid][2], stats[pid][1])
                todo.extend(children.get(pid, []))

    def kill(self) -> bool:
        """SIGKILL every process group of the driver; return whether the driver was alive."""
        was_alive = self.alive()
        if was_alive:
            self.scan()
        groups = {self.pid}
        with self._lock:
            for pid, (start, pgid) in self.members.items():
                stat = _proc_stat(pid)
                if stat is not None and stat[2] == start:
                    groups.add(pgid)
        for pgid in groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=30)
        self.killed = self.killed or was_alive
        return was_alive

    def leftovers(self, wait: float = 10.0) -> list[int]:
        """Recorded descendants still alive ``wait`` seconds after :meth:`kill` (should be none)."""
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                alive = [
                    pid
                    for pid, (start, _g) in self.members.items()
                    if (s := _proc_stat(pid)) is not None and s[2] == start
                ]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


# ------------------------------------------------------------------------------------ results


@dataclass
class TrialResult:
    """What a trial did and what the target holds afterwards."""

    plan: TrialPlan
    outcome: str = ""
    checked: int = 0
    duplicates: int = 0
    losses: int = 0
    wrong: int = 0
    unwritten: int = 0
    leftovers: list[str] = field(default_factory=list)
    #: A trial with bad rows: letters found (the sink's, committed), poison keys with more than
    #: one letter (the extra letters), poison keys without one, letters of a key that is not
    #: poison or with another error class than its poison's.
    dead_letters: int = 0
    dead_letter_duplicates: int = 0
    dead_letter_losses: int = 0
    dead_letter_wrong: int = 0
    #: The letters of poison keys with their poison's class, by class.
    dead_letters_by_class: dict[str, int] = field(default_factory=dict)
    nondeterministic: bool = False
    timed_out: bool = False
    runs: int = 0
    exit_codes: list[int | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    #: The first line of each query failure's message (what a restart had to get over).
    failures: list[str] = field(default_factory=list)
    #: Notable JVM/Spark errors found in the driver logs (one entry per run that shows it).
    log_findings: list[str] = field(default_factory=list)
    #: Distinct errors of steps that ran into a network bound (:func:`network_bound_errors`).
    bound_errors: list[str] = field(default_factory=list)
    #: Runs after which Spark refused its own checkpoint for an interrupted first offset write
    #: (:func:`clear_interrupted_offset_write`).
    spark_tmp_cleared: int = 0
    duration: float = 0.0
    work_dir: str = ""
    notes: list[str] = field(default_factory=list)
    #: A real-time trial: its last run was stopped cleanly by the harness, after every row was
    #: visible and a final run (:func:`_drive_realtime`); seconds from the last row produced to
    #: every row visible; what is wrong with the input topic (its production), if anything.
    finished: bool = False
    visible_after: float | None = None
    input_problem: str = ""
    #: A real-time trial: rows not visible right after the clean stop that ended the drain (the
    #: last row of a partition waits in Spark's JVM: the final run writes it).
    left_by_stop: int | None = None

    @property
    def failing_findings(self) -> list[str]:
        """The driver-log findings that fail a trial however its target ended (issue 53)."""
        return sorted(set(self.log_findings) & FAILING_FINDINGS)

    @property
    def ok(self) -> bool:
        """No duplicate, loss, wrong value, leftover, disallowed error, unfinished run, or
        failure a driver log shows that need not happen (:data:`FAILING_FINDINGS`)."""
        return self.outcome in ("exact", "stopped-as-designed") and not self.failing_findings

    def line(self) -> str:
        """One line for the trial."""
        faults = " ".join(f.describe() for f in self.plan.faults)
        errors = ",".join(sorted(set(self.errors) | set(self.log_findings))) or "-"
        letters = (
            f"dead_letters={self.dead_letters}/{len(self.plan.bad_rows)} "
            if self.plan.bad_rows
            else ""
        )
        realtime = (
            f"visible_after={self.visible_after}s left_by_stop={self.left_by_stop} "
            if self.plan.realtime
            else ""
        )
        return (
            f"trial {self.plan.index:3d} seed={self.plan.seed}:{self.plan.index} "
            f"{self.plan.describe()} faults=[{faults}] outcome={self.outcome} "
            f"checked={self.checked} {letters}{realtime}runs={self.runs} errors={errors} "
            f"duration={self.duration:.1f}s"
        )

    def to_json(self) -> dict[str, Any]:
        """The result as JSON-able data."""
        data = asdict(self)
        data["ok"] = self.ok
        return data


#: Errors worth reporting when a driver log shows them (name -> text looked for).
LOG_PATTERNS = {
    "StackOverflowError": "java.lang.StackOverflowError",
    "InterruptedException": "java.lang.InterruptedException",
    "STATE_STORE_COMMIT_VALIDATION_FAILED": "STATE_STORE_COMMIT_VALIDATION_FAILED",
    "NondeterministicBatchError": "NondeterministicBatchError",
    "CommitFailedError": "CommitFailedError",
    "ConcurrentQueryError": "ConcurrentQueryError",
    # Anything that ends Spark's stream thread by an uncaught throwable (after query.stop()).
    "StreamThreadException": 'Exception in thread "stream execution thread',
}

#: Findings that fail a trial, and so the run, even when its target ended exact: failures that need
#: not happen (issue 53) -- a skipped stateful replay that left Spark's state uncommitted, Spark's
#: stream thread overflowing its stack on what a stopped batch raised, or dying of anything else.
FAILING_FINDINGS = frozenset(
    {"STATE_STORE_COMMIT_VALIDATION_FAILED", "StackOverflowError", "StreamThreadException"}
)


def _failure_summary(message: str) -> str:
    """The cause in a ``StreamingQueryException`` message, on one line."""
    marker = "terminated with exception:"
    cause = message.split(marker, 1)[1] if marker in message else message
    return " ".join(cause.split("=== Streaming Query ===")[0].split())[:300]


def network_bound_errors(path: Path) -> list[str]:
    """Return the distinct twophase errors of a driver log that name a network bound.

    Each is a step (a task's, or the driver's) that failed because the server did not answer in
    time; Spark's task retries and the driver's retry policy may have absorbed it (the query
    failed only if they ran out).
    """
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    found = {
        line.strip()[:300]
        for line in text.splitlines()
        if line.lstrip().startswith("twophase.errors.")
        and any(needle in line for needle in NETWORK_BOUND_NEEDLES)
    }
    return sorted(found)


def scan_log(path: Path) -> list[str]:
    """Return the names of :data:`LOG_PATTERNS` found in a driver log."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [name for name, needle in LOG_PATTERNS.items() if needle in text]


# ------------------------------------------------------------------------------------ targets


class Target:
    """A trial's output: a database table without a primary key, or a Kafka topic."""

    def __init__(self, plan: TrialPlan, infra: Infra, name: str) -> None:
        self.plan, self.infra, self.name = plan, infra, name
        self.table = f"chaos_{name}"
        self.topic = f"chaos-{name}"
        self.control_topic = f"chaos-{name}-markers"
        #: Where a trial with bad rows sets them aside (the sink's ``dead_letter_table`` or
        #: ``dead_letter_topic``).
        self.dead_letter_table = f"chaos_{name}_dead_letters"
        self.dead_letter_topic = f"chaos-{name}-dead-letters"
        #: The parent table of a JDBC table with bad rows (its foreign key's).
        self.parent_table = f"chaos_{name}_parent"

    @property
    def _db(self) -> Any:
        return self.infra.db(self.plan.sink)

    @property
    def _kafka(self) -> Any:
        return self.infra.kafka_of(self.plan.sink)

    @property
    def is_kafka(self) -> bool:
        return self.plan.sink in KAFKA_SINKS

    def refresh(self) -> dict[str, Any]:
        """Settings of the next driver run that a failover changed: MariaDB's URL.

        PyMySQL takes one host, so a replicated MariaDB sink names the primary; after a
        failover the next run names the promoted server, as a DNS name or a proxy that moves
        does in production. (PostgreSQL's DSN names both servers: libpq finds the primary.)
        """
        if self.plan.sink in ha.HA_SINKS and DATABASE.get(self.plan.sink) == "maria":
            return {"url": self.infra.maria_ha.url}
        return {}

    def _quoted(self, table: str) -> str:
        return f"`{table}`" if DATABASE[self.plan.sink] == "maria" else f'"{table}"'

    def create(self) -> dict[str, Any]:
        """Create the table or topic; return the driver's ``target`` settings.

        A trial with a partition gets the sink's :data:`SHORT_BOUNDS`; the others the bounds
        trials always had (Kafka: ``operation_timeout`` 30 s, 3 local retries; JDBC:
        ``connect_timeout`` 5 s and the default ``network_timeout``).
        """
        short = self.plan.short_bounds
        bad = bool(self.plan.bad_rows)
        if self.is_kafka:
            # With bad rows, a topic with a small max.message.bytes: a poison value is over it.
            topic_config = {"max.message.bytes": str(BAD_ROWS_TOPIC_BYTES)} if bad else None
            self._kafka.create_topic(
                self.topic, partitions=self.plan.topic_partitions, config=topic_config
            )
            producer_config: dict[str, Any] = {"request.timeout.ms": KAFKA_REQUEST_TIMEOUT_MS}
            settings: dict[str, Any] = {
                "bootstrap": self._kafka.bootstrap_servers,
                "topic": self.topic,
                "control_topic": self.control_topic,
                "producer_config": producer_config,
                "operation_timeout": 30.0,
            }
            if bad:
                producer_config["batch.size"] = BAD_ROWS_TOPIC_BYTES  # at most the topic's limit
                settings["dead_letter_topic"] = self.dead_letter_topic
            if short:
                settings["operation_timeout"] = SHORT_BOUNDS["operation_timeout"]
                settings["local_retries"] = SHORT_BOUNDS["local_retries"]
            return settings
        server = self._db
        # With bad rows, a table that refuses each kind of poison (tests.chaos.poison).
        maria = DATABASE[self.plan.sink] == "maria"
        ddl = (
            jdbc_table(self.table, self.parent_table, maria=maria)
            if bad
            else [f"CREATE TABLE {self._quoted(self.table)} (k bigint, v text)"]
        )
        for statement in ddl:
            _sql(server, statement)
        settings = {"table": self.table}
        if bad:
            settings["dead_letter_table"] = self.dead_letter_table
        if short:
            settings["network_timeout"] = SHORT_BOUNDS["network_timeout"]
            settings["connect_timeout"] = SHORT_BOUNDS["connect_timeout"]
        if self.plan.sink in ha.HA_SINKS:
            if DATABASE[self.plan.sink] == "maria":
                return {**self.refresh(), **settings}
            return {"dsn": self.infra.pg_ha.dsn, **settings}  # both servers, read-write
        if DATABASE[self.plan.sink] == "maria":
            # The password user (all privileges on its database only) where the harness knows it.
            url = server.password_url if getattr(server, "managed", False) else server.url
            return {"url": url, **settings}
        return {"dsn": server.dsn, **settings}

    def counts(self) -> collections.Counter[tuple[int, str]]:
        """How many times each ``(key, value)`` is visible to a reader."""
        if self.is_kafka:
            return _kafka_counts(self._kafka.bootstrap_servers, self.topic)
        rows = _sql(
            self._db, f"SELECT k, v, count(*) FROM {self._quoted(self.table)} GROUP BY k, v"
        )
        # Not the rows the harness committed for the unique poison (tests.chaos.poison).
        fixed = FIXED_KEYS if self.plan.bad_rows else frozenset()
        return collections.Counter(
            {(int(k), str(v)): int(n) for k, v, n in rows if int(k) not in fixed}
        )

    def dead_letters(self) -> collections.Counter[tuple[int, str]]:
        """How many times each ``(key, error_class)`` is in the trial's dead letters.

        Read as a consumer would: the dead-letter topic with ``read_committed``, the table in a
        fresh connection (committed rows only); the key is the letter's row's (``key`` of a Kafka
        record, ``k`` of a table's row). The table and the topic are the trial's own: a letter of
        another sink is counted under the class ``sink=<its sink>``, which no poison has.
        """
        if self.is_kafka:
            records = _kafka_records(self._kafka.bootstrap_servers, self.dead_letter_topic)
            values = [json.loads(value) for _key, value in records]
            letters = [
                (str(v.get("sink")), int(v["row"]["key"]), str(v["error_class"])) for v in values
            ]
        else:
            rows = _sql(
                self._db,
                f"SELECT sink, {self._quoted('row')}, error_class FROM "
                f"{self._quoted(self.dead_letter_table)}",
            )
            letters = [
                # jsonb arrives parsed, MariaDB's LONGTEXT as text
                (str(sink), int((row if isinstance(row, dict) else json.loads(row))["k"]), str(c))
                for sink, row, c in rows
            ]
        return collections.Counter(
            (key, error_class if sink == self.name else f"sink={sink}")
            for sink, key, error_class in letters
        )

    def save_evidence(self, path: Path) -> None:
        """Write what a failed trial's target holds beyond the records: markers, prepared."""
        lines: list[str] = []
        if self.is_kafka:
            pass
        elif PROTOCOL[self.plan.sink] == "markers":
            try:
                rows = _sql(
                    self._db,
                    f"SELECT * FROM {self._quoted('twophase_markers')} WHERE identity LIKE %s "
                    "ORDER BY 2, 3, 4",
                    (f"{self.name}.%",),
                )
                lines += ["twophase_markers:", *map(str, rows)]
            except Exception as exc:  # no marker table: nothing was ever committed
                lines += [f"twophase_markers: {exc!r}"]
        else:
            lines += ["prepared:", *_prepared(self._db)]
        if self.plan.bad_rows:
            letters = self.dead_letters()
            lettered = {key for key, _class in letters}
            lines += ["dead letters, (key, error_class): count:"]
            lines += [f"{key}: {n}" for key, n in sorted(letters.items())]
            lines += [f"poison keys without a letter: {sorted(set(self.plan.bad_rows) - lettered)}"]
        path.write_text("\n".join(lines) + "\n")

    def leftovers(self) -> list[str]:
        """Prepared transactions of the sink, or Kafka partitions with an open transaction."""
        if self.is_kafka:
            topics = [self.topic, self.control_topic]
            if self.plan.bad_rows:
                topics.append(self.dead_letter_topic)
            deadline = time.monotonic() + 15
            while True:  # transaction markers are written just after a commit returns
                unstable = unstable_partitions(self._kafka.bootstrap_servers, topics)
                if not unstable or time.monotonic() > deadline:
                    return unstable
                time.sleep(0.2)
        if PROTOCOL[self.plan.sink] == "markers":
            return []
        # The gid (PostgreSQL) or the XA gtrid (MariaDB) starts with tp:<identity>, and the
        # identity with the sink's name.
        return [
            f"prepared {gid}" for gid in _prepared(self._db) if gid.startswith(f"tp:{self.name}.")
        ]


def _is_maria(server: Any) -> bool:
    from twophase_dev import MariaDBServer

    return isinstance(server, MariaDBServer)


def _sql(server: Any, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement in autocommit mode on PostgreSQL or MariaDB; return its rows."""
    if _is_maria(server):
        conn = server.connect(autocommit=True)
    else:
        conn = server.connect()
        conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(statement, params)
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()


def _prepared(server: Any) -> list[str]:
    """Every prepared transaction of the server: gids (PostgreSQL) or XA gtrids (MariaDB)."""
    if _is_maria(server):
        return list(server.prepared_xids())
    return [str(r[0]) for r in _sql(server, "SELECT gid FROM pg_prepared_xacts")]


def _kafka_counts(bootstrap: str, topic: str) -> collections.Counter[tuple[int, str]]:
    return collections.Counter(
        (int(key.decode()), value.decode()) for key, value in _kafka_records(bootstrap, topic)
    )


def _kafka_records(bootstrap: str, topic: str) -> list[tuple[bytes, bytes]]:
    """Every committed record of ``topic`` as ``(key, value)``, read with ``read_committed``."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chaos-check-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 50,
            "log_level": 3,
        }
    )
    records: list[tuple[bytes, bytes]] = []
    try:
        partitions = sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        at_end: set[int] = set()
        deadline = time.monotonic() + 120
        while len(at_end) < len(partitions):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the read_committed check of {topic} stalled")
            for msg in consumer.consume(1000, 0.2):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {err}")
                    at_end.add(msg.partition())
                    continue
                records.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    return records


def _write_input(plan: TrialPlan, infra: Infra, work: Path, name: str) -> dict[str, Any]:
    """Write the trial's input; return the driver's ``source`` settings.

    A real-time trial's topic is only created: the harness produces into it while the query
    runs (:class:`tests.chaos.realtime.Producer`).
    """
    ids = input_ids(plan)
    if plan.realtime:
        topic = f"chaos-{name}-in"
        infra.kafka.create_topic(topic, partitions=plan.topic_partitions)
        return {"kind": "kafka", "bootstrap": infra.kafka.bootstrap_servers, "topic": topic}
    if plan.source == "files":
        from tests.spark.helpers import write_input

        path = work / "input"
        written = write_input(path, plan.batches, plan.rows)
        assert written == ids
        return {"kind": "files", "path": str(path)}
    from confluent_kafka import Producer

    topic = f"chaos-{name}-in"
    infra.kafka.create_topic(topic, partitions=plan.topic_partitions)
    producer = Producer(
        {"bootstrap.servers": infra.kafka.bootstrap_servers, "linger.ms": 5, "log_level": 3}
    )
    for n, i in enumerate(ids):
        producer.produce(topic, key=str(i), value=str(i), partition=n % plan.topic_partitions)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not write the input topic {topic}")
    return {
        "kind": "kafka",
        "bootstrap": infra.kafka.bootstrap_servers,
        "topic": topic,
        "per_trigger": plan.rows,
    }


# ------------------------------------------------------------------------------------- trials


class _Trial:
    """The running state of one trial: driver, event log, faults in flight."""

    def __init__(self, plan: TrialPlan, infra: Infra, work: Path) -> None:
        self.plan, self.infra, self.work = plan, infra, work
        self.events = work / "events.jsonl"
        self.control = work / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.driver: Driver | None = None
        self.threads: list[threading.Thread] = []
        self.triggered: set[int] = set()
        self.offset = 0
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.rules: FakeTarget | None = None
        self.rule_of: dict[int, Any] = {}
        self.in_process_restarts = True
        self.at: dict[int, dict[str, Any]] = {}  # the event that triggered each fault
        self.zombies: dict[int, tuple[Path, subprocess.Popen[bytes]]] = {}
        #: Held by a restart or a partition of the trial's server: one at a time (a server
        #: restarting during a cut would wait in vain for its readiness check to connect).
        self.server_lock = threading.Lock()
        #: The partition in force or waiting for the server (its number), and when the last one
        #: healed (:data:`PARTITION_GAP`).
        self.partition_busy: int | None = None
        self.last_heal = 0.0
        #: When each server fault that fired acted: fault number -> (start, end), epoch seconds.
        self.windows: dict[int, tuple[float, float]] = {}
        #: The sink's name (its table, topics and transaction ids start with it).
        self.sink_name = ""
        #: Every pause point of the driver spec (released at the end of the trial).
        self.pause_ids: list[str] = []
        #: A real-time trial: when each hook fault's pause is to be armed (wall clock), the
        #: faults armed, and whether faults may still trigger (False once the trial ends).
        self.arm_due: dict[int, float] = {}
        self.armed: set[int] = set()
        self.open = True

    def prepared(self, server: Any = None) -> list[str]:
        """Every prepared transaction on ``server``, by default the sink's (current primary)."""
        return _prepared(server if server is not None else self.infra.db(self.plan.sink))

    # -------------------------------------------------------------- fault actions
    def note(self, **fields: Any) -> None:
        emit(self.events, src="harness", **fields)

    def wait_event(self, name: str, since: int, timeout: float) -> dict[str, Any] | None:
        """Wait for an event named ``name`` after byte ``since`` of the event log."""
        deadline = time.monotonic() + timeout
        offset = since
        while time.monotonic() < deadline:
            events, offset = read_events(self.events, offset)
            for event in events:
                if event.get("name") == name:
                    return event
            time.sleep(0.05)
        return None

    def fire(self, number: int, fault: Fault) -> None:
        """Run one fault's action (on its own thread), then release its pause point."""
        try:
            if not fault.sync and fault.delay:
                time.sleep(fault.delay)
            started = time.time()
            if fault.kind == "zombie":
                fault.fired, fault.detail = self._spawn_zombie(number, self.at[number])
            elif fault.kind in PARTITION_SECONDS:
                fault.fired, fault.detail = self._partition(number, fault)
            elif fault.kind == "failover":
                fault.fired, fault.detail = ha.fail_over(self, number, fault, _ServerOps.run)
            elif fault.kind == "broker_restart":
                fault.fired, fault.detail = ha.restart_brokers(self, number, fault, _ServerOps.run)
            else:
                fault.fired, fault.detail = self._act(fault)
            if fault.fired and fault.kind in SERVER_FAULTS:
                if fault.kind in PARTITION_SECONDS:
                    started = fault.evidence["cut_at"]
                elif fault.kind in ("failover", "broker_restart"):
                    started = fault.evidence.get("down_at") or min(
                        b["down_at"] for b in fault.evidence["brokers"]
                    )
                self.windows[number] = (started, time.time())
        except Exception as exc:
            fault.fired, fault.detail = False, f"action failed: {exc!r}"
        finally:
            self.note(
                name="fault_done",
                fault=number,
                kind=fault.kind,
                fired=fault.fired,
                detail=fault.detail,
            )
            go(self.control, f"f{number}")

    def _act(self, fault: Fault) -> tuple[bool, str]:
        kind = fault.kind
        driver = self.driver
        if kind == "kill_driver":
            if driver is None or not driver.alive():
                return False, "no driver running"
            killed = driver.kill()
            return (
                killed,
                f"driver {driver.pid} and its groups killed" if killed else "exited before",
            )
        if kind == "kill_workers":  # a real-time trial: Spark retries the tasks in the epoch
            if driver is None or not driver.alive():
                return False, "no driver running"
            return realtime.kill_python_workers(driver.pid, driver.alive)
        if kind == "query_stop":
            if driver is None or not driver.alive():
                return False, "no driver running"
            since = self.events.stat().st_size
            tmp = self.control / "stop.tmp"
            in_process = fault.params.get("restart") == "in-process" and self.in_process_restarts
            tmp.write_text("restart" if in_process else "stop")
            tmp.replace(self.control / "stop")
            event = self.wait_event("stop_called", since, timeout=10)
            if event is None:
                with contextlib.suppress(FileNotFoundError):
                    (self.control / "stop").unlink()
                return False, "the driver did not call stop()"
            return bool(event.get("active")), f"stop() called, query active={event.get('active')}"
        if kind == "barrier":
            # Not a fault: hold the process at the point until another point is reached.
            since = self.events.stat().st_size
            until = fault.params["until"]
            deadline = time.monotonic() + float(fault.params.get("timeout", 60))
            offset = since
            while time.monotonic() < deadline:
                events, offset = read_events(self.events, offset)
                if any(matches(until, e) for e in events):
                    return True, f"held until {until}"
                time.sleep(0.05)
            return False, f"{until} not reached"
        server = self.infra.server_of(kind, self.plan.sink)
        if server is None or not getattr(server, "managed", False):
            return False, "server not managed by this harness: cannot restart it"
        before = server.pid
        if kind in RESTART_MODES:
            mode = RESTART_MODES[kind]
            with self.server_lock:
                _ServerOps.run(lambda: server.restart(mode=mode))
            return (
                server.pid != before and server.is_running(),
                f"{mode}: pid {before} -> {server.pid}",
            )
        if kind == "kafka_restart":
            with self.server_lock:
                _ServerOps.run(server.restart)
            return server.pid != before and server.is_running(), f"pid {before} -> {server.pid}"
        if kind == "kafka_freeze":
            seconds = float(fault.params["seconds"])
            os.kill(before, signal.SIGSTOP)
            try:
                time.sleep(seconds)
            finally:
                os.kill(before, signal.SIGCONT)
            return True, f"broker {before} stopped for {seconds}s"
        raise ValueError(f"unknown fault kind {kind!r}")

    # -------------------------------------------------------------- partitions
    def _partition(self, number: int, fault: Fault) -> tuple[bool, str]:
        """Cut the sink's server off (a "wire" cut), heal it ``seconds`` later; prove the loss.

        A process held at the fault's point goes on as soon as the cut is in place, into the
        partition. Fired when the cut was placed and healed, and the namespace's counters show
        that frames were sent to the server during it and every one was lost (dropped by its
        veth as addressed to another host: ``ns_rx_packets > 0`` and ``ns_rx_otherhost ==
        ns_rx_packets``); a cut during which nothing was sent did not fire.
        """
        netns = self.infra.namespace(self.plan.sink)
        if netns is None:
            return False, "the server does not run in a network namespace of this harness"
        seconds = float(fault.params["seconds"])
        with self.lock:
            if self.partition_busy is not None:
                return False, f"partition {self.partition_busy} of the server was in force"
            since = time.monotonic() - self.last_heal
            if since < PARTITION_GAP:
                return False, f"the last partition of the server healed {since:.1f} s before"
            self.partition_busy = number
        try:
            return self._cut_and_heal(number, fault, netns, seconds)
        finally:
            with self.lock:
                self.partition_busy = None
                self.last_heal = time.monotonic()

    def _cut_and_heal(
        self, number: int, fault: Fault, netns: Any, seconds: float
    ) -> tuple[bool, str]:
        with self.server_lock:
            netns.cut("wire")
            try:
                # Read after the cut is in place: frames of the healthy link before it (traffic
                # flows at any time here) must not count as having got through it.
                at_cut = netns.counters()
                cut_at = time.time()
                self.note(name="partition_cut", fault=number, kind=fault.kind, seconds=seconds)
                go(self.control, f"f{number}")
                time.sleep(seconds)
                at_heal = netns.counters()
            finally:
                netns.heal()
            healed_at = time.time()
            self.note(name="partition_healed", fault=number, kind=fault.kind)
        during = at_heal - at_cut
        fault.evidence = {"cut_at": cut_at, "healed_at": healed_at, **asdict(during)}
        sent, dropped = during.ns_rx_packets, during.ns_rx_otherhost
        proven = sent > 0 and dropped == sent
        detail = (
            f"wire cut of {netns.name} for {healed_at - cut_at:.1f} s: {sent} frames sent to the "
            f"server, {dropped} dropped, {during.root_tcp_retrans_segs} TCP retransmissions"
        )
        if not proven:
            detail += "; nothing was sent during it" if sent == 0 else "; frames got through"
        return proven, detail

    def attribute_failures(self) -> None:
        """Note in each fired partition the query failures that may be its own.

        A query failure belongs to the server fault that fired and began last before it, if the
        failure came while that fault acted or within :data:`PARTITION_FAILURE_GRACE` seconds
        after; when that fault is a partition, the failure is noted in the partition's
        ``evidence["query_failures"]`` and detail, with whether its message names a network
        bound and whether a restart or freeze of the server was in that window too.
        """
        for number in self.windows:
            fault = self.plan.faults[number]
            if fault.kind in PARTITION_SECONDS:
                fault.evidence["query_failures"] = []
        for event in self.seen:
            if event.get("name") != "query_failed":
                continue
            t = float(event.get("t", 0))
            candidates = sorted(
                (start, n)
                for n, (start, end) in self.windows.items()
                if start <= t <= end + PARTITION_FAILURE_GRACE
            )
            if not candidates:
                continue
            start, number = candidates[-1]
            fault = self.plan.faults[number]
            if fault.kind not in PARTITION_SECONDS:
                continue
            failure = {
                "error": event.get("error"),
                "twophase_error": event.get("twophase_error"),
                "restartable": event.get("restartable"),
                "network_bound": event.get("network_bound"),
                "after": round(t - start, 1),
                "other_server_fault": any(
                    self.plan.faults[n].kind not in PARTITION_SECONDS for _s, n in candidates
                ),
            }
            fault.evidence["query_failures"].append(failure)
            fault.detail += (
                f"; the query failed {failure['after']} s after the cut: "
                f"{failure['twophase_error'] or failure['error']} "
                f"({'restartable' if failure['restartable'] else 'not restartable'}"
                f"{', on a network bound' if failure['network_bound'] else ''}"
                f"{', a restart or freeze too' if failure['other_server_fault'] else ''})"
            )

    # -------------------------------------------------------------- zombies
    def _spawn_zombie(self, number: int, event: dict[str, Any]) -> tuple[bool, str]:
        """Start a zombie of the task that reached the point (:mod:`tests.chaos.zombie`)."""
        driver = self.driver
        if driver is None:
            return False, "no driver spec"
        where = self.work / f"zombie-{number}"
        where.mkdir(exist_ok=True)
        spec = {
            "driver": str(driver.spec_path),
            **{k: event[k] for k in ("identity", "epoch", "batch", "partition")},
            "attempt": int(event["attempt"]) + 1000,  # its own gid
        }
        (where / "spec.json").write_text(json.dumps(spec))
        with open(where / "zombie.log", "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.chaos.zombie", str(where / "spec.json")],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.zombies[number] = (where, process)
        return True, f"zombie of b{event['batch']}p{event['partition']} started (pid {process.pid})"

    def wake_zombies(self, timeout: float = 60.0) -> list[str]:
        """Wake every zombie now that no driver runs; return what each did."""
        notes = []
        for number, (where, process) in self.zombies.items():
            (where / "go").touch()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
            fault = self.plan.faults[number]
            try:
                outcome = json.loads((where / "outcome.json").read_text())
            except (FileNotFoundError, ValueError):
                fault.detail += "; the zombie did not report (see its zombie.log)"
                notes.append(f"zombie {number} did not report")
                continue
            did = outcome.get("outcome")
            fault.detail += f"; woke after the last run: {did}"
            if did == "prepared":
                notes.append(f"zombie {number} prepared {outcome.get('transaction')}")
            elif "fenced" not in str(outcome.get("error", "")):
                notes.append(f"zombie {number} refused, but not by the fence: {outcome}")
        return notes

    # -------------------------------------------------------------- task failures
    def install_rules(self) -> str | None:
        """Store the task-failure rules where the executors read them."""
        failures = [(n, f) for n, f in enumerate(self.plan.faults) if f.kind == "task_failure"]
        if not failures:
            return None
        self.rules = FakeTarget(self.work / "rules")
        for n, fault in failures:
            p = fault.point
            self.rule_of[n] = self.rules.fail(
                p["name"],
                batch_id=p["batch"],
                partition_id=p["partition"],
                attempt=0,
                error=fault.params["error"],
                message=f"chaos: injected task failure {n}",
            )
        return str(self.work / "rules")

    def settle_rules(self) -> None:
        """Mark the task failures that fired."""
        if self.rules is None:
            return
        for n, rule in self.rule_of.items():
            fired = self.rules.fired(rule)
            fault = self.plan.faults[n]
            fault.fired = fired > 0
            fault.detail = f"fired {fired} time(s)"

    # -------------------------------------------------------------- event loop
    def trigger(self, n: int, fault: Fault, event: dict[str, Any]) -> None:
        """Start fault ``n`` on a thread of its own: its point was reached at ``event``."""
        self.triggered.add(n)
        self.at[n] = event
        self.note(name="fault_triggered", fault=n, kind=fault.kind, at=event)
        thread = threading.Thread(target=self.fire, args=(n, fault), name=f"fault-{n}", daemon=True)
        thread.start()
        self.threads.append(thread)

    def poll_events(self) -> None:
        """Read new events; start the faults whose point was reached."""
        self.arm_due_pauses()
        events, self.offset = read_events(self.events, self.offset)
        for event in events:
            self.seen.append(event)
            if event.get("name") == "paused" and str(event.get("pause", "")).count("h") == 1:
                # A rolling restart's hold (ha.holds) whose restart never began: let it go.
                number = str(event["pause"]).lstrip("f").split("h")[0]
                if number.isdigit() and int(number) not in self.triggered:
                    go(self.control, str(event["pause"]))
            if event.get("name") == "paused" and self.open:
                # A real-time hook fault triggers where a task waits at its armed pause.
                number = str(event.get("pause", "")).removeprefix("f")
                if number.isdigit() and int(number) in self.armed:
                    n = int(number)
                    if n not in self.triggered:
                        self.trigger(n, self.plan.faults[n], dict(event.get("at") or {}))
            if event.get("src") not in ("driver", "task") or not self.open:
                continue
            for n, fault in enumerate(self.plan.faults):
                if fault.kind == "task_failure" or n in self.triggered or "after" in fault.params:
                    continue
                if matches(fault.point, event):
                    self.trigger(n, fault, event)

    # -------------------------------------------------------------- real-time faults
    def start_clock(self, started: float) -> None:
        """The production began at ``started`` (wall clock): set a real-time trial's faults going.

        A fault at a time fires ``delay`` seconds later (its thread sleeps); a hook fault's pause
        is armed ``after`` seconds later (:meth:`arm_due_pauses`).
        """
        for n, fault in enumerate(self.plan.faults):
            if "after" in fault.params:
                self.arm_due[n] = started + float(fault.params["after"])
            elif fault.point.get("src") == "clock":
                self.trigger(n, fault, {"src": "clock", "name": "production", "t": started})

    def arm_due_pauses(self) -> None:
        """Arm the hook faults' pauses whose time has come (``control/arm-f<n>``)."""
        now = time.time()
        for n, due in self.arm_due.items():
            if n not in self.armed and now >= due and self.open:
                Path(self.control, f"arm-f{n}").touch()
                self.armed.add(n)
                self.note(name="fault_armed", fault=n, kind=self.plan.faults[n].kind)

    def faults_done(self) -> bool:
        """Whether every fault that triggered has finished acting."""
        return all(not thread.is_alive() for thread in self.threads)

    def close_faults(self) -> int:
        """Let no fault trigger any more (the trial ends); return how many never triggered."""
        self.open = False
        left = 0
        for n, fault in enumerate(self.plan.faults):
            if n not in self.triggered:
                left += 1
                go(self.control, f"f{n}")  # an armed pause not reached: nothing may wait there
                fault.detail = "not reached before the end of the trial"
        return left

    def wait_faults(self, timeout: float = 120) -> None:
        """Wait for the faults in flight (a restart must be over before the next run)."""
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def release_all(self) -> None:
        """Release every pause point (nothing may wait for a fault that will not come)."""
        for n in range(len(self.plan.faults)):
            go(self.control, f"f{n}")
        for pause_id in self.pause_ids:
            go(self.control, pause_id)


def _request_stop(trial: _Trial, why: str) -> None:
    """Ask the driver for a clean ``query.stop()`` and an exit (``control/stop``)."""
    tmp = trial.control / "stop.tmp"
    tmp.write_text("stop")
    tmp.replace(trial.control / "stop")
    trial.note(name="harness_stop", why=why)


def _check_input(bootstrap: str, topic: str, ids: list[int]) -> str:
    """Say what is wrong with a real-time trial's input topic (each id once); empty if nothing."""
    try:
        counts = _kafka_counts(bootstrap, topic)
    except Exception as exc:
        return f"could not read the input topic: {exc!r}"
    wanted = collections.Counter({(i, str(i)): 1 for i in ids})
    if counts == wanted:
        return ""
    missing = sum(1 for k in wanted if k not in counts)
    extra = sum(n for k, n in counts.items() if k not in wanted) + sum(
        n - 1 for k, n in counts.items() if k in wanted and n > 1
    )
    return f"the input topic holds {sum(counts.values())} rows: {missing} missing, {extra} extra"


def _visible(target: Target, expected: dict[int, str]) -> int:
    """How many expected ``(key, value)`` the target shows (-1 if it cannot be read now)."""
    try:
        counts = target.counts()
    except Exception:
        return -1
    return sum(1 for k, v in expected.items() if counts.get((k, v), 0) > 0)


def _drive_realtime(
    trial: _Trial,
    result: TrialResult,
    target: Target,
    source: dict[str, Any],
    start_run: Callable[[], Driver],
    finish_run: Callable[..., int | None],
    deadline: float,
    max_runs: int,
) -> None:
    """Run a real-time trial's driver until its rows are in, restarting it after every exit.

    The phases (:mod:`tests.chaos.realtime`): ``faults`` -- the first burst a second after the
    first query started, the faults' clock from its first commit, the bursts between, the faults;
    ``drain`` -- once those bursts are produced, every fault has acted (or the rest were given
    up) and the query runs again, the last burst, until every row is visible but the last of
    each partition (which
    waits in the JVM for the epoch's end); ``stopping`` -- a clean stop, mid-epoch; ``final`` --
    the query started once more from its checkpoint (the epoch is replayed: its committed prefix
    skipped), until every row is visible and an epoch has passed; ``final-stopping`` -- its
    clean stop, after which the trial is ``finished``. A run that exits otherwise is started
    again in the same phase (a stop that did not end cleanly: back to ``drain``, or ``final``).
    """
    plan = trial.plan
    rt = realtime
    ids = input_ids(plan)
    expected = expected_output(plan)
    bursts = [ids[b * plan.rows : (b + 1) * plan.rows] for b in range(plan.batches)]
    producer = rt.Producer(
        source["bootstrap"],
        source["topic"],
        bursts,
        plan.topic_partitions,
        plan.rate,
        plan.burst_pauses,
        trial.events,
    )
    phase = "faults"
    poll_every = 2.0 if target.is_kafka else 1.0
    clock = False
    while True:
        if result.runs >= max_runs:
            result.notes.append(f"gave up after {max_runs} driver runs")
            break
        if time.monotonic() > deadline:
            result.timed_out = True
            break
        first_event = len(trial.seen)
        driver = start_run()
        last_scan = last_poll = 0.0
        query_started: float | None = None
        stop_asked: float | None = None
        while driver.alive():
            trial.poll_events()
            now = time.monotonic()
            if now - last_scan > 1.0:
                driver.scan()
                last_scan = now
            if now > deadline:
                result.timed_out = True
                driver.kill()
                break
            run_events = trial.seen[first_event:]
            if query_started is None and any(e.get("name") == "query_started" for e in run_events):
                query_started = now
            if query_started is not None and not producer.is_alive() and producer.done_at is None:
                time.sleep(1.0)  # into a running query
                producer.start()
            committed = any(e.get("name") == "commit_with_marker_done" for e in run_events)
            if committed and not producer.ready.is_set():
                producer.ready.set()  # a task committed: its Python worker is up
            # The last burst goes into a live query: one that committed, or has run a while.
            live = query_started is not None and (committed or now - query_started > 5.0)
            if not clock and producer.clock_at is not None:
                trial.start_clock(producer.clock_at)
                clock = True
            if (
                phase == "faults"
                and clock
                and live
                and producer.middle_done_at is not None
                and trial.faults_done()
                and (
                    len(trial.triggered) == len(plan.faults)
                    or now - producer.middle_done_at > plan.epoch_seconds + rt.SETTLE_SECONDS
                )
            ):
                left = trial.close_faults()
                trial.note(name="drain", faults_not_reached=left)
                producer.final.set()
                phase = "drain"
            if (
                phase == "drain"
                and producer.done_at is not None
                and query_started is not None
                and now - last_poll > poll_every
            ):
                last_poll = now
                # Every row but the last of each partition: that one waits in Spark's JVM for the
                # partition's next row or the epoch's end.
                if _visible(target, expected) >= len(expected) - plan.topic_partitions:
                    if producer.last_row_at is not None:
                        result.visible_after = round(time.time() - producer.last_row_at, 1)
                    _request_stop(trial, "every row is visible but the last of each partition")
                    phase, stop_asked = "stopping", now
            if phase == "final" and query_started is not None and now - last_poll > poll_every:
                last_poll = now
                ran = now - query_started
                done = ran > plan.epoch_seconds + rt.FINAL_RUN_MARGIN
                waited_enough = ran > plan.epoch_seconds + rt.FINAL_RUN_WAIT
                if done and (waited_enough or _visible(target, expected) == len(expected)):
                    _request_stop(trial, "the final run went past an epoch")
                    phase, stop_asked = "final-stopping", now
            if stop_asked is not None and now - stop_asked > 120:
                result.notes.append(f"run {result.runs - 1}: no exit 120 s after a clean stop")
                driver.kill()
                break
            time.sleep(0.1)
        code = finish_run(driver, wait_faults=False)  # faults in flight go on over restarts
        if result.timed_out:
            break
        if code == EXIT_NONDETERMINISTIC:
            result.nondeterministic = True
            break
        if phase == "stopping":
            phase = "final" if code == EXIT_STOPPED else "drain"
            if code == EXIT_STOPPED:
                result.left_by_stop = len(expected) - _visible(target, expected)
        elif phase == "final-stopping":
            if code == EXIT_STOPPED:
                result.finished = True
                break
            phase = "final"
    trial.close_faults()
    producer.final.set()
    producer.ready.set()
    if producer.is_alive():
        producer.join(timeout=60)
    if producer.errors:
        result.input_problem = f"production failed: {'; '.join(producer.errors[:3])}"
    elif producer.done_at is not None:
        result.input_problem = _check_input(source["bootstrap"], source["topic"], ids)
    else:
        result.notes.append("the production never began (no query started)")


def run_trial(
    plan: TrialPlan,
    infra: Infra,
    work: Path,
    *,
    timeout: float = 300.0,
    max_runs: int = 10,
    in_process_restarts: bool = True,
    log: Callable[[str], None] | None = None,
) -> TrialResult:
    """Run one trial in ``work`` (created): drive, inject, restart, then check the target.

    Parameters
    ----------
    plan
        The trial (from :func:`draw_plan`, or written by a test).
    infra
        The servers.
    work
        The trial's directory (input, checkpoint, event log, driver logs).
    timeout
        Seconds before the trial is given up (its driver killed).
    max_runs
        Driver starts at most.
    in_process_restarts
        Let ``query_stop`` faults drawn with an in-process restart start the query again in the
        same driver process (else the driver exits and is started again).
    log
        Called with progress lines (None: quiet).
    """
    say = log or (lambda _line: None)
    started = time.monotonic()
    # A trial starts from nothing: a directory left by an earlier run (a kept failed trial of
    # the same index) would lend it that run's checkpoint and events.
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    result = TrialResult(plan, work_dir=str(work))
    result.notes += ensure_running(infra)
    name = f"s{abs(hash(plan.seed)) % 10**6}_{plan.index}_{uuid.uuid4().hex[:6]}"
    trial = _Trial(plan, infra, work)
    trial.in_process_restarts = in_process_restarts
    trial.sink_name = name
    target = Target(plan, infra, name)
    spec: dict[str, Any] = {
        "sink": plan.sink,
        "sink_name": name,
        "pipeline": plan.pipeline,
        "partitions": plan.partitions,
        "staging": plan.staging,
        "source": _write_input(plan, infra, work, name),
        "target": target.create(),
        "checkpoint": str(work / "checkpoint"),
        "events": str(trial.events),
        "control": str(trial.control),
        "spark_local_dir": str(work / "spark-local"),
        "spark_conf": dict(plan.spark_conf),
        # Poison output key -> the value kind the pipeline gives it (tests.chaos.driver).
        "bad_rows": {str(k): kind for k, kind in sorted(plan.bad_rows.items())},
        "rules": trial.install_rules(),
        "pauses": [
            # A real-time hook fault's pause holds nothing until the harness arms it.
            {**f.point, "id": f"f{n}", **({"armed": True} if "after" in f.params else {})}
            for n, f in enumerate(plan.faults)
            if f.sync and f.kind != "task_failure"
        ]
        + ha.holds(plan.faults),
        # A real-time trial (tests.chaos.realtime): the trigger and the master of its query.
        "realtime": {
            "epoch_seconds": plan.epoch_seconds,
            "commit_interval": realtime.COMMIT_INTERVAL,
            "cores": plan.topic_partitions,
            "task_attempts": realtime.TASK_ATTEMPTS,
        }
        if plan.realtime
        else None,
    }
    trial.pause_ids = [p["id"] for p in spec["pauses"]]
    (work / "plan.json").write_text(json.dumps(asdict(plan), indent=1))
    deadline = started + timeout

    def start_run() -> Driver:
        """Start the next driver run."""
        with contextlib.suppress(FileNotFoundError):
            (trial.control / "stop").unlink()
        spec["run"] = result.runs
        spec["target"].update(target.refresh())  # after a failover: the promoted server
        spec_path = work / f"spec-{result.runs}.json"
        spec_path.write_text(json.dumps(spec, indent=1))
        driver = Driver(spec_path, work / f"driver-{result.runs}.log")
        trial.driver = driver
        result.runs += 1
        return driver

    def finish_run(driver: Driver, *, wait_faults: bool = True) -> int | None:
        """Reap an exited (or killed) run; return its exit code."""
        code = driver.popen.poll()
        if wait_faults:
            trial.wait_faults()
        driver.kill()  # what is left of its groups (the JVM, Python workers)
        trial.poll_events()
        survivors = driver.leftovers()
        if survivors:
            result.notes.append(f"run {result.runs}: processes survived: {survivors}")
        result.log_findings += scan_log(driver.log_path)
        result.bound_errors += network_bound_errors(driver.log_path)
        result.exit_codes.append(code)
        say(f"  run {result.runs - 1}: exit {code}")
        removed = clear_interrupted_offset_write(driver.log_path, Path(spec["checkpoint"]))
        if removed:
            result.spark_tmp_cleared += 1
            result.notes.append(
                f"run {result.runs - 1}: Spark refused its checkpoint "
                f"(STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY): removed {removed}, the "
                "temporary file of an interrupted first offset write, as docs/operations.md "
                "tells an operator to"
            )
        return code

    try:
        if plan.realtime:
            _drive_realtime(
                trial, result, target, spec["source"], start_run, finish_run, deadline, max_runs
            )
        while not plan.realtime:
            if result.runs >= max_runs:
                result.notes.append(f"gave up after {max_runs} driver runs")
                break
            if time.monotonic() > deadline:
                result.timed_out = True
                break
            driver = start_run()
            last_scan = 0.0
            while driver.alive():
                trial.poll_events()
                now = time.monotonic()
                if now - last_scan > 1.0:
                    driver.scan()
                    last_scan = now
                if now > deadline:
                    result.timed_out = True
                    driver.kill()
                    break
                time.sleep(0.1)
            code = finish_run(driver)
            if result.timed_out:
                break
            if code == EXIT_DONE:
                break
            if code == EXIT_NONDETERMINISTIC:
                result.nondeterministic = True
                break
    finally:
        trial.release_all()
        trial.wait_faults(timeout=60)
        if trial.driver is not None:
            trial.driver.kill()
    result.notes += trial.wake_zombies()
    trial.settle_rules()
    trial.attribute_failures()
    failures = [e for e in trial.seen if e.get("name") == "query_failed"]
    result.errors = [e.get("error", "?") for e in failures]
    result.failures = [_failure_summary(str(e.get("message", ""))) for e in failures]
    result.errors += [
        f"stop:{e.get('error')}" for e in trial.seen if e.get("name") == "stop_raised"
    ]
    try:
        result.notes += ensure_running(infra)
        _check(result, target)
        if not result.ok:
            target.save_evidence(work / "target-evidence.txt")
    except Exception as exc:
        result.outcome = f"CHECK-FAILED({exc!r})"
    result.duration = time.monotonic() - started
    return result


#: What Spark 4.2 says when it restarts a query whose first offset write was interrupted.
_SPARK_NOT_EMPTY = "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"


def clear_interrupted_offset_write(log: Path, checkpoint: Path) -> list[str]:
    """Remove what a query stopped during its very first offset write left, if Spark refused it.

    Spark writes ``offsets/<n>`` as a temporary file renamed into place; a stop in between leaves
    ``offsets/.0.<uuid>.tmp``, and Spark 4.2 then refuses every restart of the query ("should be
    empty on batch 0") although no batch was ever planned. Only temporary files of a batch whose
    offset file does not exist are removed, and only after that refusal.
    """
    try:
        refused = _SPARK_NOT_EMPTY in log.read_text(errors="replace")
    except FileNotFoundError:
        return []
    offsets = checkpoint / "offsets"
    if not refused or not offsets.is_dir():
        return []
    removed = []
    for tmp in sorted(offsets.glob(".*.tmp")):
        batch = tmp.name.split(".")[1]
        if batch.isdigit() and not (offsets / batch).exists():
            tmp.unlink()
            removed.append(f"offsets/{tmp.name}")
    return removed


def _check_dead_letters(result: TrialResult, letters: collections.Counter[tuple[int, str]]) -> int:
    """Hold the dead letters to the plan's poison keys; return how many poison keys have none.

    Every poison key once, with its poison's error class (:data:`BAD_ROW_CLASSES`), and nothing
    else: a second letter of a key is a duplicate, a letter of a good key or with another class
    is wrong.
    """
    poison = {k: BAD_ROW_CLASSES[kind] for k, kind in result.plan.bad_rows.items()}
    result.dead_letters = sum(letters.values())
    per_key: collections.Counter[int] = collections.Counter()
    by_class: collections.Counter[str] = collections.Counter()
    for (key, error_class), n in letters.items():
        if poison.get(key) == error_class:
            per_key[key] += n
            by_class[error_class] += n
        else:
            result.dead_letter_wrong += n
    result.dead_letter_duplicates = sum(n - 1 for n in per_key.values() if n > 1)
    result.dead_letters_by_class = dict(sorted(by_class.items()))
    return sum(1 for k in poison if per_key[k] == 0)


def _check(result: TrialResult, target: Target) -> None:
    """Compare the target with the expected output; classify the trial."""
    plan = result.plan
    expected = expected_output(plan)
    counts = target.counts()
    result.checked = len(expected)
    present = collections.Counter({k: n for (k, v), n in counts.items() if expected.get(k) == v})
    result.duplicates = sum(n - 1 for n in present.values() if n > 1)
    result.wrong = sum(n for (k, v), n in counts.items() if expected.get(k) != v)
    missing = sum(1 for k in expected if present.get(k, 0) == 0)
    result.leftovers = target.leftovers()
    allowed_stop = plan.nondeterministic and not plan.staging
    letters_missing = _check_dead_letters(result, target.dead_letters()) if plan.bad_rows else 0
    if result.nondeterministic and allowed_stop:
        result.unwritten = missing + letters_missing  # the query stopped before: not lost
    else:
        result.losses = missing
        result.dead_letter_losses = letters_missing
    problems = []
    if result.duplicates:
        problems.append(f"DUPLICATES({result.duplicates})")
    if result.losses:
        problems.append(f"LOSSES({result.losses})")
    if result.wrong:
        problems.append(f"WRONG({result.wrong})")
    if result.dead_letter_duplicates:
        problems.append(f"DEAD-LETTER-DUPLICATES({result.dead_letter_duplicates})")
    if result.dead_letter_losses:
        problems.append(f"DEAD-LETTER-LOSSES({result.dead_letter_losses})")
    if result.dead_letter_wrong:
        problems.append(f"DEAD-LETTER-WRONG({result.dead_letter_wrong})")
    if result.leftovers:
        problems.append(f"LEFTOVERS({len(result.leftovers)})")
    if result.nondeterministic and not allowed_stop:
        problems.append("NONDETERMINISTIC-NOT-ALLOWED")
    if result.input_problem:
        problems.append("INPUT-PROBLEM")  # the harness's production: the check proves nothing
    if result.timed_out:
        problems.append("TIMEOUT")
    elif plan.realtime and not result.nondeterministic:
        if not result.finished:
            problems.append("UNFINISHED")  # no clean stop after every row was visible
    elif not result.exit_codes or result.exit_codes[-1] not in (EXIT_DONE, EXIT_NONDETERMINISTIC):
        problems.append("UNFINISHED")  # every run failed: gave up after max_runs
    if problems:
        result.outcome = "+".join(problems)
    elif result.nondeterministic:
        result.outcome = "stopped-as-designed"
    else:
        result.outcome = "exact"


# ------------------------------------------------------------------------------------ summary


def _partition_rows(results: Sequence[TrialResult]) -> list[tuple[str, str]]:
    """The partition-specific rows of the summary: the cuts and the query failures they caused."""
    cuts = [f for r in results for f in r.plan.faults if f.kind in PARTITION_SECONDS]
    if not cuts:
        return []
    with_cut = [r for r in results if r.plan.short_bounds]
    bound = sum(len(r.bound_errors) for r in with_cut)
    rows = [
        (
            "steps failed on a network bound",
            f"{bound} in {sum(1 for r in with_cut if r.bound_errors)} of the {len(with_cut)} "
            f"trials with a partition (and {sum(len(r.bound_errors) for r in results) - bound} "
            "in the others)",
        )
    ]
    placed = [f for f in cuts if f.evidence]
    unproven = [f for f in placed if not f.fired]
    if unproven:
        idle = sum(1 for f in unproven if f.evidence.get("ns_rx_packets", 0) == 0)
        rows.append(
            (
                "partitions placed, not proven",
                f"{len(unproven)} (nothing sent during the cut: {idle}, "
                f"frames got through: {len(unproven) - idle})",
            )
        )
    for kind in PARTITION_KINDS:
        fired = [f for f in cuts if f.kind == kind and f.fired]
        seconds = [f.evidence["healed_at"] - f.evidence["cut_at"] for f in fired]
        length = f" ({min(seconds):.1f}-{max(seconds):.1f} s)" if seconds else ""
        failures = [q for f in fired for q in f.evidence.get("query_failures", [])]
        network = [q for q in failures if q.get("network_bound")]
        alone = [q for q in network if not q.get("other_server_fault")]
        restartable = sum(1 for q in alone if q.get("restartable"))
        rows.append((f"{kind} fired", f"{len(fired)}{length}"))
        rows.append(
            (
                "  queries failed on a network bound",
                f"{len(alone)} ({restartable} with a restartable twophase error); "
                f"{len(network) - len(alone)} more with a restart or freeze of the server in "
                f"the window; {len(failures) - len(network)} other failures",
            )
        )
    return rows


def _ha_rows(results: Sequence[TrialResult]) -> list[tuple[str, str]]:
    """The rows of the replicated targets' faults: what each failover and restart proved."""
    rows = []
    failovers = [f for r in results for f in r.plan.faults if f.kind == "failover" and f.evidence]
    if failovers:
        synchronous = sum(
            1
            for f in failovers
            if f.evidence.get("sync_state") == "sync"
            or f.evidence.get("semi_sync", {}).get("status") == "ON"
        )
        seconds = [f.evidence["promoted_at"] - f.evidence["down_at"] for f in failovers]
        carried = sum(f.evidence.get("prepared_on_promoted", 0) for f in failovers)
        rows.append(
            (
                "failovers",
                f"{len(failovers)}: standby synchronous at the crash in {synchronous}, promoted "
                f"in {min(seconds):.1f}-{max(seconds):.1f} s, {carried} prepared transactions "
                "of the trials on the promoted servers",
            )
        )
    restarts = [
        f for r in results for f in r.plan.faults if f.kind == "broker_restart" and f.evidence
    ]
    if restarts:
        targets = collections.Counter(
            f"{f.evidence['target']}{'' if f.evidence['target'] == 'rolling' else ':'}"
            f"{'' if f.evidence['target'] == 'rolling' else f.evidence['mode']}"
            for f in restarts
        )
        outages = [b for f in restarts for b in f.evidence["brokers"]]
        met = sum(1 for b in outages if b["events_meanwhile"] > 0)
        rows.append(
            (
                "broker restarts",
                ", ".join(f"{k}: {v}" for k, v in sorted(targets.items()))
                + f"; {len(outages)} broker outages, {met} with the query at work during them",
            )
        )
    return rows


def _realtime_rows(results: Sequence[TrialResult]) -> list[tuple[str, str]]:
    """The rows of the real-time trials: epochs, rows produced, how they ended."""
    rt = [r for r in results if r.plan.realtime]
    if not rt:
        return []
    epochs = [r.plan.epoch_seconds for r in rt]
    produced = sum(r.plan.batches * r.plan.rows for r in rt)
    visible = [r.visible_after for r in rt if r.visible_after is not None]
    seen = f"{min(visible):.1f}-{max(visible):.1f} s" if visible else "-"
    faults = [f for r in rt for f in r.plan.faults]
    at_hook = [f for f in faults if "after" in f.params]
    return [
        (
            "real-time trials",
            f"{len(rt)} (epochs of {min(epochs)}-{max(epochs)} s), {produced} rows produced "
            "while their queries ran",
        ),
        (
            "  faults at a hook / at a time, fired",
            f"{sum(f.fired for f in at_hook)}/{len(at_hook)}, "
            f"{sum(f.fired for f in faults) - sum(f.fired for f in at_hook)}/"
            f"{len(faults) - len(at_hook)}",
        ),
        (
            "  every row but a partition's last visible after the last was produced",
            f"{seen} (in {len(visible)} trials)",
        ),
        (
            "  rows the clean stop left to the final run",
            ", ".join(str(r.left_by_stop) for r in rt if r.left_by_stop is not None) or "-",
        ),
        (
            "  clean stop, then a final run stopped cleanly",
            f"{sum(r.finished for r in rt)} of {len(rt)}",
        ),
    ]


def _bad_rows_rows(results: Sequence[TrialResult]) -> list[tuple[str, str]]:
    """The rows of the trials with bad rows: dead letters expected, found, and what was wrong."""
    bad = [r for r in results if r.plan.bad_rows]
    if not bad:
        return []
    expected = sum(len(r.plan.bad_rows) for r in bad)
    wanted = collections.Counter(
        BAD_ROW_CLASSES[kind] for r in bad for kind in r.plan.bad_rows.values()
    )
    found: collections.Counter[str] = collections.Counter()
    for r in bad:
        found.update(r.dead_letters_by_class)
    by_class = ", ".join(f"{c}: {found[c]}/{n}" for c, n in sorted(wanted.items()))
    return [
        (
            "dead letters found / poison keys",
            f"{sum(r.dead_letters for r in bad)} / {expected} in {len(bad)} trials with bad rows "
            f"(by class, found/expected: {by_class})",
        ),
        (
            "  duplicates, losses, wrong",
            f"{sum(r.dead_letter_duplicates for r in bad)}, "
            f"{sum(r.dead_letter_losses for r in bad)}, {sum(r.dead_letter_wrong for r in bad)}",
        ),
    ]


def summarize(
    results: Sequence[TrialResult], seed: str, wall: float, *, partitions: str | None = None
) -> tuple[str, bool]:
    """Return the summary table and whether every trial passed.

    ``partitions`` is a row on the partitions of the run (e.g. why none were drawn).
    """
    scheduled: collections.Counter[str] = collections.Counter()
    fired: collections.Counter[str] = collections.Counter()
    for r in results:
        for f in r.plan.faults:
            if f.kind in FAULT_KINDS:
                scheduled[f.kind] += 1
                fired[f.kind] += f.fired
    outcomes = collections.Counter(r.outcome for r in results)
    nondet = collections.Counter(
        f"{r.plan.pipeline}{' staging' if r.plan.staging else ''}"
        for r in results
        if r.nondeterministic
    )
    errors: collections.Counter[str] = collections.Counter()
    findings: collections.Counter[str] = collections.Counter()
    for r in results:
        errors.update(r.errors)
        findings.update(set(r.log_findings))
    rows = [
        ("seed", seed),
        ("trials", str(len(results))),
        ("wall time", f"{wall / 60:.1f} min"),
        ("outcomes", ", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))),
        (
            "sinks",
            ", ".join(
                f"{k}: {v}"
                for k, v in sorted(collections.Counter(r.plan.sink for r in results).items())
            ),
        ),
        (
            "pipelines",
            ", ".join(
                f"{k}: {v}"
                for k, v in sorted(collections.Counter(r.plan.pipeline for r in results).items())
            ),
        ),
        ("faults fired / scheduled", f"{sum(fired.values())} / {sum(scheduled.values())}"),
    ]
    rows += [(f"  {k}", f"{fired[k]} / {scheduled[k]}") for k in FAULT_KINDS if scheduled[k]]
    rows += [
        ("driver runs", str(sum(r.runs for r in results))),
        ("records checked", str(sum(r.checked for r in results))),
        ("duplicates", str(sum(r.duplicates for r in results))),
        ("losses", str(sum(r.losses for r in results))),
        ("wrong values", str(sum(r.wrong for r in results))),
        ("leftovers", str(sum(len(r.leftovers) for r in results))),
        *_bad_rows_rows(results),
        ("timeouts", str(sum(r.timed_out for r in results))),
        (
            "nondeterminism errors",
            f"{sum(nondet.values())}"
            + (f" ({', '.join(f'{k}: {v}' for k, v in sorted(nondet.items()))})" if nondet else ""),
        ),
        (
            "query failures seen (restarted)",
            ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())) or "none",
        ),
        (
            "trials whose driver logs show",
            ", ".join(f"{k}: {v}" for k, v in sorted(findings.items())) or "nothing notable",
        ),
    ]
    failing = collections.Counter(f for r in results for f in r.failing_findings)
    rows.append(
        (
            "findings that fail the run",
            ", ".join(f"{k}: {v}" for k, v in sorted(failing.items())) or "none",
        )
    )
    cleared = [r for r in results if r.spark_tmp_cleared]
    if cleared:
        rows.append(
            (
                "Spark refused its own checkpoint",
                f"{len(cleared)} trial(s) (trial {', '.join(str(r.plan.index) for r in cleared)}): "
                "a stop during the first offset write; its temporary file removed "
                "(docs/operations.md)",
            )
        )
    if partitions:
        rows.append(("partitions", partitions))
    rows += _partition_rows(results)
    rows += _ha_rows(results)
    rows += _realtime_rows(results)
    width = max(len(k) for k, _ in rows)
    header = f"| {'what'.ljust(width)} | count |\n|{'-' * (width + 2)}|-------|\n"
    table = header + "\n".join(f"| {k.ljust(width)} | {v} |" for k, v in rows)
    ok = all(r.ok for r in results)
    return table, ok


def run_trials(
    seed: str,
    trials: int,
    infra: Infra,
    work: Path,
    *,
    sinks: Sequence[str] = DEFAULT_SINKS,
    first: int = 0,
    timeout: float = 300.0,
    keep: bool = False,
    in_process_restarts: bool = True,
    out: Callable[[str], None] = print,
    results_path: Path | None = None,
    max_seconds: float | None = None,
    bad_rows: float = BAD_ROWS_CHANCE,
) -> list[TrialResult]:
    """Run trials ``first .. first + trials - 1`` of ``seed``; print one line per trial.

    With ``max_seconds``, no trial starts after that many seconds: fewer trials may run.
    Partitions are drawn when ``infra`` can make them (:attr:`Infra.partitions`); bad rows
    (:func:`draw_bad_rows`) with probability ``bad_rows``.
    """
    results = []
    started = time.monotonic()
    for index in range(first, first + trials):
        if max_seconds is not None and time.monotonic() - started > max_seconds:
            out(
                f"chaos: time budget of {max_seconds / 60:.0f} min used up "
                f"after {len(results)} trials"
            )
            break
        plan = draw_plan(seed, index, sinks, network_partitions=infra.partitions, bad_rows=bad_rows)
        trial_dir = work / f"trial-{index:04d}"
        try:
            result = run_trial(
                plan, infra, trial_dir, timeout=timeout, in_process_restarts=in_process_restarts
            )
        except Exception as exc:  # the harness itself failed: report it as a failed trial
            result = TrialResult(plan, outcome=f"HARNESS-ERROR({exc!r})", work_dir=str(trial_dir))
        results.append(result)
        out(result.line())
        if not result.ok:
            kept = result.leftovers + result.notes + result.failing_findings
            out(f"    kept {trial_dir} ({'; '.join(kept)})")
        elif not keep:
            shutil.rmtree(trial_dir, ignore_errors=True)
        if results_path is not None:
            with results_path.open("a") as fh:
                fh.write(json.dumps(result.to_json(), default=str) + "\n")
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m tests.chaos --trials N --seed S [--sinks ...]``."""
    parser = argparse.ArgumentParser(prog="scripts/chaos.sh", description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=20, help="number of trials (default 20)")
    parser.add_argument("--seed", default=None, help="run seed (default: a random one, printed)")
    parser.add_argument("--first", type=int, default=0, help="index of the first trial (default 0)")
    parser.add_argument(
        "--sinks",
        default=",".join(DEFAULT_SINKS),
        help=f"comma-separated subset of {','.join(SINKS)} (default: {','.join(DEFAULT_SINKS)}, "
        "so that a seed draws what it drew before the MariaDB and the replicated -ha sinks; "
        "pg-A and pg-B, former names, still work)",
    )
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per trial")
    parser.add_argument(
        "--max-minutes",
        type=float,
        default=None,
        help="start no trial after this many minutes (fewer trials than asked may run)",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="where trials run")
    parser.add_argument("--keep", action="store_true", help="keep the directories of passed trials")
    parser.add_argument(
        "--no-in-process-restart",
        action="store_true",
        help="after query.stop(), always start a new driver process (the draw is unchanged)",
    )
    parser.add_argument(
        "--no-partitions",
        action="store_true",
        help="draw no network partitions and run the servers outside network namespaces (the "
        "other faults of each trial are drawn the same)",
    )
    parser.add_argument(
        "--bad-rows",
        choices=tuple(BAD_ROWS_MODES),
        default="drawn",
        help="poison rows for the target, set aside as dead letters: in one trial in three "
        "(drawn, the default), in every trial (always: a trial drawn with them has the same "
        "ones), or none (never); the other draws of each trial are the same",
    )
    parser.add_argument("--plan-only", action="store_true", help="print the drawn plans and exit")
    args = parser.parse_args(argv)
    sinks = [s.strip() for s in args.sinks.split(",") if s.strip()]
    sinks = list(dict.fromkeys(FORMER_SINK_NAMES.get(s, s) for s in sinks))
    unknown = sorted(set(sinks) - set(SINKS))
    if unknown or not sinks:
        parser.error(f"--sinks: unknown {unknown}; choose from {', '.join(SINKS)}")
    seed = args.seed if args.seed is not None else str(random.SystemRandom().randrange(10**6))
    print(
        f"chaos: seed {seed}, trials {args.first}..{args.first + args.trials - 1}, "
        f"sinks {','.join(sinks)}",
        flush=True,
    )
    if args.plan_only:
        no_partitions = "turned off" if args.no_partitions else partition_support(sinks)
        print(
            "chaos: "
            + (f"partitions not drawn: {no_partitions}" if no_partitions else "partitions drawn"),
            flush=True,
        )
        for index in range(args.first, args.first + args.trials):
            plan = draw_plan(
                seed,
                index,
                sinks,
                network_partitions=not no_partitions,
                bad_rows=BAD_ROWS_MODES[args.bad_rows],
            )
            print(
                f"trial {index:3d} {plan.describe()} faults=["
                + " ".join(f.describe()[:-1] for f in plan.faults)
                + "]"
            )
        return 0
    # SIGTERM ends the run like Ctrl-C: the running trial's driver is killed on the way out.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix=f"twophase-chaos-{seed}-"))
    work.mkdir(parents=True, exist_ok=True)
    (work / "results.jsonl").unlink(missing_ok=True)  # this run's trials only
    print(f"chaos: work directory {work} (results.jsonl, failed trials' logs)", flush=True)
    started = time.monotonic()
    with own_infra(sinks, work / "server-logs", partitions=not args.no_partitions) as infra:
        partitions = "drawn" if infra.partitions else f"not drawn: {infra.no_partitions}"
        where = ", ".join(f"{n.name} ({n.address})" for n in infra.namespaces.values())
        print(
            f"chaos: partitions {partitions}"
            + (f"; servers in network namespaces {where}" if where else ""),
            flush=True,
        )
        results = run_trials(
            seed,
            args.trials,
            infra,
            work,
            sinks=sinks,
            first=args.first,
            timeout=args.timeout,
            keep=args.keep,
            in_process_restarts=not args.no_in_process_restart,
            out=lambda line: print(line, flush=True),
            results_path=work / "results.jsonl",
            max_seconds=None if args.max_minutes is None else args.max_minutes * 60,
            bad_rows=BAD_ROWS_MODES[args.bad_rows],
        )
    table, ok = summarize(results, seed, time.monotonic() - started, partitions=partitions)
    if len(results) < args.trials:
        print(f"\nchaos: {len(results)} of the {args.trials} trials asked for ran", flush=True)
    print("\n" + table, flush=True)
    print("\nchaos: " + ("PASSED" if ok else "FAILED"), flush=True)
    return 0 if ok else 1

"""Comparison "recovery": a restarted driver's work for 10, 100 and 1,000 in-doubt transactions.

No Spark: the sink runs through the production coordinator in ``twophase.testing.LocalRunner``
against the real servers, with the coordinator log fsync'd as on a local checkpoint. A batch of N
one-row partitions is started and the driver "crashes" (``CrashAt``) at a protocol step; the runner
then restarts (a fresh copy of the sink and a new coordinator over the same log) and what is timed
is ``coordinator.start(sink)``: the sink's ``open()``, loading and claiming the log, and recovery.
Spark's start-up and the replayed batch are not included.

* ``JDBC coordinated abort``  -- crash after phase 1 (N prepared transactions, no decision):
  recovery lists ``pg_prepared_xacts`` and rolls back every one (``ROLLBACK PREPARED``).
* ``JDBC coordinated commit`` -- crash right after the decision was recorded: recovery commits the
  N prepared transactions the decision names (``COMMIT PREPARED``).
* ``Kafka fence``              -- the intent of an N-partition batch is recorded and N
  transactions are left open on the broker by producers with the slots' ``transactional.id`` (as
  executors that died mid-write leave them): recovery fences every slot (``init_transactions``),
  which aborts them. Checked: the ``read_committed`` end offsets (last stable offsets) reach the
  high-water marks.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
from bench_common import Comparison, Env, log

NAME = "recovery"
TITLE = "Recovery work after a driver crash"
GOAL_S = 1.0
GOAL_AT = 100
PG_SCHEMA = pa.schema([("id", pa.int64()), ("n", pa.int32()), ("s", pa.string())])
TABLE = "rec_target"


def _count_prepared(env: Env, identity: str) -> int:
    rows = env.sql(
        f"SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE '%{identity}%'", fetch=True
    )
    return int(rows[0][0])


def jdbc_once(env: Env, n: int, step: str) -> float:
    """Leave N prepared transactions (``step``: phase1_done or decided); time the recovery."""
    from twophase.connectors.jdbc import postgres_sink
    from twophase.testing import LocalRunner, SimulatedCrash

    name = f"rec-{uuid.uuid4().hex[:8]}"
    sink = postgres_sink(
        name, table=TABLE, dsn=env.pg.dsn, protocol="coordinated", max_partitions=n
    )
    runner = LocalRunner(sink, env.work / "rec" / name, fsync=True)
    runner.crash_at(step, batch_id=0)
    parts = [[{"id": i, "n": i, "s": "x"}] for i in range(n)]
    try:
        runner.run_batch(0, parts, schema=PG_SCHEMA)
        raise RuntimeError("the simulated crash did not happen")
    except SimulatedCrash:
        pass
    identity = runner.identity.token
    before = _count_prepared(env, identity)
    if before != n:
        raise RuntimeError(f"{before} prepared transactions, expected {n}")
    runner.restart()
    started = time.perf_counter()
    runner.coordinator.start(runner.sink, 0)
    seconds = time.perf_counter() - started
    after = _count_prepared(env, identity)
    if after:
        raise RuntimeError(f"{after} prepared transactions left after recovery")
    runner.close()
    return seconds


def _offsets(bootstrap: str, topic: str, committed: bool) -> list[int]:
    from confluent_kafka import IsolationLevel, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    admin = AdminClient({"bootstrap.servers": bootstrap})
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    futures = admin.list_offsets(
        {TopicPartition(topic, p): OffsetSpec.latest() for p in range(4)}, isolation_level=level
    )
    return [f.result().offset for f in futures.values()]


def _leave_open(bootstrap: str, topic: str, transactional_id: str, slot: int) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 900_000,
        }
    )
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"in doubt", str(slot).encode(), partition=slot % 4)
    if producer.flush(60):
        raise RuntimeError("could not write the in-doubt record")
    # Dropped without commit or abort, as by a killed executor: the transaction stays open.


def kafka_once(env: Env, n: int) -> float:
    """Leave N open transactions on the slots of an unfinished batch; time the recovery."""
    from twophase.connectors.kafka import KafkaSink
    from twophase.testing import LocalRunner, SimulatedCrash

    bootstrap = env.kafka.bootstrap_servers
    name = f"rec-{uuid.uuid4().hex[:8]}"
    topic = f"{name}-out"
    env.kafka.create_topic(topic, partitions=4)
    sink = KafkaSink(name, bootstrap_servers=bootstrap, topic=topic)
    runner = LocalRunner(sink, env.work / "rec" / name, fsync=True)
    runner.crash_at("intent_recorded", batch_id=0)
    parts = [[{"key": str(i), "value": "x"}] for i in range(n)]
    try:
        runner.run_batch(0, parts)
        raise RuntimeError("the simulated crash did not happen")
    except SimulatedCrash:
        pass
    prefix = sink.options.transactional_id_prefix
    identity = runner.identity.token
    with ThreadPoolExecutor(8) as pool:
        list(
            pool.map(
                lambda slot: _leave_open(bootstrap, topic, f"{prefix}{identity}-{slot}", slot),
                range(n),
            )
        )
    if _offsets(bootstrap, topic, True) == _offsets(bootstrap, topic, False):
        raise RuntimeError("no open transaction holds back read_committed consumers")
    runner.restart()
    started = time.perf_counter()
    runner.coordinator.start(runner.sink, 0)
    seconds = time.perf_counter() - started
    if _offsets(bootstrap, topic, True) != _offsets(bootstrap, topic, False):
        raise RuntimeError("open transactions are left after recovery")
    runner.close()
    return seconds


CASES: dict[str, Any] = {
    "JDBC coordinated abort": lambda env, n: jdbc_once(env, n, "phase1_done"),
    "JDBC coordinated commit": lambda env, n: jdbc_once(env, n, "decided"),
    "Kafka fence": kafka_once,
}


#: A case is repeated while its repetitions took less than this in all, and a larger N is skipped
#: when the time per transaction measured so far projects it beyond SKIP_ABOVE_S (Kafka's fencing
#: runs at seconds per transaction: 1,000 would take many minutes).
REPEAT_BUDGET_S = 60.0
SKIP_ABOVE_S = 180.0


def run(env: Env, quick: bool) -> Comparison:
    logging.getLogger("twophase").setLevel(logging.WARNING)
    counts = {
        "JDBC coordinated abort": [10, 100],
        "JDBC coordinated commit": [10, 100],
        "Kafka fence": [10],
    }
    if not quick:
        counts = {case: [10, 100, 1000] for case in CASES}
    reps = env.reps if quick else max(env.reps, 3)
    cmp = Comparison(NAME, TITLE, quick)
    cmp.params = {
        "in_doubt": counts,
        "repetitions": f"up to {reps}, while under {REPEAT_BUDGET_S:.0f} s in all",
        "timed": "coordinator.start(sink)",
    }
    env.sql(f"DROP TABLE IF EXISTS {TABLE}", f"CREATE TABLE {TABLE} (id bigint, n integer, s text)")
    series: dict[str, dict[int, float]] = {}
    for case, fn in CASES.items():
        series[case] = {}
        per_txn = 0.0
        for n in counts[case]:
            if per_txn * n > SKIP_ABOVE_S:
                note = (
                    f"{case}: {n} in doubt not run: at {per_txn:.2f} s per transaction it would "
                    f"take about {per_txn * n / 60:.0f} minutes."
                )
                cmp.notes.append(note)
                log(f"  recovery {note}")
                continue
            seconds: list[float] = []
            while len(seconds) < reps and sum(seconds) < REPEAT_BUDGET_S:
                seconds.append(fn(env, n))
                log(f"  recovery {case:<23} n={n:<5} rep {len(seconds)}: {seconds[-1]:7.3f} s")
            entry = cmp.measure(case, f"{n} in doubt", "s", seconds, in_doubt=n)
            per_txn = entry["median"] / n
            series[case][n] = entry["median"]
            cmp.limit(
                f"{case}: {n} in doubt",
                entry["median"],
                GOAL_S if n == GOAL_AT else None,
                "<=",
                "s",
                group=case,
                in_doubt=n,
                per_transaction_ms=per_txn * 1000,
                spread=[entry["min"], entry["max"]],
            )
    cmp.series["seconds"] = series
    env.sql(f"DROP TABLE IF EXISTS {TABLE}")
    return cmp

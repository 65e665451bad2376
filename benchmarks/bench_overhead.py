"""Comparison "overhead": what exactly-once adds to a small micro-batch.

A streaming query over Spark's ``rate-micro-batch`` source (exactly ``rows`` rows per micro-batch
in ``partitions`` partitions; batches run back to back) writes every batch through one of

* ``plain postgres`` -- a non-transactional ``foreachBatch``: ``mapInArrow`` over the batch, each
  task INSERTs its rows with ``psycopg2.extras.execute_values`` on a connection kept by its Python
  worker and commits (at-least-once; what a user writes by hand);
* ``twophase coordinated`` / ``twophase markers`` -- ``postgres_sink(protocol=...)`` of that
  protocol, append;
* ``plain kafka`` -- the same ``mapInArrow`` shape with a plain, non-transactional librdkafka
  producer kept by the worker (the sink's settings: lz4, ``acks=all``, ``linger.ms=20``;
  ``flush()`` at the end of the task);
* ``twophase kafka`` -- ``KafkaSink`` with its defaults.

The time of a batch is the wall time of the ``foreachBatch`` call on the driver (the write and,
for twophase, the protocol); the batch's planning, Spark's offset and commit logs are the same for
all and not counted. The first batches of every query are warm-up (the sink's ``open()``, the
coordinator's claim and recovery, new producers) and not counted. Added latency = median batch
time of the sink - median of the plain ``foreachBatch`` of the same target, measured in the same
rounds. The sink's own metrics (``twophase.batch_metrics``) split each batch into phase 1 (the
Spark job: write and prepare, or write and commit with the marker), decision (the coordinator
log's decision or intent record), phase 2 (commits from the driver, or the committed record) and
the rest (the log's epoch checks, schema checks, compaction, planning round trips).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from bench_common import BatchTimer, Comparison, Env, log, run_batches, summary

NAME = "overhead"
TITLE = "Protocol overhead per micro-batch"
GOAL_MS = 50.0
PG_KINDS = ("plain postgres", "twophase coordinated", "twophase markers")
KAFKA_KINDS = ("plain kafka", "twophase kafka")
KINDS = PG_KINDS + KAFKA_KINDS
BASELINE = {"twophase coordinated": "plain postgres", "twophase markers": "plain postgres"}
BASELINE["twophase kafka"] = "plain kafka"
PG_DDL = "id bigint, n integer, s text"
KAFKA_PRODUCER = {
    "acks": "all",
    "compression.type": "lz4",
    "linger.ms": 20,
    "partitioner": "murmur2_random",
}

# ------------------------------------------------------------------ executor side (Python workers)
_CONNECTIONS: dict[str, Any] = {}
_PRODUCERS: dict[str, Any] = {}
_RESULT = pa.schema([pa.field("rows", pa.int64())])


class PgInsert:
    """mapInArrow function: INSERT the task's rows with execute_values, commit."""

    def __init__(self, dsn: str, table: str) -> None:
        self.dsn = dsn
        self.table = table

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import psycopg2
        from psycopg2.extras import execute_values

        conn = _CONNECTIONS.get(self.dsn)
        if conn is None or conn.closed:
            conn = _CONNECTIONS[self.dsn] = psycopg2.connect(self.dsn)
        rows = 0
        with conn.cursor() as cur:
            for batch in batches:
                if batch.num_rows:
                    values = list(zip(*(col.to_pylist() for col in batch.columns), strict=True))
                    execute_values(
                        cur,
                        f"INSERT INTO {self.table} (id, n, s) VALUES %s",
                        values,
                        page_size=1000,
                    )
                    rows += batch.num_rows
        conn.commit()
        yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=_RESULT)


class KafkaProduce:
    """mapInArrow function: produce the task's records with a plain producer, flush."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from confluent_kafka import Producer

        producer = _PRODUCERS.get(self.bootstrap)
        if producer is None:
            producer = _PRODUCERS[self.bootstrap] = Producer(
                {"bootstrap.servers": self.bootstrap, **KAFKA_PRODUCER}
            )
        errors: list[Any] = []

        def delivered(err: Any, _msg: Any) -> None:
            if err is not None:
                errors.append(err)

        rows = 0
        for batch in batches:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            for key, value in zip(keys, values, strict=True):
                while True:
                    try:
                        producer.produce(self.topic, value, key, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
            rows += batch.num_rows
        if producer.flush(60) or errors:
            raise RuntimeError(f"plain producer: {errors[:3] or 'flush timed out'}")
        yield pa.RecordBatch.from_pylist([{"rows": rows}], schema=_RESULT)


# ------------------------------------------------------------------ driver side
class Targets:
    """The tables and topics the small batches go to (created once per comparison)."""

    def __init__(self, env: Env, tag: str) -> None:
        self.env = env
        self.tables = {k: f"ovh_{tag}_{k.split()[-1].lower()}" for k in PG_KINDS}
        for table in self.tables.values():
            env.sql(f"DROP TABLE IF EXISTS {table}", f"CREATE TABLE {table} ({PG_DDL})")
        self.topics = {k: f"ovh-{tag}-{k.split()[0]}" for k in KAFKA_KINDS}
        for topic in self.topics.values():
            env.kafka.create_topic(topic, partitions=4)

    def drop(self) -> None:
        self.env.sql(*(f"DROP TABLE IF EXISTS {t}" for t in self.tables.values()))


def _frame(env: Env, kind: str, rows: int, partitions: int) -> Any:
    df = (
        env.spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", partitions)
        .load()
    )
    if kind in PG_KINDS:
        return df.selectExpr(
            "value AS id",
            "CAST(value % 1000003 AS INT) AS n",
            "sha2(CAST(value AS STRING), 256) AS s",
        )
    return df.selectExpr(
        "CAST(value AS STRING) AS key",
        "substring(repeat(sha2(CAST(value AS STRING), 256), 2), 1, 100) AS value",
    )


def measure_stream(
    env: Env, targets: Targets, kind: str, rows: int, partitions: int, warmup: int, batches: int
) -> dict[str, Any]:
    """Run one query of ``warmup + batches`` micro-batches; per-batch times and phases."""
    import twophase

    sink: Any = None
    if kind == "plain postgres":
        fn = PgInsert(env.pg.dsn, targets.tables[kind])

        def write(df: Any, _batch_id: int) -> None:
            df.mapInArrow(fn, "rows long").collect()

    elif kind == "plain kafka":
        produce = KafkaProduce(env.kafka.bootstrap_servers, targets.topics[kind])

        def write(df: Any, _batch_id: int) -> None:
            df.mapInArrow(produce, "rows long").collect()

    elif kind == "twophase kafka":
        from twophase.connectors.kafka import KafkaSink

        sink = KafkaSink(
            "ovh-kafka", bootstrap_servers=env.kafka.bootstrap_servers, topic=targets.topics[kind]
        )
        write = sink
    else:
        from twophase.connectors.jdbc import postgres_sink

        sink = postgres_sink(
            f"ovh-{kind.split()[-1]}",
            table=targets.tables[kind],
            dsn=env.pg.dsn,
            protocol=kind.split()[-1],
            max_partitions=max(partitions, 4),
        )
        write = sink
    timer = BatchTimer(write, warmup + batches)
    writer = (
        _frame(env, kind, rows, partitions)
        .writeStream.foreachBatch(timer)
        .option("checkpointLocation", env.checkpoint())
    )
    times = run_batches(writer, timer)[warmup:]
    out: dict[str, Any] = {"ms": [t * 1000 for _, t in times]}
    if sink is not None:
        metrics = {m.batch_id: m for m in twophase.batch_metrics(sink)}
        phases: dict[str, list[float]] = {"phase1": [], "decision": [], "phase2": [], "other": []}
        for batch_id, seconds in times:
            m = metrics.get(batch_id)
            if m is None:
                continue
            phases["phase1"].append(m.phase1_seconds * 1000)
            phases["decision"].append(m.decision_seconds * 1000)
            phases["phase2"].append(m.phase2_seconds * 1000)
            phases["other"].append(
                (seconds - m.phase1_seconds - m.decision_seconds - m.phase2_seconds) * 1000
            )
        out["phases"] = phases
    return out


def sweep(
    env: Env,
    cmp: Comparison,
    *,
    tag: str,
    label: str,
    points: list[tuple[int, int]],
    rounds: int,
    warmup: int,
    batches: int,
    goal: float | None,
) -> dict[str, Any]:
    """Measure every kind at every ``(rows, partitions)`` point; checks added latency."""
    logging.getLogger("twophase").setLevel(logging.WARNING)
    targets = Targets(env, tag)
    samples: dict[tuple[int, int], dict[str, list[list[float]]]] = {
        p: {k: [] for k in KINDS} for p in points
    }
    phases: dict[tuple[int, int], dict[str, dict[str, list[float]]]] = {
        p: {k: {} for k in KINDS} for p in points
    }
    try:
        for rnd in range(rounds):
            for point in points:
                rows, partitions = point
                for kind in KINDS:
                    result = measure_stream(env, targets, kind, rows, partitions, warmup, batches)
                    samples[point][kind].append(result["ms"])
                    for phase, values in result.get("phases", {}).items():
                        phases[point][kind].setdefault(phase, []).extend(values)
                    log(
                        f"  {tag} rows={rows:<5} partitions={partitions:<3} {kind:<20} "
                        f"round {rnd + 1}: median {statistics.median(result['ms']):7.1f} ms"
                    )
    finally:
        targets.drop()
    table: dict[str, Any] = {}
    for point in points:
        rows, partitions = point
        group = label.format(rows=rows, partitions=partitions)
        entries = {
            k: cmp.measure(
                group,
                k,
                "ms",
                [x for r in samples[point][k] for x in r],
                rows=rows,
                partitions=partitions,
            )
            for k in KINDS
        }
        row: dict[str, Any] = {}
        for kind, base in BASELINE.items():
            per_round = [
                statistics.median(c) - statistics.median(b)
                for c, b in zip(samples[point][kind], samples[point][base], strict=True)
            ]
            added = entries[kind]["median"] - entries[base]["median"]
            ph = {name: summary(v)["median"] for name, v in phases[point][kind].items()}
            row[kind] = {
                "total_ms": entries[kind]["median"],
                "baseline_ms": entries[base]["median"],
                "added_ms": added,
                "added_per_round_ms": per_round,
                "phases_ms": ph,
            }
            cmp.limit(
                f"{group}: {kind} added over {base}",
                added,
                goal,
                "<=",
                "ms",
                group=group,
                candidate=kind,
                baseline=base,
                spread=[min(per_round), max(per_round)],
            )
        table[group] = row
    return table


def run(env: Env, quick: bool) -> Comparison:
    cmp = Comparison(NAME, TITLE, quick)
    sizes = [1, 1000] if quick else [1, 10, 100, 1000]
    rounds = 1 if quick else max(env.reps - 1, 2)
    warmup, batches = (2, 3) if quick else (4, 12)
    cmp.params = {
        "rows_per_batch": sizes,
        "partitions": 4,
        "rounds": rounds,
        "warmup_batches": warmup,
        "measured_batches_per_round": batches,
        "kafka_producer": KAFKA_PRODUCER,
        "checkpoint": "local file system",
    }
    cmp.series["breakdown"] = sweep(
        env,
        cmp,
        tag="size",
        label="{rows} rows",
        points=[(rows, 4) for rows in sizes],
        rounds=rounds,
        warmup=warmup,
        batches=batches,
        goal=GOAL_MS,
    )
    return cmp

"""Comparison "scaling": cost vs partitions per batch, vs batches already run, vs batch size.

* **Partitions per batch** (2 to 64): the small-batch measurement of comparison "overhead" (1,000
  rows per micro-batch, Spark ``rate-micro-batch`` source) with 2..64 partitions: every non-empty
  partition is one transaction, so the protocol's cost per batch grows with them. Added latency
  over the plain ``foreachBatch`` of the same target, per sink.
* **Batches already run**: thousands of tiny batches (one row in each of 2 partitions) through the
  production coordinator (``twophase.testing.LocalRunner``, no Spark, log fsync'd) against the real
  PostgreSQL, both protocols: the time per batch must stay flat while the coordinator log and
  the marker table see thousands of batches (both are compacted: the log keeps 100 committed
  batches, the marker table 100 batches per identity). Checked: median of the last tenth of the
  batches / median of the first tenth (after 150 batches: from batch 100 on the log compacts
  after every batch, the steady state).
* **Memory of the Python workers**: ~1 GB of 1 KB rows written through Spark (``rate-micro-batch``,
  2 partitions) in micro-batches of different sizes, through the JDBC sink (the coordinated
  protocol) and ``KafkaSink``; the peak RSS of the PySpark workers is sampled every 50 ms. It must
  not grow with the batch size (the sinks stream Arrow record batches). Checked: peak at the
  largest batch / peak at the smallest.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

import numpy as np
from bench_common import BatchTimer, Comparison, Env, log, run_batches, sample_worker_rss
from bench_overhead import BASELINE, sweep

NAME = "scaling"
TITLE = "How the cost grows"
GOAL_FLAT = 1.2
GOAL_RSS = 1.25


# ------------------------------------------------------------------ partitions
def partitions_part(env: Env, cmp: Comparison, quick: bool) -> None:
    parts = [2, 4] if quick else [2, 8, 16, 32, 64]
    warmup, batches = (2, 3) if quick else (3, 8)
    table = sweep(
        env,
        cmp,
        tag=f"parts{uuid.uuid4().hex[:4]}",
        label="{partitions} partitions",
        points=[(1000, p) for p in parts],
        rounds=1,
        warmup=warmup,
        batches=batches,
        goal=None,
    )
    cmp.series["partitions"] = {"points": parts, "table": table}
    # Cost of one more partition (transaction), from a least-squares line through the points.
    slopes = {}
    for kind in BASELINE:
        added = [table[f"{p} partitions"][kind]["added_ms"] for p in parts]
        slope = float(np.polyfit(parts, added, 1)[0]) if len(parts) > 1 else float("nan")
        slopes[kind] = slope
        cmp.limit(
            f"partitions: {kind} added per extra partition",
            slope,
            None,
            "<=",
            "ms",
            group="partitions",
            candidate=kind,
        )
    cmp.series["partitions"]["slope_ms_per_partition"] = slopes


# ------------------------------------------------------------------ batches run
def batches_part(env: Env, cmp: Comparison, quick: bool) -> None:
    from twophase.connectors.jdbc import postgres_sink
    from twophase.testing import LocalRunner

    total = 200 if quick else 5000
    # From batch 100 on, the log compacts after every batch (it keeps 100 committed batches):
    # the steady state starts there.
    warmup = 50 if quick else 150
    table = "scale_batches"
    env.sql(f"DROP TABLE IF EXISTS {table}", f"CREATE TABLE {table} (id bigint, n integer, s text)")
    out: dict[str, Any] = {}
    for protocol in ("coordinated", "markers"):
        name = f"grow-{protocol}-{uuid.uuid4().hex[:6]}"
        sink = postgres_sink(name, table=table, dsn=env.pg.dsn, protocol=protocol)
        log_dir = env.work / "grow" / name
        runner = LocalRunner(sink, log_dir, fsync=True)
        times = []
        started = time.perf_counter()
        for batch in range(total):
            parts = [
                [{"id": 2 * batch, "n": batch, "s": "x" * 64}],
                [{"id": 2 * batch + 1, "n": batch, "s": "y" * 64}],
            ]
            t0 = time.perf_counter()
            runner.run_batch(batch, parts)
            times.append((time.perf_counter() - t0) * 1000)
            if (batch + 1) % 1000 == 0:
                log(f"  scaling batches {protocol}: {batch + 1} batches, last {times[-1]:.1f} ms")
        wall = time.perf_counter() - started
        files = sum(len(f) for _, _, f in os.walk(log_dir))
        markers = None
        if protocol == "markers":
            identity = runner.identity.token
            markers = int(
                env.sql(
                    f"SELECT count(*) FROM twophase_markers WHERE identity = '{identity}'",
                    fetch=True,
                )[0][0]
            )
        runner.close()
        measured = times[warmup:]
        tenth = max(len(measured) // 10, 1)
        first = cmp.measure(
            f"batches run ({protocol})", "first tenth", "ms", measured[:tenth], protocol=protocol
        )
        last = cmp.measure(
            f"batches run ({protocol})", "last tenth", "ms", measured[-tenth:], protocol=protocol
        )
        cmp.ratio(
            f"batches run: {protocol} protocol, last tenth / first tenth of {total} batches",
            last,
            first,
            goal=GOAL_FLAT,
            higher_is_better=False,
        )
        bins = 25 if not quick else 5
        edges = np.linspace(0, len(measured), bins + 1).astype(int)
        binned = [
            [int(warmup + edges[i]), float(np.median(measured[edges[i] : edges[i + 1]]))]
            for i in range(bins)
        ]
        slope = float(np.polyfit(np.arange(len(measured)), measured, 1)[0]) * 1000
        cmp.limit(
            f"batches run: {protocol} protocol, slope per 1,000 batches",
            slope,
            None,
            "<=",
            "ms",
            group=f"batches run ({protocol})",
        )
        out[protocol] = {
            "batches": total,
            "wall_seconds": wall,
            "binned_median_ms": binned,
            "slope_ms_per_1000_batches": slope,
            "log_files_at_end": files,
            "marker_rows_at_end": markers,
        }
        log(
            f"  scaling batches {protocol}: {total} batches in {wall:.0f} s, {files} log files, "
            f"markers {markers}"
        )
    env.sql(f"DROP TABLE IF EXISTS {table}")
    cmp.series["batches"] = out


# ------------------------------------------------------------------ memory
def _rss_frame(env: Env, target: str, rows: int) -> Any:
    df = (
        env.spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows)
        .option("numPartitions", 2)
        .load()
    )
    payload = "substring(repeat(sha2(CAST(value AS STRING), 256), 16), 1, 1000)"
    if target == "postgres":
        return df.selectExpr("value AS id", f"{payload} AS payload")
    return df.selectExpr("CAST(value AS STRING) AS key", f"{payload} AS value")


def memory_part(env: Env, cmp: Comparison, quick: bool) -> None:
    import twophase
    from twophase.connectors.jdbc import postgres_sink
    from twophase.connectors.kafka import KafkaSink

    total_mb = 16 if quick else 1024
    sizes_mb = [4, 16] if quick else [64, 256, 1024]
    table = "scale_rss"
    env.sql(f"DROP TABLE IF EXISTS {table}", f"CREATE TABLE {table} (id bigint, payload text)")
    out: dict[str, Any] = {}
    for target in ("postgres", "kafka"):
        label = "twophase coordinated (JDBC)" if target == "postgres" else "twophase kafka"
        out[label] = {}
        entries = []
        for size in sizes_mb:
            rows = size * 1024  # 1 KB rows
            batches = max(total_mb // size, 1)
            if target == "postgres":
                env.sql(f"TRUNCATE {table}", "CHECKPOINT")
                sink: Any = postgres_sink(
                    f"rss-{uuid.uuid4().hex[:6]}",
                    table=table,
                    dsn=env.pg.dsn,
                    protocol="coordinated",
                )
            else:
                topic = f"rss-{uuid.uuid4().hex[:8]}"
                env.kafka.create_topic(topic, partitions=4)
                sink = KafkaSink(
                    f"rss-{uuid.uuid4().hex[:6]}",
                    bootstrap_servers=env.kafka.bootstrap_servers,
                    topic=topic,
                    # A partition of the 1 GB batch is one 512 MB transaction: more than the
                    # default minute on a busy machine.
                    transaction_timeout_ms=600_000,
                )
            timer = BatchTimer(sink, batches)
            writer = (
                _rss_frame(env, target, rows)
                .writeStream.foreachBatch(timer)
                .option("checkpointLocation", env.checkpoint())
            )
            started = time.perf_counter()
            with sample_worker_rss() as peaks:
                run_batches(writer, timer)
            seconds = time.perf_counter() - started
            written = sum(m.rows for m in twophase.batch_metrics(sink))
            if written != rows * batches:
                raise RuntimeError(f"{label}: {written} rows written, expected {rows * batches}")
            if target == "kafka":
                from bench_kafka import delete_topic

                delete_topic(env.kafka.bootstrap_servers, topic)
            entry = cmp.measure(
                f"worker RSS ({label})",
                f"{size} MB batches",
                "MiB",
                [peaks["max_process_mb"]],
                batch_mb=size,
                batches=batches,
                max_total_mb=peaks["max_total_mb"],
                mb_per_s=rows * batches / 1024 / seconds,
            )
            entries.append(entry)
            out[label][size] = {
                "max_process_mb": peaks["max_process_mb"],
                "max_total_mb": peaks["max_total_mb"],
                "seconds": seconds,
            }
            log(
                f"  scaling memory {label:<18} {batches:>3} x {size:>4} MB: peak worker "
                f"{peaks['max_process_mb']:.0f} MiB (all workers {peaks['max_total_mb']:.0f} MiB), "
                f"{seconds:.0f} s"
            )
        cmp.ratio(
            f"worker RSS: {label}, {sizes_mb[-1]} MB batches / {sizes_mb[0]} MB batches",
            entries[-1],
            entries[0],
            goal=GOAL_RSS,
            higher_is_better=False,
        )
    env.sql(f"DROP TABLE IF EXISTS {table}")
    cmp.series["memory"] = {"sizes_mb": sizes_mb, "total_mb": total_mb, "peaks": out}


def run(env: Env, quick: bool) -> Comparison:
    logging.getLogger("twophase").setLevel(logging.WARNING)
    cmp = Comparison(NAME, TITLE, quick)
    cmp.params = {"quick": quick}
    batches_part(env, cmp, quick)
    partitions_part(env, cmp, quick)
    memory_part(env, cmp, quick)
    return cmp

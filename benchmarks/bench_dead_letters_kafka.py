"""What ``bad_rows="dead_letter"`` costs ``KafkaSink`` (issue 52: fast when clean, bounded if not).

Run: ``.venv/bin/python benchmarks/bench_dead_letters_kafka.py [--rows 500000] [--reps 5]``
(a broker of its own, or ``TWOPHASE_KAFKA_BOOTSTRAP``). Each run writes one micro-batch of
``--rows`` records (100-byte values, 2 partitions) through the production coordinator
(``LocalRunner``, no Spark: the sink's own cost, not Spark's) into a fresh 4-partition topic:

* ``fail``            -- ``bad_rows="fail"`` (today's sink), a clean batch: the baseline;
* ``dead_letter``     -- ``bad_rows="dead_letter"``, the same clean batch;
* ``one bad``         -- ``bad_rows="dead_letter"``, the batch with one record too large for the
  topic's ``max.message.bytes`` (set aside in the dead-letter topic).

Every sink has the same producer settings (``batch.size`` under the topics' limit). Runs are
interleaved (rep 1 of each, then rep 2...) and reported as medians with the ratios the issue
sets goals for: ``dead_letter / fail`` (goal <= 1.02) and ``one bad / dead_letter`` (<= 2).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pyarrow as pa

from twophase.connectors.kafka import KafkaSink, close_clients
from twophase.testing import LocalRunner
from twophase_dev import KafkaBroker, attach_kafka

TOPIC_LIMIT = 900_000
PRODUCER = {"batch.size": 800_000}
BIG = random.Random(52).randbytes(TOPIC_LIMIT + 10_000)


def batches(rows: int, poison: bool) -> list[list[pa.RecordBatch]]:
    half = rows // 2
    out = []
    for p in range(2):
        ids = range(p * half, (p + 1) * half)
        values = [(f"{i:08d}" * 13)[:100].encode() for i in ids]
        if poison and p == 1:
            values[half // 2] = BIG
        out.append(
            [
                pa.record_batch(
                    {
                        "key": pa.array([str(i) for i in ids], pa.string()),
                        "value": pa.array(values, pa.binary()),
                    }
                )
            ]
        )
    return out


def run_once(broker: KafkaBroker, mode: str, data: list[list[pa.RecordBatch]]) -> float:
    topic = f"bdl-{uuid.uuid4().hex[:10]}"
    broker.create_topic(topic, partitions=4, config={"max.message.bytes": str(TOPIC_LIMIT)})
    extra = {} if mode == "fail" else {"bad_rows": "dead_letter"}
    sink = KafkaSink(
        f"bdl-{uuid.uuid4().hex[:8]}",
        bootstrap_servers=broker.bootstrap_servers,
        topic=topic,
        producer_config=PRODUCER,
        **extra,
    )
    runner = LocalRunner(sink, tempfile.mkdtemp(prefix="bdl-"))
    runner.run_batch(0, [[data[0][0].slice(0, 1)]])  # open() and a first transaction: untimed
    start = time.perf_counter()
    metrics = runner.run_batch(1, data)
    elapsed = time.perf_counter() - start
    expected_bad = 1 if mode == "one bad" else 0
    assert metrics.dead_lettered == expected_bad, metrics
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    bootstrap = os.environ.get("TWOPHASE_KAFKA_BOOTSTRAP")
    broker = attach_kafka(bootstrap) if bootstrap else KafkaBroker(log_dir=Path(tempfile.mkdtemp()))
    if not bootstrap:
        broker.start()
    clean, bad = batches(args.rows, False), batches(args.rows, True)
    data = {"fail": clean, "dead_letter": clean, "one bad": bad}
    times: dict[str, list[float]] = {mode: [] for mode in data}
    try:
        for _ in range(1):  # warm-up: pools, page cache
            for mode in data:
                run_once(broker, mode, data[mode])
        for rep in range(args.reps):
            for mode in data:
                times[mode].append(run_once(broker, mode, data[mode]))
            print(f"rep {rep + 1}: " + ", ".join(f"{m} {t[-1]:.3f} s" for m, t in times.items()))
    finally:
        close_clients()
        if not bootstrap:
            broker.stop()
    med = {mode: statistics.median(t) for mode, t in times.items()}
    per_rep = [d / f for d, f in zip(times["dead_letter"], times["fail"], strict=True)]
    print(f"rows {args.rows}, reps {args.reps}, load {os.getloadavg()[0]:.1f}")
    for mode, t in med.items():
        print(f"  {mode:12s} median {t:.3f} s  ({args.rows / t:,.0f} records/s)")
    print(
        f"  dead_letter / fail: {med['dead_letter'] / med['fail']:.3f} (goal <= 1.02; per rep "
        f"{min(per_rep):.3f}-{max(per_rep):.3f})"
    )
    print(f"  one bad / dead_letter: {med['one bad'] / med['dead_letter']:.3f} (goal <= 2)")


if __name__ == "__main__":
    main()

"""Micro-benchmark of the marker fingerprint: version 1 (before) against version 2 (now).

No Spark, no server: ``twophase.fingerprint_batches`` over Arrow record batches of 10,000 rows
(Spark's default ``maxRecordsPerBatch``), as a participant computes it. Version 1 is the algorithm
of the releases before fingerprint versions (still computed to compare with their markers),
version 2 the one new markers carry. Each case is timed ``--reps`` times after a warm-up; the
median and the spread are printed.

* ``1 KB binary``   -- 200,000 values of 1,024 random bytes (Kafka's 1 KB records).
* ``narrow rows``   -- 500,000 rows of (bigint, int, 64-character text) (PostgreSQL,
  markers protocol).
* ``mixed lengths`` -- 200,000 binary values of 0 to 2,047 bytes, and 500,000 rows of (bigint,
  text of 0 to 99 characters): lengths that are not whole 8-byte words.

Run::

    .venv/bin/python benchmarks/bench_fingerprint.py            # 5 repetitions
    .venv/bin/python benchmarks/bench_fingerprint.py --reps 9
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numpy as np
import pyarrow as pa
from bench_common import load_average, log, spread_text, summary

from twophase import fingerprint_batches


def _values(lengths: np.ndarray, rng: np.random.Generator, text: bool = False) -> pa.Array:
    """Random bytes of the given lengths (lowercase letters for a string array)."""
    offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int32)
    low, high = (97, 123) if text else (0, 256)
    data = rng.integers(low, high, int(offsets[-1]), dtype=np.uint8)
    kind = pa.string() if text else pa.binary()
    return pa.Array.from_buffers(
        kind, len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )


def cases() -> dict[str, pa.Table]:
    """The tables timed, by name."""
    rng = np.random.default_rng(0)
    n, m = 200_000, 500_000
    text = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(m)]
    short = _values(rng.integers(0, 100, m), rng, text=True)
    return {
        "1 KB binary (200,000 rows)": pa.table({"v": _values(np.full(n, 1024), rng)}),
        "bigint, int, 64-char text (500,000 rows)": pa.table(
            {
                "id": pa.array(np.arange(m), pa.int64()),
                "n": pa.array(np.arange(m) % 1000, pa.int32()),
                "s": pa.array(text, pa.string()),
            }
        ),
        "binary of 0-2,047 B (200,000 rows)": pa.table(
            {"v": _values(rng.integers(0, 2048, n), rng)}
        ),
        "bigint, text of 0-99 chars (500,000 rows)": pa.table(
            {"id": pa.array(np.arange(m), pa.int64()), "s": short}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="timed runs per case and version")
    args = parser.parse_args()
    log(f"load average {load_average()}; median (min-max) of {args.reps} runs, seconds")
    for name, table in cases().items():
        batches = table.to_batches(max_chunksize=10_000)
        medians = {}
        for version in (1, 2):
            fingerprint_batches(batches, version)  # warm-up
            samples = []
            for _ in range(args.reps):
                started = time.perf_counter()
                fingerprint_batches(batches, version)
                samples.append(time.perf_counter() - started)
            stats = summary(samples)
            medians[version] = stats["median"]
            log(f"  {name:42s} v{version}: {spread_text(stats, '{:.3f}')}")
        log(f"  {name:42s} v2 is {medians[1] / medians[2]:.1f}x faster")


if __name__ == "__main__":
    main()

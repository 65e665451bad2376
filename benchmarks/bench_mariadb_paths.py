"""The MariaDB sink's two bulk paths, LOAD DATA LOCAL INFILE and multi-row INSERT, in one run.

The same rows (an id, a bigint, a double, 40 characters of text, a DATETIME(6), a DECIMAL(18,4)
and 32 bytes of binary) go through ``LocalRunner(sink).run_batch`` into a fresh InnoDB table,
one partition, ``protocol="coordinated"`` (``XA COMMIT`` included), alternating the paths;
medians of ``--runs``. Needs a MariaDB server: ``TWOPHASE_MARIADB_URL`` (``twophase_dev up``)::

    eval "$(.venv/bin/python -m twophase_dev env)"
    .venv/bin/python benchmarks/bench_mariadb_paths.py --rows 200000 --runs 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import decimal
import os
import statistics
import time
import uuid

import pyarrow as pa

from twophase.connectors.jdbc import mariadb_sink
from twophase.connectors.jdbc._mariadb._writer import MariaDBWriter
from twophase.testing import LocalRunner
from twophase_dev import attach_mariadb

_CHUNK = 10_000
_WHEN = dt.datetime(2024, 1, 2, 3, 4, 5, 678901)


def _batches(rows: int) -> list[pa.RecordBatch]:
    out = []
    for start in range(0, rows, _CHUNK):
        n = min(_CHUNK, rows - start)
        ids = pa.array(range(start, start + n), pa.int64())
        out.append(
            pa.record_batch(
                {
                    "id": ids,
                    "a": ids,
                    "x": pa.array([0.5] * n),
                    "s": pa.array(["some text of about forty characters, ok"] * n),
                    "t": pa.array([_WHEN] * n, pa.timestamp("us")),
                    "d": pa.array([decimal.Decimal("1234.5678")] * n, pa.decimal128(18, 4)),
                    "b": pa.array([b"\x00\x01binary-32-bytes-of-data-here!!"] * n),
                }
            )
        )
    return out


def main() -> None:
    """Run both paths ``--runs`` times each and print the medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    server = attach_mariadb(os.environ["TWOPHASE_MARIADB_URL"])
    batches = _batches(args.rows)
    seconds: dict[str, list[float]] = {"LOAD DATA": [], "INSERT": []}
    for _ in range(args.runs):
        for path in seconds:
            MariaDBWriter.load_data = path == "LOAD DATA"
            table = f"bench_{uuid.uuid4().hex[:8]}"
            conn = server.connect(autocommit=True)
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE `{table}` (id BIGINT PRIMARY KEY, a BIGINT, x DOUBLE, "
                    "s VARCHAR(100), t DATETIME(6), d DECIMAL(18,4), b BLOB) ENGINE=InnoDB"
                )
            sink = mariadb_sink(
                "bench", table=table, url=server.password_url, protocol="coordinated"
            )
            started = time.perf_counter()
            LocalRunner(sink).run_batch(0, [batches])
            seconds[path].append(time.perf_counter() - started)
            with conn.cursor() as cur:
                cur.execute(f"DROP TABLE `{table}`")
            conn.close()
    MariaDBWriter.load_data = True
    medians = {path: statistics.median(values) for path, values in seconds.items()}
    for path, values in seconds.items():
        runs = ", ".join(f"{v:.2f}" for v in values)
        print(f"{path:10s} median {medians[path]:.2f} s  ({runs})")
    ratio = medians["INSERT"] / medians["LOAD DATA"]
    print(f"LOAD DATA is {ratio:.2f}x INSERT; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

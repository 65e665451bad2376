"""Helpers for Spark tests with the fake sinks: a replayable file source and a query runner."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import twophase

SCHEMA = "id long, payload string"


def ids_of(batch: int, rows: int = 20) -> list[int]:
    return [batch * 1000 + i for i in range(rows)]


#: Column names Spark allows that SQL text would read otherwise: a dot (a struct's field), a
#: backtick (a syntax error), a space, quotes, and non-ASCII letters.
ODD_NAMES = ("dot.ted", "back`tick", "with space", "quo\"te'd", "ünïcödé", "a.b`c d")


def write_input(source: Path, batches: int, rows: int = 20) -> list[int]:
    """Write one Parquet file per micro-batch; return every id written."""
    source.mkdir(parents=True, exist_ok=True)
    written: list[int] = []
    for batch in range(batches):
        ids = ids_of(batch, rows)
        table = pa.table({"id": pa.array(ids, pa.int64()), "payload": [f"p{i}" for i in ids]})
        path = source / f"part-{batch:04d}.parquet"
        pq.write_table(table, path)
        os.utime(path, (1_700_000_000 + batch, 1_700_000_000 + batch))
        written += ids
    return written


def run_query(
    spark: Any,
    source: Path,
    checkpoint: Path,
    sink: Any,
    transform: Callable[[Any], Any] = lambda df: df,
    timeout: float = 120,
) -> None:
    """Run the query over every available file (one file per batch) and wait for it."""
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(source))
    query = twophase.write_stream(
        transform(df), sink, checkpoint_location=str(checkpoint), trigger={"availableNow": True}
    ).start()
    try:
        finished = query.awaitTermination(timeout)
    finally:
        if query.isActive:
            query.stop()
    assert finished, "the query did not finish in time"


def table_ids(server: Any, table: str) -> list[int]:
    """Return the ``id`` column of a PostgreSQL table ([] while the table does not exist)."""
    conn = server.connect()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass(%s)", (table,))
            if cur.fetchone()[0] is None:
                return []
            cur.execute(f'SELECT id FROM "{table}"')
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


ROOT = Path(__file__).resolve().parents[2]


def run_driver(tmp_path: Path, module: str, *args: str) -> tuple[int, str]:
    """Run ``python -m <module> <args>`` as a driver process; return its exit code and log tail.

    In local mode the JVM and the Python workers die with the driver; as they are separate
    processes here, the whole process group is killed once the driver is gone (output goes to
    a file so no pipe keeps them waited for).
    """
    log_path = tmp_path / f"driver-{len(list(tmp_path.glob('driver-*.log')))}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = process.wait(timeout=300)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
    return code, log_path.read_text()[-3000:]


def run_to_end(df: Any, sink: Any, checkpoint: Path, timeout: float = 180) -> None:
    """Run a streaming query into ``sink`` until its input is processed (``availableNow``)."""
    query = twophase.write_stream(
        df, sink, checkpoint_location=str(checkpoint), trigger={"availableNow": True}
    ).start()
    try:
        assert query.awaitTermination(timeout), "the query did not finish in time"
    finally:
        if query.isActive:
            query.stop()
    assert query.exception() is None, query.exception()

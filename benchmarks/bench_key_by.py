"""What routing by key costs an upsert batch that the user already partitioned by key.

The PostgreSQL sink in ``mode="upsert"`` or ``"cdc"`` routes every row of a key to one partition
itself (``key_by``: a hash shuffle into as many partitions as the batch has, each in the batch's
order), so that a key's changes are applied by one transaction whatever the user's
partitioning. A user who already wrote ``repartition(4, "id")`` pays for a second shuffle and a
sort within partitions. This measures that price, in one run, against the named baseline:

* ``trusted layout`` -- the same sink with routing switched off (``sink.key_by = ()``): correct
  here only because the input is already partitioned by key; what the sink cost before;
* ``key_by``         -- the sink as users get it.

One streaming micro-batch (``availableNow``) reads ``--rows`` narrow rows (``id bigint``,
``n integer``, ``s text`` of 64 characters) from Parquet, ``repartition(4, "id")``, and upserts
them into an empty table on a durable local PostgreSQL server, protocol ``coordinated`` and
``markers``. Each case runs ``--reps`` times, alternating; medians and the ratio are printed.

A second measure, ``--splits``: one micro-batch of many tiny files, each its own split (a CDC
feed of small JSON files), upserted with the coordinated protocol, whose batches have at most
the server's share of prepared transactions. The named baseline is the sink without routing
(``sink.key_by = ()``, correct here because every key appears once), which coalesces the
splits to the transactions; beside it, routing
after coalescing (what users get) and routing every split (the shuffle's map side running one
task per split, as before the coalescing came).

Run::

    .venv/bin/python benchmarks/bench_key_by.py                 # 400,000 rows, 5 repetitions
    .venv/bin/python benchmarks/bench_key_by.py --rows 100000 --reps 3
    .venv/bin/python benchmarks/bench_key_by.py --splits 2000 --reps 3   # the many-splits case
"""

from __future__ import annotations

import argparse
import statistics
import time

from bench_common import Env, await_query, load_average, log

import twophase
from twophase._spark._dataframe import DataFrameExecution
from twophase.connectors.jdbc import postgres_sink

TABLE = "bench_key_by"
DDL = f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, n integer, s text)"


def _source(env: Env, rows: int) -> str:
    path = str(env.work / f"key-by-{rows}")
    env.spark.range(rows).selectExpr(
        "id", "CAST(id % 1000003 AS INT) AS n", "sha2(CAST(id AS STRING), 256) AS s"
    ).repartition(2).write.mode("overwrite").parquet(path)
    return path


def _run(env: Env, source: str, protocol: str, keyed: bool) -> float:
    env.sql(f"DROP TABLE IF EXISTS {TABLE}", DDL, f"VACUUM ANALYZE {TABLE}", "CHECKPOINT")
    sink = postgres_sink(
        "keyby", table=TABLE, dsn=env.pg.dsn, protocol=protocol, mode="upsert", key_columns=["id"]
    )
    if not keyed:
        sink.key_by = ()
    df = env.spark.readStream.schema("id long, n int, s string").parquet(source)
    started = time.perf_counter()
    query = twophase.write_stream(
        df.repartition(4, "id"),
        sink,
        checkpoint_location=env.checkpoint(),
        trigger={"availableNow": True},
    ).start()
    await_query(query)
    seconds = time.perf_counter() - started
    count = env.sql(f"SELECT count(*) FROM {TABLE}", fetch=True)[0][0]
    assert count > 0
    return seconds


def _many_files(env: Env, splits: int) -> str:
    path = env.work / f"key-by-files-{splits}"
    # Every key once: without routing the batch is still correct (no two transactions of
    # one batch touch one key), so it is a fair baseline.
    env.spark.range(splits * 5).selectExpr(
        "id", "CAST(id AS INT) AS n", "sha2(CAST(id AS STRING), 256) AS s"
    ).repartition(splits).write.mode("overwrite").json(str(path))
    return str(path)


def _run_splits(env: Env, source: str, case: str) -> float:
    env.sql(f"DROP TABLE IF EXISTS {TABLE}", DDL, "CHECKPOINT")
    sink = postgres_sink(
        "keyby",
        table=TABLE,
        dsn=env.pg.dsn,
        protocol="coordinated",
        mode="upsert",
        key_columns=["id"],
    )
    if case == "no routing":
        sink.key_by = ()
    DataFrameExecution.route_after_coalescing = case != "route every split"
    try:
        df = env.spark.readStream.schema("id long, n int, s string").json(source)
        started = time.perf_counter()
        query = twophase.write_stream(
            df, sink, checkpoint_location=env.checkpoint(), trigger={"availableNow": True}
        ).start()
        await_query(query)
        seconds = time.perf_counter() - started
    finally:
        DataFrameExecution.route_after_coalescing = True
    assert env.sql(f"SELECT count(*) FROM {TABLE}", fetch=True)[0][0] > 0
    return seconds


def splits_case(env: Env, splits: int, reps: int) -> None:
    """Many tiny files in one batch: routing after coalescing against the two other ways."""
    source = _many_files(env, splits)
    conf = env.spark.conf
    # Every file its own split, as a feed of small files is read.
    conf.set("spark.sql.files.maxPartitionBytes", "1")
    conf.set("spark.sql.files.openCostInBytes", "1")
    cases = ("no routing", "route after coalescing", "route every split")
    times: dict[str, list[float]] = {c: [] for c in cases}
    _run_splits(env, source, "route after coalescing")  # warm-up
    for rep in range(reps):
        for case in cases:
            times[case].append(_run_splits(env, source, case))
            log(f"run {rep + 1}: {case} {times[case][-1]:.2f} s")  # a long case shows as it goes
    base = statistics.median(times["no routing"])
    parts = [
        f"{c} {statistics.median(times[c]):.2f} s ({statistics.median(times[c]) / base:.2f}x)"
        for c in cases
    ]
    print(
        f"coordinated  {splits:,} files of 5 rows in one batch, upsert (median of {reps}): "
        + "; ".join(parts)
        + " -- ratios against no routing"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--splits", type=int, default=0, help="run the many-splits case instead")
    args = parser.parse_args()
    env = Env(quick=False, reps=args.reps)
    try:
        if args.splits:
            log(f"load average before: {load_average()}")
            splits_case(env, args.splits, args.reps)
            log(f"load average after: {load_average()}")
            return
        source = _source(env, args.rows)
        log(f"load average before: {load_average()}")
        for protocol in ("coordinated", "markers"):
            _run(env, source, protocol, True)  # warm-up
            times: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.reps):
                for keyed in (False, True):
                    times[keyed].append(_run(env, source, protocol, keyed))
            base, keyed_s = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"{protocol:<12} {args.rows:,} rows upserted, input repartition(4, id): "
                f"trusted layout {base:.2f} s, key_by {keyed_s:.2f} s (median of {args.reps}); "
                f"key_by / trusted = {keyed_s / base:.2f}x "
                f"(runs: {', '.join(f'{t:.2f}' for t in times[False])} | "
                f"{', '.join(f'{t:.2f}' for t in times[True])})"
            )
        log(f"load average after: {load_average()}")
    finally:
        env.close()


if __name__ == "__main__":
    main()

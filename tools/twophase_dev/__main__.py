"""Command line of the local infrastructure: ``python -m twophase_dev`` or ``twophase-dev``.

Commands::

    up [--kafka] [--postgres] [--postgres-no-prepared] [--mariadb] [--spark-cluster]
       [--max-prepared-transactions N]
        start the services (Kafka, PostgreSQL and MariaDB if none is named); a running one is kept
    down [--kafka] [--postgres] [--postgres-no-prepared] [--mariadb] [--spark-cluster]
        stop what 'up' started (all if none is named) and delete its data; logs are kept
    status [--json]      show what 'up' started and whether it still runs
    cluster up|down|status [--json]
                         the Spark standalone cluster (a master and two 1-core workers on
                         127.0.0.1, started from the installed PySpark): start it, stop it with
                         its executors and Python workers, or show its processes
    env                  print 'export ...' lines: eval "$(python -m twophase_dev env)"
    spark-jars [--separator SEP]
                         print the jars Spark needs for its Kafka source (resolved with Maven)
    resolve [--refresh] [--for demo|tests]
                         resolve (download) the Kafka broker, Spark Kafka and GCS connector jars
                         ahead of time, and the Spark Connect server where the PySpark wheel has
                         none (3.5); for the demo only the first two
    emulators            install the pinned cloud-storage emulators once (fake-gcs-server with
                         'go install', with the Go toolchain fetched from the Go module proxy if
                         the machine has none; Azurite with 'npm install') into the cache
    class-archive [--force]
                         make the class-data archives of Spark's classes and of the Kafka
                         broker's for this Java, PySpark and Kafka once (a minute), which every
                         test's Spark JVM and Kafka broker then map
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from twophase_dev._emulators._install import install_emulators
from twophase_dev._errors import DevInfraError
from twophase_dev._gcs_connector import gcs_connector_jar
from twophase_dev._jvm import build_spark_class_archive
from twophase_dev._kafka._archive import build_kafka_class_archive
from twophase_dev._kafka._install import kafka_classpath
from twophase_dev._spark._cluster import SparkCluster
from twophase_dev._spark._jars import spark_connect_jars, spark_kafka_jars
from twophase_dev._state import SERVICES, DevState, Report

__all__ = ["main"]


def _selected(args: argparse.Namespace, default: Sequence[str]) -> list[str]:
    chosen = [name for name in SERVICES if getattr(args, name.replace("-", "_"))]
    return chosen or list(default)


def _add_selectors(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kafka", action="store_true", help="the Kafka broker")
    parser.add_argument(
        "--postgres", action="store_true", help="the PostgreSQL cluster with prepared transactions"
    )
    parser.add_argument(
        "--postgres-no-prepared",
        action="store_true",
        help="a second PostgreSQL cluster with max_prepared_transactions=0",
    )
    parser.add_argument(
        "--mariadb", action="store_true", help="the MariaDB server (binary log on, XA)"
    )
    parser.add_argument(
        "--spark-cluster",
        action="store_true",
        help="a Spark standalone cluster: a master and two 1-core workers (also: 'cluster up')",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="twophase-dev",
        description="Local Kafka, PostgreSQL, MariaDB and Spark jars for twophase's tests.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="start services (Kafka, PostgreSQL and MariaDB by default)")
    _add_selectors(up)
    up.add_argument(
        "--max-prepared-transactions",
        type=int,
        default=64,
        metavar="N",
        help="max_prepared_transactions of the --postgres cluster (default 64; 0 disables)",
    )
    down = sub.add_parser("down", help="stop what 'up' started (everything by default)")
    _add_selectors(down)
    status = sub.add_parser("status", help="show the recorded services")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    sub.add_parser("env", help="print shell exports for the running services")
    jars = sub.add_parser("spark-jars", help="print the jars for Spark's Kafka connector")
    jars.add_argument(
        "--separator", default="\n", help="separator between jar paths (default: newline)"
    )
    cluster = sub.add_parser(
        "cluster", help="the Spark standalone cluster: cluster up | cluster down | cluster status"
    )
    cluster.add_argument("action", choices=("up", "down", "status"))
    cluster.add_argument("--json", action="store_true", help="machine-readable status")
    resolve = sub.add_parser("resolve", help="download and cache the Kafka and Spark jars")
    resolve.add_argument("--refresh", action="store_true", help="ignore cached classpaths")
    resolve.add_argument(
        "--for",
        dest="profile",
        choices=("demo", "tests"),
        default="tests",
        help="what for: the demo needs only the Kafka broker and Spark's Kafka connector",
    )
    sub.add_parser(
        "emulators", help="install the GCS and Azure storage emulators (fake-gcs-server, Azurite)"
    )
    archive = sub.add_parser(
        "class-archive",
        help="make the class-data archives that start every test's Spark JVM and broker faster",
    )
    archive.add_argument("--force", action="store_true", help="make it again if it exists")
    return parser


def _print_report(report: Report) -> None:
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    for line in report.lines:
        print(line)


def _status(state: DevState, as_json: bool) -> int:
    services = state.status()
    if as_json:
        print(json.dumps(services, indent=2, sort_keys=True))
        return 0
    if not services:
        print(f"nothing recorded in {state.path}")
        return 0
    for name, record in services.items():
        flag = "running" if record["running"] else "NOT RUNNING (stale, removed at next up/down)"
        print(f"{name}: {flag}")
        keys = ("pid", "bootstrap_servers", "dsn", "url", "binlog", "max_prepared_transactions")
        for key in (*keys, "master_url"):
            if key in record:
                print(f"  {key}: {record[key]}")
        print(f"  data: {record.get('work_dir')}")
        print(f"  log: {record.get('log_file')}")
    return 0


def _cluster_status(state: DevState, as_json: bool) -> int:
    record = state.status().get("spark-cluster")
    processes = []
    if record is not None and record["running"]:
        handle = SparkCluster.from_record(record)
        processes = [
            {
                "pid": p.pid,
                "role": p.role,
                "worker": p.worker,
                "app_id": p.app_id,
                "executor_id": p.executor_id,
                "state": p.state,
            }
            for p in handle.processes()
        ]
    if as_json:
        print(json.dumps({"cluster": record, "processes": processes}, indent=2, sort_keys=True))
        return 0
    if record is None:
        print("spark-cluster: not running (start it with 'twophase-dev cluster up')")
        return 0
    flag = "running" if record["running"] else "NOT RUNNING (stale, removed at next up/down)"
    print(f"spark-cluster: {flag}")
    print(f"  master_url: {record.get('master_url')}")
    print(f"  master: pid {record.get('pid')}, log {record.get('log_file')}")
    for worker in record.get("workers", []):
        print(
            f"  worker {worker['index']}: pid {worker['pid']}, {record.get('worker_cores')} "
            f"core(s), {record.get('worker_memory')}, log {worker['log_file']}, executor logs "
            f"{worker['work_dir']}/<app>/<executor>/stderr"
        )
    for p in processes:
        if p["role"] in ("master", "worker"):
            continue
        where = f"worker {p['worker']}" if p["worker"] is not None else "orphan"
        stopped = " (stopped)" if p["state"] in ("T", "t") else ""
        print(
            f"  {p['role']}: pid {p['pid']}, {where}, app {p['app_id']}, "
            f"executor {p['executor_id']}{stopped}"
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``twophase-dev`` command line.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; ``sys.argv[1:]`` by default.

    Returns
    -------
    int
        Exit status: 0 on success, 1 when a service could not be handled, 2 for usage errors.
    """
    args = _parser().parse_args(argv)
    state = DevState()
    try:
        if args.command == "up":
            if args.max_prepared_transactions < 0:
                print("--max-prepared-transactions must be >= 0", file=sys.stderr)
                return 2
            report = state.up(
                _selected(args, ("postgres", "mariadb", "kafka")),
                max_prepared_transactions=args.max_prepared_transactions,
            )
            _print_report(report)
            print(f'To use them: eval "$({sys.executable} -m twophase_dev env)"')
        elif args.command == "down":
            _print_report(state.down(_selected(args, SERVICES)))
        elif args.command == "status":
            return _status(state, args.json)
        elif args.command == "env":
            env = state.env()
            if not env:
                print("no service is running; start them with 'twophase-dev up'", file=sys.stderr)
                return 1
            for key, value in sorted(env.items()):
                print(f"export {key}={shlex.quote(value)}")
        elif args.command == "cluster":
            if args.action == "up":
                _print_report(state.up(["spark-cluster"]))
                print(f'To use it: eval "$({sys.executable} -m twophase_dev env)"')
            elif args.action == "down":
                _print_report(state.down(["spark-cluster"]))
            else:
                return _cluster_status(state, args.json)
        elif args.command == "spark-jars":
            print(args.separator.join(str(j) for j in spark_kafka_jars()))
        elif args.command == "resolve":
            targets: list[tuple[str, Callable[..., list[Path]]]] = [
                ("Kafka broker", kafka_classpath),
                ("Spark Kafka connector", spark_kafka_jars),
                ("Spark Connect server, beyond the PySpark wheel", spark_connect_jars),
                ("Hadoop GCS connector", lambda refresh: [gcs_connector_jar()]),
            ]
            for label, resolve in targets[: 2 if args.profile == "demo" else None]:
                started = time.monotonic()
                jars = resolve(refresh=args.refresh)
                print(f"{label}: {len(jars)} jars ({time.monotonic() - started:.1f} s)")
        elif args.command == "class-archive":
            for build in (build_spark_class_archive, build_kafka_class_archive):
                made = build(force=args.force)
                if made is None:
                    print("no java found: nothing to archive", file=sys.stderr)
                    return 1
                path, seconds = made
                print(f"{path} ({path.stat().st_size >> 20} MiB, {seconds:.1f} s)")
        elif args.command == "emulators":
            for label, (path, seconds) in install_emulators().items():
                print(f"{label}: {path} ({seconds:.1f} s)")
    except DevInfraError as exc:
        print(f"twophase-dev: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # e.g. piped into 'head'
        sys.exit(1)

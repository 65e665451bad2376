"""twophase's benchmark suite: every sink beside what a user would pick instead, in one run.

Usage (``scripts/bench.sh`` runs this with the project's virtualenv)::

    scripts/bench.sh                      # everything (~25 minutes on 2 cores)
    scripts/bench.sh --quick              # tiny sizes, 1 repetition (< 5 minutes): a smoke test
    scripts/bench.sh --only kafka         # one comparison (several: --only kafka,recovery)
    scripts/bench.sh --wait-quiet 45      # first wait up to 45 min for a 1-min load average < 1
    scripts/bench.sh --out /tmp/bench     # results.json, benchmarks.md and plots go there
    scripts/bench.sh --report-only        # rewrite the report from results.json (no measuring)

Comparisons (each a module ``bench_<name>.py`` beside this file, each measuring its baselines in
the same run and printing the ratios against its goals):

* ``kafka``     -- ``KafkaSink`` vs Spark's ``format("kafka")`` (same codec and acks) and vs it
  with the Java idempotent producer; 100 B and 1 KB records; records/s.
* ``postgres``  -- the JDBC sink (both protocols; append and upsert) through Spark vs Spark's JDBC
  writer in ``foreachBatch``, and without Spark vs raw single-connection COPY; narrow and wide rows.
* ``mariadb``   -- the same for the MariaDB sink, against Spark's JDBC writer with MariaDB
  Connector/J and raw ``LOAD DATA LOCAL INFILE``.
* ``overhead``  -- added latency per small micro-batch (1 to 1,000 rows, 4 partitions) over a plain
  non-transactional ``foreachBatch`` doing the same write, by protocol phase.
* ``recovery``  -- the restarted driver's recovery work for 10, 100, 1,000 in-doubt transactions.
* ``scaling``   -- cost vs partitions per batch, vs batches already run; workers' peak memory vs
  batch size.

Output: ``benchmarks/results.json`` (every sample) and ``docs/benchmarks.md`` with PNG plots in
``docs/benchmarks/`` (with ``--quick``: ``build/bench-quick/`` unless ``--out`` is given, so that a
smoke test never overwrites the published numbers). With ``--only``, the other comparisons are kept
from the existing results file, each with its own date and load average.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import shlex
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from bench_common import ROOT, Env, load_average, log, machine

COMPARISONS = ("kafka", "postgres", "mariadb", "overhead", "recovery", "scaling")
QUIET_LOAD = 1.0


def _git_commit() -> str:
    with contextlib.suppress(Exception):
        out = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return out + (" (with uncommitted changes)" if dirty else "")
    return "unknown"


def wait_for_quiet(minutes: float) -> dict[str, Any]:
    """Poll the load average every 60 s, up to ``minutes``, until the 1-minute value is < 1."""
    started = time.monotonic()
    observed = []
    while True:
        load = load_average()
        observed.append(load[0])
        if load[0] < QUIET_LOAD:
            log(f"machine quiet: load average {load[0]:.2f}")
            return {"waited_s": round(time.monotonic() - started), "quiet": True, "load": load}
        if time.monotonic() - started + 60 > minutes * 60:
            log(f"machine never got quiet (load averages seen: {observed}); running anyway")
            return {
                "waited_s": round(time.monotonic() - started),
                "quiet": False,
                "load": load,
                "observed": observed,
            }
        log(f"waiting for a quiet machine: load average {load[0]:.2f} >= {QUIET_LOAD}")
        time.sleep(60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 1 repetition")
    parser.add_argument(
        "--only", default="", help=f"comma-separated comparisons of: {', '.join(COMPARISONS)}"
    )
    parser.add_argument("--out", type=Path, help="directory for results.json, report and plots")
    parser.add_argument("--reps", type=int, help="repetitions (default 3, --quick 1)")
    parser.add_argument(
        "--wait-quiet",
        type=float,
        default=0,
        metavar="MINUTES",
        help="first wait up to MINUTES for a 1-minute load average below 1.0",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="measure nothing: rewrite the report (and plots) from the existing results.json",
    )
    args = parser.parse_args(argv)
    only = [n.strip() for n in args.only.split(",") if n.strip()] or list(COMPARISONS)
    unknown = [n for n in only if n not in COMPARISONS]
    if unknown:
        parser.error(f"unknown comparison(s) {unknown}; choose from {', '.join(COMPARISONS)}")

    if args.out is not None:
        results_path, report_path = args.out / "results.json", args.out / "benchmarks.md"
    elif args.quick:
        out = ROOT / "build" / "bench-quick"
        results_path, report_path = out / "results.json", out / "benchmarks.md"
    else:
        results_path, report_path = (
            ROOT / "benchmarks" / "results.json",
            ROOT / "docs" / "benchmarks.md",
        )
    results_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.parent.mkdir(parents=True, exist_ok=True)

    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["scripts/bench.sh", *(shlex.quote(a) for a in given)])
    if args.report_only:
        import bench_report

        bench_report.write(json.loads(results_path.read_text()), report_path)
        log(f"report: {report_path}")
        return 0
    previous: dict[str, Any] = {}
    if results_path.exists() and args.only:
        with contextlib.suppress(ValueError):
            previous = json.loads(results_path.read_text())
    quiet = wait_for_quiet(args.wait_quiet) if args.wait_quiet else None
    started = time.perf_counter()
    results: dict[str, Any] = {
        "schema": 1,
        "command": command,
        "quick": args.quick,
        "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "commit": _git_commit(),
        "machine": machine(),
        "load_at_start": load_average(),
        "quiet_wait": quiet,
        "comparisons": dict(previous.get("comparisons", {})),
        "errors": {},
    }
    env = Env(args.quick, args.reps)
    failed = []
    try:
        for name in only:
            log(f"\n=== {name} ===")
            module = importlib.import_module(f"bench_{name}")
            try:
                cmp = module.run(env, args.quick)
                entry = cmp.finish()
                entry["command"] = results["command"]
                entry["commit"] = results["commit"]
                results["comparisons"][name] = entry
                log(f"=== {name}: {entry['seconds']:.0f} s")
            except Exception as exc:
                traceback.print_exc()
                failed.append(name)
                results["errors"][name] = f"{type(exc).__name__}: {exc}"
                results["comparisons"].pop(name, None)
            results["versions"] = env.versions()
            results_path.write_text(json.dumps(results, indent=1) + "\n")
    finally:
        env.close()
    results["seconds"] = round(time.perf_counter() - started, 1)
    results["load_at_end"] = load_average()
    results_path.write_text(json.dumps(results, indent=1) + "\n")

    import bench_report

    bench_report.write(json.loads(json.dumps(results)), report_path)
    log("\n=== summary ===")
    for name, entry in results["comparisons"].items():
        for check in entry["checks"]:
            if check["goal"] is None:
                continue
            unit = check.get("unit", "")
            value = f"{check['value']:.2f}x" if unit == "x" else f"{check['value']:,.1f} {unit}"
            verdict = "met" if check["met"] else "MISSED"
            goal = f"{check['op']} {check['goal']:g}"
            log(f"  [{name}] {check['label']}: {value} (goal {goal}) {verdict}")
    log(f"\nwall time {results['seconds']:.0f} s; load average at start {results['load_at_start']}")
    log(f"results: {results_path}\nreport:  {report_path}")
    log(f"reproduce: {results['command']}   (from the repository root)")
    if failed:
        log(f"FAILED comparisons: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

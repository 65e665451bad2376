"""Where the time goes: one piece of the benchmark suite under a sampling profiler.

Wall-clock profiles (idle time included: most of a small batch is waiting on a server), so that a
missed goal can be traced to a function. Two kinds:

* ``overhead``  -- small micro-batches of one sink through Spark (as comparison "overhead") under
  ``py-spy record --subprocesses --idle``: the driver and every PySpark worker. The summary shows,
  for the stacks under the coordinator (driver) and under ``run_participant`` (workers), the
  functions with the most samples, inclusive, and ``profile.svg`` is the flame graph.
* ``local``     -- tiny batches through ``twophase.testing.LocalRunner`` against the real
  PostgreSQL (as comparison "scaling"), and ``recovery`` -- one recovery of comparison "recovery",
  both under pyinstrument (one process).

Run::

    .venv/bin/python benchmarks/bench_profile.py overhead --kind "twophase kafka" --rows 1000
    .venv/bin/python benchmarks/bench_profile.py local --protocol coordinated --batches 300
    .venv/bin/python benchmarks/bench_profile.py recovery --case "Kafka fence" --n 10

Output goes to ``build/profiles/<name>/`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench_common import ROOT, Env, log

PY_SPY = Path(sys.executable).with_name("py-spy")


def summarize_raw(raw: Path, anchors: list[str], top: int = 30) -> str:
    """Inclusive samples per function, for the stacks that pass through one of ``anchors``."""
    totals: dict[str, collections.Counter[str]] = {a: collections.Counter() for a in anchors}
    samples: collections.Counter[str] = collections.Counter()
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        for anchor in anchors:
            index = next((i for i, f in enumerate(frames) if f.startswith(anchor + " ")), None)
            if index is None:
                continue
            samples[anchor] += count
            seen = set()
            for frame in frames[index:]:
                name = re.sub(r":\d+\)$", ")", frame)
                if name not in seen:
                    seen.add(name)
                    totals[anchor][name] += count
            break
    out = []
    for anchor in anchors:
        n = samples[anchor]
        out.append(f"== stacks under {anchor}: {n} samples (inclusive share of them) ==")
        for name, count in totals[anchor].most_common(top):
            out.append(f"{100 * count / max(n, 1):6.1f}%  {name}")
        out.append("")
    return "\n".join(out)


def profile_overhead(args: argparse.Namespace, out: Path) -> None:
    from bench_overhead import Targets, measure_stream

    env = Env(quick=False)
    try:
        targets = Targets(env, f"prof{os.getpid()}")
        # Warm-up query: workers, pools, JIT (not profiled).
        measure_stream(env, targets, args.kind, args.rows, args.partitions, 2, 3)
        raw = out / "profile.raw"
        spy = subprocess.Popen(
            [
                str(PY_SPY),
                "record",
                "--pid",
                str(os.getpid()),
                "--subprocesses",
                "--idle",
                "--rate",
                "250",
                "--format",
                "raw",
                "--output",
                str(raw),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(2)
        result = measure_stream(
            env, targets, args.kind, args.rows, args.partitions, args.warmup, args.batches
        )
        spy.send_signal(2)
        spy.wait(60)
        targets.drop()
    finally:
        env.close()
    ms = sorted(result["ms"])
    text = [
        f"{args.kind}: {args.batches} batches of {args.rows} rows in {args.partitions} "
        f"partitions; median {ms[len(ms) // 2]:.1f} ms per batch",
    ]
    for phase, values in result.get("phases", {}).items():
        values = sorted(values)
        text.append(f"  median {phase}: {values[len(values) // 2]:.1f} ms")
    text.append("")
    text.append(summarize_raw(raw, ["Coordinator.run_batch", "run_participant"]))
    (out / "summary.txt").write_text("\n".join(text))
    log("\n".join(text))


def _pyinstrument(fn: object, out: Path) -> None:
    from pyinstrument import Profiler

    profiler = Profiler(interval=0.0005)
    profiler.start()
    try:
        fn()  # type: ignore[operator]
    finally:
        profiler.stop()
    text = profiler.output_text(unicode=False, color=False)
    (out / "summary.txt").write_text(text)
    (out / "profile.html").write_text(profiler.output_html())
    log(text)


def profile_local(args: argparse.Namespace, out: Path) -> None:
    from twophase.connectors.jdbc import postgres_sink
    from twophase.testing import LocalRunner

    env = Env(quick=False)
    try:
        env.sql("DROP TABLE IF EXISTS prof_local", "CREATE TABLE prof_local (id bigint, s text)")
        sink = postgres_sink(
            "prof-local",
            table="prof_local",
            dsn=env.pg.dsn,
            protocol=args.protocol,
        )
        runner = LocalRunner(sink, env.work / "prof-local", fsync=True)

        def batches(first: int, count: int) -> None:
            for b in range(first, first + count):
                runner.run_batch(b, [[{"id": 2 * b, "s": "x"}], [{"id": 2 * b + 1, "s": "y"}]])

        batches(0, 150)  # past the log's retention: compaction runs from here on
        _pyinstrument(lambda: batches(150, args.batches), out)
    finally:
        env.close()


def profile_recovery(args: argparse.Namespace, out: Path) -> None:
    import bench_recovery

    env = Env(quick=False)
    try:
        env.sql(
            f"DROP TABLE IF EXISTS {bench_recovery.TABLE}",
            f"CREATE TABLE {bench_recovery.TABLE} (id bigint, n integer, s text)",
        )
        # Profile only the timed part: wrap the coordinator's start.
        from twophase.testing import LocalRunner

        original = LocalRunner.restart

        def restart(self: LocalRunner) -> None:
            original(self)
            coordinator = self.coordinator
            start = coordinator.start
            coordinator.start = lambda sink, batch_id: _pyinstrument(  # type: ignore[method-assign]
                lambda: start(sink, batch_id), out
            )

        LocalRunner.restart = restart  # type: ignore[method-assign]
        seconds = bench_recovery.CASES[args.case](env, args.n)
        log(f"{args.case}, {args.n} in doubt: {seconds:.3f} s (profiled)")
    finally:
        env.close()


#: The former names of the protocols and of the overhead kinds, still taken on the command line.
FORMER_PROTOCOL_NAMES = {"A": "coordinated", "B": "markers"}
FORMER_KIND_NAMES = {"twophase A": "twophase coordinated", "twophase B": "twophase markers"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    p = sub.add_parser("overhead")
    p.add_argument("--kind", default="twophase coordinated")
    p.add_argument("--rows", type=int, default=1000)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batches", type=int, default=20)
    p = sub.add_parser("local")
    # A and B: the protocols' former names, still taken.
    p.add_argument(
        "--protocol", choices=["coordinated", "markers", "A", "B"], default="coordinated"
    )
    p.add_argument("--batches", type=int, default=300)
    p = sub.add_parser("recovery")
    p.add_argument("--case", default="Kafka fence")
    p.add_argument("--n", type=int, default=10)
    for p in sub.choices.values():
        p.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.what == "local":
        args.protocol = FORMER_PROTOCOL_NAMES.get(args.protocol, args.protocol)
    if args.what == "overhead":
        args.kind = FORMER_KIND_NAMES.get(args.kind, args.kind)
    logging.getLogger("twophase").setLevel(logging.WARNING)
    tag = {
        "overhead": lambda: f"overhead-{args.kind.replace(' ', '-')}-{args.rows}",
        "local": lambda: f"local-{args.protocol}",
        "recovery": lambda: f"recovery-{args.case.replace(' ', '-')}-{args.n}",
    }[args.what]()
    out = args.out or ROOT / "build" / "profiles" / tag
    out.mkdir(parents=True, exist_ok=True)
    {"overhead": profile_overhead, "local": profile_local, "recovery": profile_recovery}[args.what](
        args, out
    )
    log(f"profile in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What twophase's OpenTelemetry metrics cost a micro-batch, off and on.

Every batch runs the production coordinator and participants (``LocalRunner``, no Spark: Spark's
own per-batch time, tens of milliseconds, would hide microseconds) into the test kit's in-memory
target, with the coordinator log on local disk (no fsync). Three cases, in one run, alternating
round by round:

* ``no metrics code`` -- the named baseline: twophase's recording functions and the
  participants' timing of the sink's hooks replaced by nothing (what a batch cost before the
  metrics existed);
* ``metrics off``     -- what every user gets by default: the OpenTelemetry API with no SDK
  installed (its proxy instruments, a no-op);
* ``metrics on``      -- the SDK with the Prometheus exporter's reader, as a driver being scraped
  has it (the scrape itself runs on the scraper's schedule, not per batch; one at the end checks
  the counts).

Per case: the median wall time of a batch over ``--batches`` batches, per round; the added time
per batch against the baseline (median over rounds) and the ratio. Sizes: ``--partitions``
partitions of ``--rows`` rows each per batch.

A whole batch takes milliseconds (the log's files), so the metrics' microseconds are within its
noise on a busy machine. The second measure times exactly what the metrics add to a batch, in a
loop of ``--calls``: the driver's recording of one batch (``BatchMetrics.emit`` without its log
line, and the sweep's zombie and in-doubt notes) in each case, and the participants' timing of a
hook call (``--partitions`` x (begin, write, prepare) per batch).

Run::

    .venv/bin/python benchmarks/bench_metrics.py                  # 4 x 100 rows, 5 rounds
    .venv/bin/python benchmarks/bench_metrics.py --partitions 16 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from bench_common import load_average, log

from twophase._engine import _participant
from twophase._metrics import _otel, _otel_setup
from twophase.testing import FakeSink, FakeTarget, LocalRunner

CASES = ("no metrics code", "metrics off", "metrics on")
BASELINE = "no metrics code"


def _nothing(*_args: Any, **_kwargs: Any) -> Any:
    return False


def _untimed(self: Any, hook: Callable[..., Any], *args: Any) -> Any:
    return hook(*args)


@contextlib.contextmanager
def case(name: str) -> Iterator[Any]:
    """Set up one case; yield the Prometheus reader's registry check (or None)."""
    saved = {
        "record_batch": _otel.record_batch,
        "record_failed_batch": _otel.record_failed_batch,
        "record_last_committed": _otel.record_last_committed,
        "record_recovered_rows": _otel.record_recovered_rows,
        "record_zombies": _otel.record_zombies,
        "observe_in_doubt": _otel.observe_in_doubt,
    }
    configure, clock = _otel_setup.configure, _participant._HookClock.time
    provider: Any = None
    try:
        if name == BASELINE:
            for attr in saved:
                setattr(_otel, attr, _nothing)
            _otel_setup.configure = _nothing  # type: ignore[assignment]
            _participant._HookClock.time = _untimed  # type: ignore[method-assign]
            _otel.use_meter_provider(None)
        elif name == "metrics off":
            _otel.use_meter_provider(None)  # the global provider: the API's proxy, no SDK
        else:
            from opentelemetry.exporter.prometheus import PrometheusMetricReader
            from opentelemetry.sdk.metrics import MeterProvider

            provider = MeterProvider(
                metric_readers=[PrometheusMetricReader()], shutdown_on_exit=False
            )
            _otel.use_meter_provider(provider)
        yield provider
    finally:
        for attr, fn in saved.items():
            setattr(_otel, attr, fn)
        _otel_setup.configure = configure  # type: ignore[assignment]
        _participant._HookClock.time = clock  # type: ignore[method-assign]
        _otel.use_meter_provider(None)
        if provider is not None:
            provider.shutdown()


def partitions_of(batch_id: int, partitions: int, rows: int) -> list[list[pa.RecordBatch]]:
    out = []
    for p in range(partitions):
        first = (batch_id * partitions + p) * rows
        ids = pa.array(range(first, first + rows), pa.int64())
        out.append([pa.RecordBatch.from_arrays([ids, ids.cast(pa.string())], ["id", "s"])])
    return out


def measure(name: str, batches: int, partitions: int, rows: int) -> list[float]:
    """Run ``batches`` batches (after 5 of warm-up) in case ``name``; seconds per batch."""
    data = [partitions_of(b, partitions, rows) for b in range(batches + 5)]
    times: list[float] = []
    with case(name) as provider:
        runner = LocalRunner(FakeSink("bench-metrics", FakeTarget.in_memory()))
        for batch_id, parts in enumerate(data):
            started = time.perf_counter()
            runner.run_batch(batch_id, parts)
            if batch_id >= 5:
                times.append(time.perf_counter() - started)
        if provider is not None:
            from prometheus_client import REGISTRY, generate_latest

            scraped = generate_latest(REGISTRY).decode()
            line = next(x for x in scraped.splitlines() if x.startswith("twophase_batches_total{"))
            assert float(line.rsplit(" ", 1)[1]) == batches + 5, line
    return times


def record_cost(name: str, calls: int) -> float:
    """Seconds the driver spends recording one batch in case ``name`` (median of 5 loops)."""
    from twophase import BatchMetrics

    metrics = BatchMetrics(
        "bench-metrics", 7, "coordinated", "committed", rows=400, partitions=4,
        transactions=4, phase1_seconds=0.01, decision_seconds=0.001, phase2_seconds=0.002,
        arrow_bytes=6400, target_seconds=0.004,
    )  # fmt: skip
    sink = FakeSink("bench-metrics", FakeTarget.in_memory())
    loops = []
    with case(name):
        for _ in range(5):
            started = time.perf_counter()
            for _ in range(calls):
                _otel.record_batch(metrics)
                _otel.record_zombies(sink, 0)
                _otel.observe_in_doubt(sink, ())
            loops.append((time.perf_counter() - started) / calls)
    return statistics.median(loops)


def clock_cost(calls: int) -> float:
    """Seconds a participant's timing adds to one hook call (timed minus direct, median of 5)."""

    def hook(_x: object) -> None:
        return None

    clock = _participant._HookClock()
    diffs = []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            clock.time(hook, None)
        timed = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(calls):
            hook(None)
        diffs.append((timed - (time.perf_counter() - started)) / calls)
    return statistics.median(diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    log(
        f"{args.batches} batches of {args.partitions} x {args.rows} rows, {args.rounds} rounds; "
        f"load average {load_average()}"
    )
    for name in CASES:  # warm-up: imports, the SDK's first instruments, the file cache
        measure(name, 20, args.partitions, args.rows)
    medians: dict[str, list[float]] = {c: [] for c in CASES}
    for rnd in range(args.rounds):
        order = CASES if rnd % 2 == 0 else tuple(reversed(CASES))
        for name in order:
            per_batch = statistics.median(measure(name, args.batches, args.partitions, args.rows))
            medians[name].append(per_batch)
            log(f"  round {rnd + 1} {name:<16} median {per_batch * 1e6:8.1f} us/batch")
    base = statistics.median(medians[BASELINE])
    log(f"whole batches, median over rounds (load average {load_average()}):")
    for name in CASES:
        value = statistics.median(medians[name])
        added = [m - b for m, b in zip(medians[name], medians[BASELINE], strict=True)]
        spread = f"{min(added) * 1e6:+.1f}..{max(added) * 1e6:+.1f}"
        log(
            f"  {name:<16} {value * 1e6:8.1f} us/batch  added "
            f"{statistics.median(added) * 1e6:+7.1f} us (rounds {spread})  ratio {value / base:.3f}"
        )
    log(f"what the metrics add to a batch, {args.calls} calls per loop:")
    hooks = 3 * args.partitions
    clock = clock_cost(args.calls)
    for name in CASES[1:]:
        driver = record_cost(name, args.calls)
        log(
            f"  {name:<16} driver {driver * 1e6:6.2f} us + participants {hooks} hook calls x "
            f"{clock * 1e6:.3f} us = {(driver + hooks * clock) * 1e6:6.2f} us per batch "
            f"({(driver + hooks * clock) / base * 100:.3f} % of the baseline batch)"
        )


if __name__ == "__main__":
    main()

"""Seeded real-time chaos trials, in the ``extended`` selection (tests/chaos/realtime.py).

One trial of seed 54 for each real-time sink (``pg-markers-rt``, ``maria-markers-rt``,
``kafka-rt``), drawn among that sink alone, through :func:`tests.chaos.harness.run_trials`: the
same code as ``scripts/chaos.sh --trials 1 --seed 54 --sinks <sink>``. A query in Spark's
real-time mode is fed by the harness while it runs, through 1-3 faults (driver process groups or
Python workers SIGKILLed, the target or the broker restarted, ``query.stop()``), stopped cleanly
and started once more; every row must then be in the target exactly once.

A real-time trial takes about a minute (two to four Spark driver starts, an epoch of 5-20 s at
the end), far more than the default run's budget for it: these are in the extended run only.
How the plans are drawn is pinned in the default run by
``tests/unit/test_chaos_realtime_plans.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.chaos.harness import Infra, run_trials, summarize
from tests.chaos.realtime import RT_SINKS

pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.extended,
    pytest.mark.kafka,
    pytest.mark.timeout(900),
]

SEED = "54"


@pytest.mark.parametrize(
    "sink",
    [
        pytest.param("pg-markers-rt", marks=pytest.mark.postgres),
        pytest.param("maria-markers-rt", marks=pytest.mark.mariadb),
        "kafka-rt",
    ],
)
def test_seeded_realtime_chaos_trial_is_exact(
    infra_for: Callable[..., Infra], tmp_path: Path, sink: str
) -> None:
    infra = infra_for(sink)
    lines: list[str] = []
    results = run_trials(
        SEED, 1, infra, tmp_path, sinks=[sink], timeout=600, keep=True, out=lines.append
    )
    table, ok = summarize(results, SEED, sum(r.duration for r in results))
    report = "\n".join(lines) + "\n" + table
    print(report)
    [result] = results
    assert sink in RT_SINKS
    assert result.plan.sink == sink
    assert result.plan.realtime
    assert result.duplicates == 0, report
    assert result.losses == 0, report
    assert result.wrong == 0, report
    assert result.leftovers == [], report
    assert result.finished, report  # cleanly stopped after every row, then once more
    assert ok, report
    assert any(f.fired for f in result.plan.faults), f"no fault fired:\n{result.line()}"

"""Smoke test of the benchmark suite: ``scripts/bench.sh --quick`` runs every comparison.

The suite starts its own Kafka broker, PostgreSQL cluster and Spark session (it does not reuse the
test session's), writes into a temporary directory (never into ``docs/``) and must produce a
number for every comparison. The numbers themselves are not checked: on a busy test machine with
tiny sizes they mean nothing.

Not part of the default run (``scripts/test.sh`` keeps pytest under 20 minutes on 2 cores): run
it with ``.venv/bin/python -m pytest -m bench`` after changing ``benchmarks/``.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.bench,
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.timeout(900),
]

ROOT = Path(__file__).resolve().parent.parent
COMPARISONS = ("kafka", "postgres", "overhead", "recovery", "scaling")


def _numbers(values: list[float]) -> bool:
    return bool(values) and all(isinstance(v, float) and math.isfinite(v) for v in values)


def test_bench_quick_produces_every_comparison(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "bench.sh"), "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    results = json.loads((out / "results.json").read_text())
    assert results["quick"] is True
    assert not results["errors"]
    assert set(results["comparisons"]) == set(COMPARISONS)
    for name in COMPARISONS:
        cmp = results["comparisons"][name]
        medians = [m["median"] for m in cmp["measurements"]]
        assert _numbers(medians), (name, cmp["measurements"])
        assert cmp["checks"], name
        assert _numbers([c["value"] for c in cmp["checks"]]), (name, cmp["checks"])
        assert any(c["goal"] is not None for c in cmp["checks"]), name
    report = (out / "benchmarks.md").read_text()
    for name in COMPARISONS:
        assert results["comparisons"][name]["title"] in report
    plots = sorted(p.name for p in (out / "benchmarks").glob("*.png"))
    assert {"kafka.png", "postgres.png", "overhead.png", "recovery.png"} <= set(plots), plots
    assert "reproduce: scripts/bench.sh --quick" in proc.stdout

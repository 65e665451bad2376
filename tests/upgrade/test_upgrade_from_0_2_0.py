"""Upgrading from release 0.2.0 with real driver processes and a real PostgreSQL server.

Release 0.2.0 is built from its commit into a virtualenv of its own (``conftest.py``,
``upgrade_support.py``); both releases run the same driver script (``upgrade_driver.py``), whose
Python workers run the driver's interpreter and so the driver's release. Each scenario kills a
driver with SIGKILL at a coordinator step of batch 1 (of three batches of 20 rows, two
partitions each), checks what a reader of the server sees and what the checkpoint holds, and
restarts the same checkpoint with the other release:

a. the coordinated protocol, 0.2.0 killed at ``decided`` (the decision is durable, phase 2 has
   not started): batch 1 is prepared and invisible; the current code commits it and the rest,
   each row exactly once;
b. the markers protocol, 0.2.0 killed at ``phase1_done`` (every partition of batch 1 committed
   with its marker, the batch not recorded committed): the current code skips what is committed
   and writes the rest, each row exactly once;
c. the reverse: the current code killed at ``decided``; 0.2.0 restarted on that checkpoint must
   refuse the decision it cannot read, committing nothing and leaving batch 1 prepared; the
   current code then finishes it, each row exactly once.

Scenarios a and b share their two driver runs (two queries in one process, killed together when
both are at their step); scenario c takes three. About a minute and a half on 2 cores.
"""

from __future__ import annotations

import re
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import twophase
from tests.upgrade.upgrade_support import (
    BATCHES,
    KILLED,
    DriverRun,
    PgState,
    ReleaseVenv,
    Scenario,
    batches_of,
    expected,
    import_twophase,
    partitions_of,
    run_driver,
    write_input,
)
from twophase._engine._steps import Step

pytestmark = [pytest.mark.integration, pytest.mark.spark, pytest.mark.chaos, pytest.mark.slow]

#: The current code: the interpreter of this virtualenv (twophase installed from the tree).
CURRENT = Path(sys.executable)
CURRENT_FILE = Path(twophase.__file__).resolve()
EVERY_BATCH = range(BATCHES)


def new_scenario(work: Path, protocol: str, tag: str) -> Scenario:
    """A scenario with names of its own (sink, schema) and its input written."""
    suffix = uuid.uuid4().hex[:10]
    scenario = Scenario(
        name=f"upg-{tag}-{suffix}",
        protocol=protocol,
        schema=f"upgrade_{tag}_{suffix}",
        source=work / f"input-{tag}",
        checkpoint=work / f"checkpoint-{tag}",
    )
    write_input(scenario.source)
    return scenario


def driver_spec(dsn: str, *queries: dict[str, Any]) -> dict[str, Any]:
    return {"app": "twophase-upgrade", "dsn": dsn, "queries": list(queries)}


def assert_release(run: DriverRun, release: ReleaseVenv | None) -> None:
    """The driver and its Python worker imported ``release`` (None: the current code)."""
    for kind in ("driver", "worker"):
        facts = run.report(kind)
        where = Path(facts["file"]).resolve()
        if release is None:
            assert where == CURRENT_FILE, (kind, facts, run.label)
        else:
            assert facts["version"] == "0.2.0", (kind, facts, run.label)
            assert where.is_relative_to(release.root.resolve()), (kind, facts, run.label)


def assert_killed(run: DriverRun, step: str) -> None:
    """The driver was SIGKILLed, by the crash point ``step`` of batch 1."""
    assert run.code == KILLED, f"{run.label}: expected SIGKILL at the crash point\n{run.tail()}"
    reached = {(r["step"], r["batch"]) for r in run.reports if r["kind"] == "crash_point"}
    assert (step, 1) in reached, f"{run.label}: {step} of batch 1 not reached\n{run.tail()}"


def assert_finished(run: DriverRun, scenario: Scenario) -> None:
    """The scenario's query of ``run`` processed all its input (the others may have failed)."""
    facts = [r for r in run.reports if r["kind"] == "query" and r["name"] == scenario.name]
    assert facts, f"{run.label}: query {scenario.name} did not end\n{run.tail()}"
    assert facts[0]["ok"], f"{run.label}: query {scenario.name} failed\n{run.tail()}"


def assert_batch_1_prepared(
    state: dict[str, Any], scenario: Scenario, decision: list[dict[str, Any]]
) -> None:
    """Batch 0 visible, batch 1 decided and prepared on both partitions, invisible."""
    assert state["ids"] == expected([0]), "only batch 0 may be visible"
    assert batches_of(state["prepared"]) == {1: 2}, state["prepared"]
    assert partitions_of(state["prepared"], 1) == {0, 1}, state["prepared"]
    assert len(decision) == 1, f"no decision of batch 1 in {scenario.checkpoint}"
    assert state["decisions"] == [0, 1], "batch 0 and batch 1 decided"
    assert state["committed"] == [0], "only batch 0 recorded committed"
    assert state["spark_commits"] == [0], state


def test_old_virtualenv_imports_release_0_2_0(release_0_2_0: ReleaseVenv, tmp_path: Path) -> None:
    """The .pth trick brings the dependencies but not the current twophase into the old venv."""
    version, file = import_twophase(release_0_2_0.python, tmp_path)
    print(f"old virtualenv: twophase {version} from {file}")
    assert version == "0.2.0"
    assert file.resolve().is_relative_to(release_0_2_0.root.resolve())
    assert import_twophase(CURRENT, tmp_path)[1].resolve() == CURRENT_FILE


@dataclass(repr=False)
class UpgradeRuns:
    """Scenarios a and b: 0.2.0 killed in batch 1 of both queries, then the current code."""

    coordinated: Scenario
    markers: Scenario
    killed: DriverRun
    after_kill: dict[str, dict[str, Any]]
    decision: list[dict[str, Any]]
    restarted: DriverRun
    after_restart: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def upgrade_runs(
    release_0_2_0: ReleaseVenv, postgres_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[UpgradeRuns]:
    """Run 0.2.0 until both queries are at their crash point, then the current code."""
    pg = PgState(postgres_server)
    work = tmp_path_factory.mktemp("upgrade-ab")
    a = new_scenario(work, "coordinated", "a")
    b = new_scenario(work, "markers", "b")
    for s in (a, b):
        pg.create(s)
    try:
        killed = run_driver(
            release_0_2_0.python,
            driver_spec(
                postgres_server.dsn,
                a.query_spec((Step.DECIDED, 1)),
                b.query_spec((Step.PHASE1_DONE, 1)),
            ),
            work / "driver",
            "0.2.0, killed at decided (a) / phase1_done (b) of batch 1",
        )
        after_kill = {s.name: pg.snapshot(s) for s in (a, b)}
        print(f"locks of the prepared transactions of a: {pg.prepared_locks(a)}")
        decision = a.log_records(1, "decision")
        restarted = run_driver(
            CURRENT,
            driver_spec(postgres_server.dsn, a.query_spec(), b.query_spec()),
            work / "driver",
            "current code, restarted on both checkpoints",
        )
        after_restart = {s.name: pg.snapshot(s) for s in (a, b)}
        yield UpgradeRuns(a, b, killed, after_kill, decision, restarted, after_restart)
    finally:
        for s in (a, b):
            pg.drop(s)


def test_coordinated_decided_by_0_2_0_committed_by_current(
    upgrade_runs: UpgradeRuns, release_0_2_0: ReleaseVenv
) -> None:
    """a: a batch decided by 0.2.0, prepared, is committed by the current code exactly once."""
    runs, a = upgrade_runs, upgrade_runs.coordinated
    assert_killed(runs.killed, Step.DECIDED)
    assert_release(runs.killed, release_0_2_0)
    state = runs.after_kill[a.name]
    assert_batch_1_prepared(state, a, runs.decision)
    # The decision names exactly the transactions that are prepared.
    assert set(runs.decision[0]["transaction_ids"]) == set(state["prepared"])

    assert_finished(runs.restarted, a)
    assert_release(runs.restarted, None)
    final = runs.after_restart[a.name]
    assert final["ids"] == expected(EVERY_BATCH), "every row exactly once"
    assert final["prepared"] == [], "no prepared transaction of the sink left"
    assert final["spark_commits"] == list(EVERY_BATCH), final


def test_markers_partial_batch_of_0_2_0_finished_by_current(
    upgrade_runs: UpgradeRuns, release_0_2_0: ReleaseVenv
) -> None:
    """b: batch 1 committed with markers by 0.2.0 but not recorded: the current code skips it."""
    runs, b = upgrade_runs, upgrade_runs.markers
    assert_killed(runs.killed, Step.PHASE1_DONE)
    assert_release(runs.killed, release_0_2_0)
    state = runs.after_kill[b.name]
    # Both partitions of batch 1 committed, each in one transaction with its marker...
    assert state["markers"] == [(0, 0), (0, 1), (1, 0), (1, 1)], state["markers"]
    assert state["ids"] == expected([0, 1])
    # ... but neither twophase nor Spark recorded the batch committed.
    assert state["intents"] == [0, 1], "batches 0 and 1 started"
    assert state["committed"] == [0], "only batch 0 recorded committed"
    assert state["spark_commits"] == [0], state

    assert_finished(runs.restarted, b)
    assert_release(runs.restarted, None)
    final = runs.after_restart[b.name]
    assert final["ids"] == expected(EVERY_BATCH), "every row exactly once"
    assert {batch for batch, _p in final["markers"]} == set(EVERY_BATCH)
    assert final["spark_commits"] == list(EVERY_BATCH), final


# 0.2.0 is frozen: what it does with a newer record changes only when the record format does
# (run it with -m extended then); the current code's refusal of newer records is a unit test.
@pytest.mark.extended
def test_decision_of_current_refused_by_0_2_0(
    release_0_2_0: ReleaseVenv, postgres_server: Any, tmp_path: Path
) -> None:
    """c: 0.2.0 must refuse a decision written by the current code, and break nothing."""
    pg = PgState(postgres_server)
    c = new_scenario(tmp_path, "coordinated", "c")
    pg.create(c)
    try:
        killed = run_driver(
            CURRENT,
            driver_spec(postgres_server.dsn, c.query_spec((Step.DECIDED, 1))),
            tmp_path / "driver",
            "current code, killed at decided of batch 1",
        )
        assert_killed(killed, Step.DECIDED)
        assert_release(killed, None)
        state = pg.snapshot(c)
        decision = c.log_records(1, "decision")
        assert_batch_1_prepared(state, c, decision)
        print(f"locks of the prepared transactions: {pg.prepared_locks(c)}")
        print(f"decision record of the current code: keys {sorted(decision[0])}")

        old = run_driver(
            release_0_2_0.python,
            driver_spec(postgres_server.dsn, c.query_spec()),
            tmp_path / "driver",
            "0.2.0, restarted on the current code's checkpoint",
        )
        said = [line for line in old.output.splitlines() if "decision of batch" in line]
        print(f"0.2.0 exited with {old.code}; about the decision it said: {said[:3]}")
        assert_release(old, release_0_2_0)
        assert old.code != 0, (
            "0.2.0 accepted the decision written by the current code (it must refuse a "
            f"decision record it cannot read)\n{old.tail()}"
        )
        assert old.code != KILLED, old.tail()
        assert re.search(r"decision of batch 1\b", old.output), old.tail()
        refused = pg.snapshot(c)
        assert refused["prepared"] == state["prepared"], "batch 1 must stay prepared"
        assert refused["ids"] == expected([0]), "0.2.0 must commit nothing of batch 1"
        assert refused["committed"] == [0], "0.2.0 recorded nothing committed"
        assert refused["spark_commits"] == [0], refused

        final_run = run_driver(
            CURRENT,
            driver_spec(postgres_server.dsn, c.query_spec()),
            tmp_path / "driver",
            "current code, restarted after 0.2.0 refused",
        )
        assert_finished(final_run, c)
        assert final_run.code == 0, final_run.tail()
        final = pg.snapshot(c)
        assert final["ids"] == expected(EVERY_BATCH), "every row exactly once"
        assert final["prepared"] == [], "no prepared transaction of the sink left"
        assert final["spark_commits"] == list(EVERY_BATCH), final
    finally:
        pg.drop(c)

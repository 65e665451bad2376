"""Executors and Python workers killed on the standalone cluster, with task retries on.

Every fault hits partition 0 of micro-batch 1 (batch 0 has warmed both executors up; batch 2 shows
the query goes on), fired by a probe rule from inside the hook (``tests.cluster.probes``), so it
lands at the same protocol point every time. The input carries poison rows (every id ending in 7,
refused by the target) and the sink sets them aside (``bad_rows="dead_letter"``): each test then
checks, by content, that every good id is in the target exactly once and every poison id in the
dead letters exactly once, and that nothing is left behind (no prepared transaction of the
sink; no open Kafka transaction), and that the fault really happened: the killed process is gone
and Spark counted a failed task attempt (and, for an executor, removed it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.cluster.probes import pid_alive
from tests.cluster.support import (
    CONNECTORS,
    Scenario,
    describe,
    failed_tasks,
    removed_executors,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
]

BATCH = 1

# Not in the default run (20-minute budget): the MariaDB sinks' executor-loss cases (the MariaDB
# dialect's cluster proof there is its zombie scenarios, test_cluster_zombie.py), and PostgreSQL's
# markers sink's: an attempt that committed with its marker and died, whose retry finds the marker
# and writes nothing, is the Kafka sink's case (the same protocol, its marker in a topic), and the
# re-read of PostgreSQL's markers that skips a partition is tests/chaos/test_target_faults.py's
# pg-markers-written.
LOSS_CONNECTORS = [
    c if c in ("pg-coordinated", "kafka") else pytest.param(c, marks=pytest.mark.extended)
    for c in CONNECTORS
]


def finish(scenario: Scenario, result: dict[str, Any]) -> None:
    """Every micro-batch committed; every id once; nothing left open or prepared."""
    assert result["rc"] == 0, f"the query did not finish: {describe(result)}"
    outcomes = [m["outcome"] for m in result["metrics"]]
    assert outcomes == ["committed"] * scenario.batches, describe(result)
    scenario.assert_exactly_once()
    assert scenario.leftovers() == [], describe(result)


@pytest.mark.parametrize("connector", LOSS_CONNECTORS)
@pytest.mark.parametrize(
    "when",
    [
        # rows written in an open transaction, not yet prepared (coordinated) / committed (markers).
        # Not in the default run (20-minute budget): for the sink this is the process holding an
        # open transaction dying mid-write, then Spark's retry -- what
        # test_a_python_worker_killed_mid_write_is_retried plays for every sink; only the
        # executor's removal differs, which is Spark's.
        pytest.param("before", marks=pytest.mark.extended),
        # prepared (coordinated) / committed with its marker (markers), the task's result not yet
        # reported
        "after",
    ],
)
def test_an_executor_sigkilled_in_phase_1(
    make_scenario: Callable[..., Scenario], connector: str, when: str
) -> None:
    scenario = make_scenario(connector, poison=True)
    hook = scenario.commit_hook
    scenario.control.add(hook, "kill-executor", when=when, batch=BATCH, partition=0, attempt=0)
    result = scenario.start_driver().wait()

    [kill] = scenario.control.events(event="kill-executor")
    assert not pid_alive(kill["target"]), "the executor JVM survived its SIGKILL"
    assert removed_executors(result), f"Spark did not lose the executor: {describe(result)}"
    assert failed_tasks(result) >= 1, describe(result)
    finish(scenario, result)
    committed = scenario.attempts(hook, BATCH, 0)
    if when == "before":
        # attempt 0 died before its commit point: a retry wrote the partition
        assert committed, "no retry committed the partition"
        assert min(committed) >= 1, committed
    elif connector.endswith("-coordinated"):
        # attempt 0 prepared and died: a retry rolled its orphan back and prepared again
        assert 0 in committed, committed
        assert max(committed) >= 1, committed
    else:
        # attempt 0 committed with its marker and died: the retry found the marker, wrote nothing
        assert committed == [0], committed


@pytest.mark.postgres
def test_executors_sigkilled_during_phase_2_do_not_matter(
    make_scenario: Callable[..., Scenario],
) -> None:
    """The coordinated protocol: after the decision the driver commits, needing no executor."""
    scenario = make_scenario("pg-coordinated", poison=True)
    scenario.control.add("commit", "kill-app-executors", batch=BATCH, partition=0)
    result = scenario.start_driver().wait()

    [kill] = scenario.control.events(event="kill-app-executors")
    assert len(kill["targets"]) == 2, kill
    assert all(kill["gone"]), kill
    removed = removed_executors(result)
    assert len(removed) >= 2, f"Spark did not lose both executors: {describe(result)}"
    finish(scenario, result)
    # Phase 2 of the batch went on without them, and the next batch ran on new executors.
    assert scenario.attempts("commit", BATCH, 0) == [0]
    later = {
        e["executor_pid"]
        for e in scenario.control.events(event="hook", hook="begin_transaction", batch=BATCH + 1)
    }
    assert later, "batch 2 never began"
    assert not later & set(kill["targets"]), (later, kill["targets"])


# Only Kafka's case is in the default run (20-minute budget): for a PostgreSQL sink the open
# transaction dying with its connection mid-write, then Spark's retry, is also
# tests/chaos/test_target_faults.py's server restarted during phase 1 (both protocols).
WORKER_KILL_CONNECTORS = [
    c if c == "kafka" else pytest.param(c, marks=pytest.mark.extended) for c in CONNECTORS
]


@pytest.mark.parametrize("connector", WORKER_KILL_CONNECTORS)
def test_a_python_worker_killed_mid_write_is_retried(
    make_scenario: Callable[..., Scenario], connector: str
) -> None:
    scenario = make_scenario(connector, poison=True)
    scenario.control.add("write", "kill-python-worker", when="after", batch=BATCH, partition=0)
    result = scenario.start_driver().wait()

    [kill] = scenario.control.events(event="kill-python-worker")
    assert not pid_alive(kill["target"]), "the Python worker survived its SIGKILL"
    assert failed_tasks(result) >= 1, describe(result)
    finish(scenario, result)
    committed = scenario.attempts(scenario.commit_hook, BATCH, 0)
    assert committed, "no retry committed the partition"
    assert min(committed) >= 1, committed

"""A zombie attempt on the standalone cluster: frozen, declared lost, retried, resumed late.

See :mod:`tests.cluster.zombie`. The attempt of partition 0 of micro-batch 1 is frozen right before
its commit point -- ``commit_with_marker`` (protocol B: its rows in an open transaction) or
``pre_commit`` (protocol A: not yet prepared) -- together with its whole worker. The driver declares
its executor lost after ``spark.network.timeout`` and reruns the task on the other worker; only then
does the zombie resume and try to commit. Micro-batch 2 waits (a ``pause`` rule) until the zombie
has acted, so that the query goes on after it.

What fences the zombie (docs/guarantees.md, "Zombie attempts"):

* Kafka: the retry's producer bumps the epoch of the slot's ``transactional.id``; the zombie's
  commit fails with "producer fenced", its open transaction aborted.
* PostgreSQL, protocol B: the retry finds the zombie holding the slot's advisory lock and
  terminates its backend (rolling its transaction back); the zombie's commit fails.
* PostgreSQL, protocol A: nothing stops the zombie from preparing; its prepared transaction is
  named by no decision and the sweep after the next batch's phase 2 rolls it back.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cluster.probes import pid_alive
from tests.cluster.support import Scenario, describe, eventually, removed_executors
from tests.cluster.zombie import play_zombie
from twophase_dev import SparkCluster

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
]

BATCH = 1


def run_with_zombie(scenario: Scenario, cluster: SparkCluster) -> tuple[object, dict[str, object]]:
    hook = scenario.commit_hook
    rule = scenario.control.add(hook, "pause", batch=BATCH, partition=0, attempt=0)
    gate = scenario.control.add("begin_transaction", "pause", batch=BATCH + 1, times=2)
    driver = scenario.start_driver()
    try:
        zombie = play_zombie(cluster, scenario.control, rule, alive=driver.alive)
    finally:
        scenario.control.release(rule.rule_id)
        scenario.control.release(gate.rule_id)
    result = driver.wait()

    # A zombie for real: frozen until Spark declared its executor lost (no heartbeat) and a newer
    # attempt was done; then it ran its hook, after the retry, while the query went on.
    reasons = removed_executors(result)
    assert any("heartbeat" in r.lower() for r in reasons.values()), describe(result)
    assert zombie.retry["attempt"] >= 1
    assert zombie.outcome["t"] > zombie.retry["t"]
    assert result["rc"] == 0, describe(result)
    assert [m["outcome"] for m in result["metrics"]] == ["committed"] * scenario.batches
    scenario.assert_exactly_once()
    assert scenario.leftovers() == [], describe(result)
    # Resumed, the worker daemon killed the lost executor and its Python workers.
    assert eventually(lambda: not pid_alive(zombie.python_pid)), "the zombie still runs"
    assert eventually(lambda: not pid_alive(zombie.executor_pid)), "its executor still runs"
    return zombie, result


def test_kafka_fences_a_zombie_that_commits_after_the_retry(
    make_scenario: Callable[..., Scenario], spark_cluster: SparkCluster
) -> None:
    scenario = make_scenario("kafka")
    zombie, _result = run_with_zombie(scenario, spark_cluster)
    assert zombie.outcome["outcome"] == "error", f"the zombie committed: {zombie.outcome}"
    assert "fenced" in zombie.outcome["error"], zombie.outcome


def test_postgres_markers_fence_a_zombie_that_commits_after_the_retry(
    make_scenario: Callable[..., Scenario], spark_cluster: SparkCluster
) -> None:
    scenario = make_scenario("pg-B")
    zombie, _result = run_with_zombie(scenario, spark_cluster)
    assert zombie.outcome["outcome"] == "error", f"the zombie committed: {zombie.outcome}"


def test_postgres_two_phase_sweeps_a_zombie_that_prepares_after_the_retry(
    make_scenario: Callable[..., Scenario], spark_cluster: SparkCluster
) -> None:
    scenario = make_scenario("pg-A")
    zombie, _result = run_with_zombie(scenario, spark_cluster)
    assert zombie.outcome["outcome"] == "ok", f"the zombie could not prepare: {zombie.outcome}"
    swept = scenario.control.events(
        event="hook", hook="recover_and_abort", batch=BATCH, partition=0, attempt=0, outcome="ok"
    )
    assert swept, "nothing rolled the zombie's prepared transaction back"

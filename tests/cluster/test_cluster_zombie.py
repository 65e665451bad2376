"""A zombie attempt on the standalone cluster: frozen, declared lost, retried, resumed late.

See :mod:`tests.cluster.zombie`. The attempt of partition 0 of micro-batch 1 is frozen right before
its commit point -- ``commit_with_marker`` (the markers protocol: its rows in an open
transaction) or ``pre_commit`` (the coordinated protocol: not yet prepared) -- together with its
whole worker. The driver declares
its executor lost after ``spark.network.timeout`` and reruns the task on the other worker; only then
does the zombie resume and try to commit. Micro-batch 2 waits (a ``pause`` rule) until the zombie
has acted, so that the query goes on after it.

What fences the zombie (docs/guarantees.md, "Zombie attempts"):

* Kafka: the retry's producer bumps the epoch of the slot's ``transactional.id``; the zombie's
  commit fails with "producer fenced", its open transaction aborted.
* PostgreSQL, the markers protocol: the retry finds the zombie holding the slot's advisory lock and
  terminates its backend (rolling its transaction back); the zombie's commit fails.
* PostgreSQL, the coordinated protocol: once the driver has finished the batch, its fence
  (``twophase_fences``) refuses the zombie before ``PREPARE TRANSACTION``; a zombie that prepared
  before that is named by no decision, and the sweep (or the fence, which waits for it) rolls it
  back. A zombie that wakes after the query ended cannot prepare at all.
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


# MariaDB's cases prove the dialect (the retry kills the zombie's connection, which holds the
# slot's named lock; XA PREPARE drops shared locks, so the fence is the transaction's own row in
# twophase_prepared); PostgreSQL's are the default run's.
MARKERS = ["pg-markers", pytest.param("maria-markers", marks=pytest.mark.extended)]
COORDINATED = ["pg-coordinated", pytest.param("maria-coordinated", marks=pytest.mark.extended)]


@pytest.mark.parametrize("connector", MARKERS)
def test_the_markers_protocol_fences_a_zombie_that_commits_after_the_retry(
    make_scenario: Callable[..., Scenario], spark_cluster: SparkCluster, connector: str
) -> None:
    scenario = make_scenario(connector)
    zombie, _result = run_with_zombie(scenario, spark_cluster)
    assert zombie.outcome["outcome"] == "error", f"the zombie committed: {zombie.outcome}"


@pytest.mark.postgres
@pytest.mark.extended  # the zombie resumed after the query ended is the default run's case
def test_postgres_two_phase_fences_or_sweeps_a_zombie_that_prepares_after_the_retry(
    make_scenario: Callable[..., Scenario], spark_cluster: SparkCluster
) -> None:
    scenario = make_scenario("pg-coordinated")
    zombie, _result = run_with_zombie(scenario, spark_cluster)
    # The zombie resumes right after the retry prepared: the driver may or may not have finished
    # the batch (and fenced it) by then. Fenced, it never prepares; otherwise it is swept.
    if zombie.outcome["outcome"] == "error":
        assert "fenced" in zombie.outcome["error"], zombie.outcome
    else:
        swept = scenario.control.events(
            event="hook", hook="recover_and_abort", batch=BATCH, partition=0, attempt=0
        )
        assert swept, "nothing rolled the zombie's prepared transaction back"


@pytest.mark.parametrize("connector", COORDINATED)
def test_the_coordinated_protocol_fences_a_zombie_that_wakes_after_the_query_ended(
    make_scenario: Callable[..., Scenario], spark_cluster: SparkCluster, connector: str
) -> None:
    # Issue 22: the zombie of the last batch resumes only after the driver process has ended,
    # when no sweep will ever run again. It must not leave a prepared transaction behind.
    scenario = make_scenario(connector, batches=2)
    last = scenario.batches - 1
    rule = scenario.control.add("pre_commit", "pause", batch=last, partition=0, attempt=0)
    driver = scenario.start_driver()

    def retried_and_driver_ended(event: dict[str, object]) -> bool:
        retry = (
            event.get("event") == "hook"
            and event.get("hook") == "pre_commit"
            and event.get("batch") == last
            and event.get("partition") == 0
            and event.get("outcome") == "ok"
            and int(str(event.get("attempt", 0))) > 0
        )
        return retry and not driver.alive()

    try:
        zombie = play_zombie(
            spark_cluster, scenario.control, rule, retried=retried_and_driver_ended, timeout=150
        )
    finally:
        scenario.control.release(rule.rule_id)
    result = driver.wait()
    assert result["rc"] == 0, describe(result)
    assert [m["outcome"] for m in result["metrics"]] == ["committed"] * scenario.batches
    reasons = removed_executors(result)
    assert any("heartbeat" in r.lower() for r in reasons.values()), describe(result)
    assert zombie.outcome["outcome"] == "error", f"the zombie prepared: {zombie.outcome}"
    assert "fenced" in zombie.outcome["error"], zombie.outcome
    scenario.assert_exactly_once()
    assert scenario.leftovers() == [], "a prepared transaction outlived its run"

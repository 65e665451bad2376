"""Both connectors, both PostgreSQL protocols, end to end on the standalone cluster (no faults)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.cluster.support import CONNECTORS, Scenario, describe, failed_tasks

pytestmark = [pytest.mark.cluster, pytest.mark.integration, pytest.mark.slow]


# Not in the default run (20-minute budget): every sink runs the same query on the cluster in the
# fault tests beside this file (test_cluster_executor_loss.py, test_cluster_zombie.py), checked by
# content the same way, and the coordinated PostgreSQL and Kafka sinks again in the deployment
# test (tests/deploy); what a fault-free run adds is only the absence of failed tasks.
@pytest.mark.extended
@pytest.mark.parametrize("connector", CONNECTORS)
def test_a_streaming_query_on_the_cluster_writes_every_row_once(
    make_scenario: Callable[..., Scenario], connector: str
) -> None:
    scenario = make_scenario(connector)
    result = scenario.run()
    scenario.assert_exactly_once()
    assert scenario.leftovers() == []
    assert [m["outcome"] for m in result["metrics"]] == ["committed"] * scenario.batches, describe(
        result
    )
    # It ran on the cluster: the participants ran in Python workers of both executors.
    executors = {
        e["executor_pid"] for e in scenario.control.events(event="hook", hook="begin_transaction")
    }
    assert None not in executors
    assert len(executors) == 2, f"participants ran on executors {executors}"
    assert failed_tasks(result) == 0, describe(result)

"""The replicated targets' faults of the chaos harness, each at a chosen point (issue 40, item 5).

A failover of PostgreSQL (to a synchronous standby) and of MariaDB (to a semi-synchronous replica)
right after the decision of batch 1, the driver held there until the primary is gone; a rolling
restart of the 3-broker Kafka cluster from the first write of batch 0, the starts of batches 1
and 2 held until the next broker is down. Each runs a real Spark driver through
:func:`tests.chaos.harness.run_trial` and asserts that the fault fired (its evidence: the standby
was synchronous, the primary is gone, the promoted server takes writes; every broker restarted
with the query's events during each outage) and that the trial ended ``exact``.

Extended: each starts servers of its own (a primary and its standby or replica, or three brokers:
10-50 s) beside a suite over its budget, and a trial takes 30-60 s more; run them with
``pytest -m extended tests/chaos/test_ha.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.chaos.harness import Fault, TrialPlan, own_infra, run_trial

pytestmark = [
    pytest.mark.integration,
    pytest.mark.chaos,
    pytest.mark.slow,
    pytest.mark.extended,
    pytest.mark.timeout(600),
]


def _plan(sink: str, fault: Fault) -> TrialPlan:
    return TrialPlan(
        seed="ha",
        index=0,
        sink=sink,
        pipeline="repartition_key",
        partitions=2,
        staging=False,
        source="files",
        batches=3,
        rows=60,
        topic_partitions=3,
        faults=[fault],
    )


@pytest.mark.parametrize(
    "sink",
    [
        pytest.param("pg-coordinated-ha", marks=pytest.mark.postgres),
        pytest.param("maria-coordinated-ha", marks=pytest.mark.mariadb),
    ],
)
def test_a_failover_after_the_decision_is_exact(sink: str, tmp_path: Path) -> None:
    fault = Fault("failover", {"src": "driver", "name": "decided", "batch": 1}, sync=True)
    with own_infra([sink], tmp_path / "servers") as infra:
        result = run_trial(_plan(sink, fault), infra, tmp_path / "trial")
    print(result.line(), result.notes, fault.evidence, sep="\n")
    assert fault.fired, fault.detail
    assert fault.evidence["prepared_on_promoted"] == 2  # both of batch 1
    assert result.outcome == "exact", result.line()


@pytest.mark.kafka
@pytest.mark.kafka_cluster
def test_a_rolling_restart_under_the_query_is_exact(tmp_path: Path) -> None:
    fault = Fault(
        "broker_restart",
        {"src": "task", "name": "write", "batch": 0, "partition": 0},
        sync=True,
        params={"target": "rolling", "order": [1, 2, 3]},
    )
    with own_infra(["kafka-ha"], tmp_path / "servers") as infra:
        result = run_trial(_plan("kafka-ha", fault), infra, tmp_path / "trial")
    print(result.line(), result.notes, fault.evidence, sep="\n")
    assert fault.fired, fault.detail
    brokers = fault.evidence["brokers"]
    assert [b["node"] for b in brokers] == [1, 2, 3]
    assert all(b["events_meanwhile"] > 0 for b in brokers), brokers  # each outage met the query
    assert result.outcome == "exact", result.line()

"""The chaos harness draws the same plans as before new sinks and faults came (docs/chaos.md).

Trial ``i`` of seed ``S`` is reproduced by ``random.Random(f"{S}:{i}")`` and the ``--sinks`` list:
a sink or fault added later must leave every plan drawn without it unchanged, so that a failed
trial of an old run can be run again. The 3,200 plans below (trials 0-199 of four seeds, with four
``--sinks`` lists of the sinks that existed before the high-availability ones), with and without
network partitions, are pinned by a digest of what each plan draws.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from tests.chaos.harness import draw_plan

pytestmark = pytest.mark.unit

SEEDS = (21, 42, 1123, 2512)
SINK_LISTS = (
    ("kafka", "pg-coordinated", "pg-markers"),
    ("pg-coordinated", "pg-markers"),
    ("maria-coordinated", "maria-markers"),
    ("kafka", "pg-coordinated", "pg-markers", "maria-coordinated", "maria-markers"),
)
#: sha256 of the plans, computed at commit 4de8bfb (before the high-availability sinks).
DIGESTS = {
    False: "56014425f98e97f913432b2b607f2f3427eb7bad673cb3e0bfc9afd10decc68b",
    True: "9ebe0c60c4aa98f58a82e7ab7457787a12521c2773e6114937f9c66024fdcc50",
}


def _drawn(plan: Any) -> list[Any]:
    """What a plan draws (not the fields a run fills in, nor fields added since)."""
    faults = [[f.kind, f.point, f.sync, f.delay, f.params] for f in plan.faults]
    return [
        plan.sink,
        plan.pipeline,
        plan.partitions,
        plan.staging,
        plan.source,
        plan.batches,
        plan.rows,
        plan.topic_partitions,
        faults,
    ]


def digest(network_partitions: bool) -> str:
    """The sha256 of the 3,200 plans' draws, in order."""
    sha = hashlib.sha256()
    for seed in SEEDS:
        for sinks in SINK_LISTS:
            for index in range(200):
                plan = draw_plan(seed, index, sinks, network_partitions=network_partitions)
                sha.update(json.dumps(_drawn(plan), sort_keys=True).encode())
    return sha.hexdigest()


@pytest.mark.parametrize("network_partitions", [False, True], ids=["no-partitions", "partitions"])
def test_old_seeds_draw_the_plans_they_drew_before(network_partitions: bool) -> None:
    assert digest(network_partitions) == DIGESTS[network_partitions]


HA_SINKS = ("pg-coordinated-ha", "pg-markers-ha", "maria-coordinated-ha", "maria-markers-ha")


@pytest.mark.parametrize("sinks", [(*HA_SINKS, "kafka-ha"), HA_SINKS, ("kafka-ha",)])
def test_a_replicated_sink_draws_one_fault_of_its_target_and_no_partition(
    sinks: tuple[str, ...],
) -> None:
    usual_counts: set[int] = set()
    for index in range(200):
        plan = draw_plan(7, index, sinks, network_partitions=True)
        kinds = [f.kind for f in plan.faults]
        own = "broker_restart" if plan.sink == "kafka-ha" else "failover"
        assert kinds.count(own) == 1, plan
        assert kinds[-1] == own, plan  # drawn after the others
        usual_counts.add(len(kinds) - 1)
        assert not {"partition_short", "partition_long"} & set(kinds), plan
        assert not any(k.startswith(("pg_restart", "maria_restart", "kafka_")) for k in kinds)
        fault = plan.faults[-1]
        assert fault.point.get("name") != "staged" or plan.staging, plan  # always reached
        if own == "broker_restart" and fault.params["target"] == "coordinator":
            assert fault.point["name"] in ("write", "commit_with_marker"), plan
    # 0-2 of the usual faults beside it, and each of those counts is drawn
    assert usual_counts == {0, 1, 2}, usual_counts


def test_the_sinks_that_existed_before_never_draw_the_replicated_faults() -> None:
    for seed in SEEDS:
        for index in range(200):
            plan = draw_plan(seed, index, SINK_LISTS[-1], network_partitions=True)
            assert not {"failover", "broker_restart"} & {f.kind for f in plan.faults}

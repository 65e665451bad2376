"""twophase_dev's KafkaCluster without brokers: its settings, members, the coordinator's hash."""

from __future__ import annotations

import pytest

from twophase_dev import DevInfraError, KafkaCluster
from twophase_dev._kafka._admin import java_string_hash
from twophase_dev._kafka._cluster import REPLICATED_CONFIG

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("", 0),
        ("abc", 96354),
        ("hello", 99162322),
        ("Hello World", -862545276),  # past 2**31: wraps like a Java int
        ("é€\U0001d11e", 16751501),  # UTF-16 code units: the clef is a surrogate pair
    ],
)
def test_the_hash_is_javas_string_hashcode(text: str, code: int) -> None:
    assert java_string_hash(text) == code


def test_a_cluster_is_replicated_like_production() -> None:
    cluster = KafkaCluster(config={"min.insync.replicas": "3"})
    assert cluster.config["min.insync.replicas"] == "3"  # the caller's settings win
    assert cluster.config["transaction.state.log.replication.factor"] == "3"
    assert REPLICATED_CONFIG["transaction.state.log.min.isr"] == "2"
    assert REPLICATED_CONFIG["offsets.topic.replication.factor"] == "3"


def test_members_form_one_quorum_of_distinct_nodes_and_ports() -> None:
    cluster = KafkaCluster()
    cluster._make()
    try:
        brokers = cluster.brokers
        assert sorted(brokers) == [1, 2, 3]
        voters = {b.extra_config["controller.quorum.voters"] for b in brokers.values()}
        assert len(voters) == 1
        assert [b.extra_config["node.id"] for b in brokers.values()] == ["1", "2", "3"]
        assert len({b.cluster_id for b in brokers.values()}) == 1
        ports = [p for b in brokers.values() for p in (b.port, b.controller_port)]
        assert len(set(ports)) == 6
        assert all(
            f"@127.0.0.1:{b.controller_port}" in next(iter(voters)) for b in brokers.values()
        )
        assert not any(b.is_running() for b in brokers.values())
    finally:
        cluster.stop()  # removes the work directories _make() created
    assert cluster.brokers == {}


def test_one_broker_is_not_a_cluster() -> None:
    with pytest.raises(DevInfraError, match="2 brokers or more"):
        KafkaCluster(size=1)
    with pytest.raises(DevInfraError, match="call start"):
        _ = KafkaCluster().bootstrap_servers

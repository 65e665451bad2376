"""The chaos harness's real-time trials: what they draw, and the armed pause they wait at.

A real-time trial (``tests/chaos/realtime.py``) runs for about a minute against real servers, so
it is in the extended run only (``tests/chaos/test_realtime_trials.py``); what it draws, and the
pause point that holds a task at a hook only after a time, are checked here.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from tests.chaos import realtime
from tests.chaos.events import go, probe, read_events
from tests.chaos.harness import DATABASE, FAULT_KINDS, SINKS, draw_plan, expected_output

pytestmark = pytest.mark.unit

RT_SINKS = list(realtime.RT_SINKS)


def test_the_realtime_sinks_come_last_and_are_drawn_only_when_named() -> None:
    assert SINKS[-3:] == tuple(RT_SINKS)
    assert "kill_workers" in FAULT_KINDS
    for index in range(200):
        assert not draw_plan(7, index).realtime  # the default sinks
    drawn = {draw_plan(7, index, RT_SINKS).sink for index in range(60)}
    assert drawn == set(RT_SINKS)


@pytest.mark.parametrize("sink", RT_SINKS)
def test_a_realtime_plan_is_a_passthrough_over_kafka_with_faults_in_its_window(sink: str) -> None:
    low, high = realtime.EPOCH_SECONDS
    kinds = set(realtime.fault_kinds(sink, DATABASE.get(sink)))
    counts: set[int] = set()
    drawn: set[str] = set()
    for index in range(100):
        plan = draw_plan(11, index, [sink], network_partitions=True, bad_rows=1.0)
        assert plan.realtime
        assert (plan.pipeline, plan.source, plan.staging) == ("passthrough", "kafka", False)
        assert plan.partitions == plan.topic_partitions == plan.write_partitions
        assert plan.topic_partitions in (2, 3)
        assert low <= plan.epoch_seconds <= high
        assert realtime.BURSTS[0] <= plan.batches <= realtime.BURSTS[1]
        assert len(plan.burst_pauses) == plan.batches - 2
        assert realtime.RATES[0] <= plan.rate <= realtime.RATES[1]
        assert plan.bad_rows == {}  # neither bad rows nor partitions, even when asked
        counts.add(len(plan.faults))
        span = plan.production_seconds
        for fault in plan.faults:
            drawn.add(fault.kind)
            assert fault.kind in kinds
            if "after" in fault.params:  # at a hook of one partition, armed within the window
                assert fault.sync
                assert fault.point["src"] == "task"
                assert fault.point["name"] in realtime.HOOKS
                assert 0 <= fault.point["partition"] < plan.topic_partitions
                assert 0.5 <= fault.params["after"] <= span
            else:  # at a time of the clock
                assert not fault.sync
                assert fault.point == {"src": "clock", "name": "production"}
                assert 0.5 <= fault.delay <= span + plan.epoch_seconds / 2
        assert expected_output(plan) == {
            b * 1000 + i: f"p{b * 1000 + i}" for b in range(plan.batches) for i in range(plan.rows)
        }
    assert counts == {1, 2, 3}, "a trial draws one to three faults, each count in 100 plans"
    assert drawn == kinds, f"never drawn in 100 plans: {sorted(kinds - drawn)}"


def test_a_realtime_trial_is_the_same_for_the_same_seed_and_index() -> None:
    first = draw_plan("5454", 3, RT_SINKS)
    again = draw_plan("5454", 3, list(reversed(RT_SINKS)))
    assert first == again
    assert "realTime=" in first.describe()


def test_realtime_sinks_need_their_base_servers_and_kafka() -> None:
    assert realtime.servers_needed(["pg-markers-rt"]) == ["pg-markers", "kafka"]
    assert realtime.servers_needed(["maria-markers-rt", "kafka-rt"]) == ["maria-markers", "kafka"]
    assert realtime.servers_needed(["pg-coordinated"]) == ["pg-coordinated"]
    assert "kill_workers" in realtime.fault_kinds("kafka-rt", None)
    assert "pg_restart_immediate" in realtime.fault_kinds("pg-markers-rt", "pg")
    assert "maria_restart_kill" in realtime.fault_kinds("maria-markers-rt", "maria")


def test_an_armed_pause_holds_only_once_the_harness_arms_it(tmp_path: Path) -> None:
    events, control = tmp_path / "events.jsonl", tmp_path / "control"
    control.mkdir()
    pauses = [{"src": "task", "name": "write", "partition": 1, "id": "f0", "armed": True}]

    def reach() -> None:
        probe(str(events), str(control), pauses, src="task", name="write", partition=1)

    started = time.monotonic()
    reach()  # not armed: passes at once
    assert time.monotonic() - started < 1
    assert [e["name"] for e in read_events(events)[0]] == ["write"]

    (control / "arm-f0").touch()
    waiter = threading.Thread(target=reach)
    waiter.start()
    deadline = time.monotonic() + 5
    while not any(e["name"] == "paused" for e in read_events(events)[0]):
        assert time.monotonic() < deadline, "the armed pause did not hold"
        time.sleep(0.02)
    assert waiter.is_alive()
    go(control, "f0")
    waiter.join(5)
    assert not waiter.is_alive()
    reach()  # released: passes at once
    names = [e["name"] for e in read_events(events)[0]]
    assert names == ["write", "write", "paused", "write"]

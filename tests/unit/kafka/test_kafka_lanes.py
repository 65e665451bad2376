"""Producer lanes: each Python worker on a host claims a lane of its own (``_lanes``)."""

from __future__ import annotations

import multiprocessing
import os
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from twophase.connectors.kafka import _lanes

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def released() -> Iterator[None]:
    _lanes.release_all()
    yield
    _lanes.release_all()


def _hold_lane(key: str, lanes: int, claimed: Any, stop: Any) -> None:
    claimed.put(_lanes.lane_of_this_process(key, lanes))
    stop.wait(30)


class Workers:
    """Python worker stand-ins: processes that claim a lane and hold it until stopped."""

    def __init__(self) -> None:
        self.ctx = multiprocessing.get_context("spawn")
        self.procs: list[tuple[multiprocessing.process.BaseProcess, Any]] = []

    def start(self, key: str, lanes: int) -> tuple[multiprocessing.process.BaseProcess, int]:
        # One queue and event per worker: a killed one may leave them unusable.
        claimed, stop = self.ctx.Queue(), self.ctx.Event()
        proc = self.ctx.Process(target=_hold_lane, args=(key, lanes, claimed, stop))
        proc.start()
        self.procs.append((proc, stop))
        return proc, int(claimed.get(timeout=60))

    def close(self) -> None:
        for proc, stop in self.procs:
            if proc.is_alive():
                stop.set()
            proc.join(30)


@pytest.fixture
def workers() -> Iterator[Workers]:
    pool = Workers()
    yield pool
    pool.close()


def test_workers_on_one_host_claim_distinct_lanes_lowest_first(workers: Workers) -> None:
    key = f"t-{uuid.uuid4().hex}"
    lanes = [workers.start(key, 4)[1] for _ in range(3)]
    assert lanes == [0, 1, 2]
    # this process is the fourth worker: the last free lane, the same on every call
    assert _lanes.lane_of_this_process(key, 4) == 3
    assert _lanes.lane_of_this_process(key, 4) == 3


def test_a_dead_workers_lane_is_free_again(workers: Workers) -> None:
    key = f"t-{uuid.uuid4().hex}"
    first, lane = workers.start(key, 4)
    assert lane == 0
    first.kill()  # a killed worker holds nothing: the lock goes with the process
    first.join(30)
    assert workers.start(key, 4)[1] == 0


def test_more_workers_than_lanes_share_a_lane_chosen_by_process_id(workers: Workers) -> None:
    key = f"t-{uuid.uuid4().hex}"
    assert [workers.start(key, 2)[1] for _ in range(2)] == [0, 1]
    assert _lanes.lane_of_this_process(key, 2) == os.getpid() % 2


def test_identities_have_lanes_of_their_own_and_one_lane_needs_no_claim(workers: Workers) -> None:
    a, b = f"a-{uuid.uuid4().hex}", f"b-{uuid.uuid4().hex}"
    assert workers.start(a, 4)[1] == 0
    assert _lanes.lane_of_this_process(b, 4) == 0
    assert _lanes.lane_of_this_process(a, 4) == 1
    assert _lanes.lane_of_this_process(a, 1) == 0

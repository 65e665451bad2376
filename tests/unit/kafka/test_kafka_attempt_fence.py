"""Fence records: their encoding and which attempts they exclude."""

from __future__ import annotations

import pytest

from twophase import TaskContext
from twophase.connectors.kafka._attempt_fence import (
    Fence,
    decode_fence,
    encode_fence,
    fence_key,
    is_fence_key,
)
from twophase.errors import CoordinatorLogError

pytestmark = pytest.mark.unit


def task(epoch: int, batch: int, partition: int, attempt: int) -> TaskContext:
    return TaskContext("s", "k.1", batch, partition, attempt, epoch)


def test_a_recovery_fence_excludes_every_attempt_of_earlier_runs_only() -> None:
    fence = Fence(5)
    assert fence.excludes(task(4, 99, 0, 3))
    assert not fence.excludes(task(5, 0, 0, 0))
    assert not fence.excludes(task(6, 0, 2, 0))


def test_a_retry_fence_excludes_earlier_attempts_of_its_partition_only() -> None:
    fence = Fence.of_retry(task(3, 7, 1, 2))
    assert fence.excludes(task(3, 7, 1, 1))
    assert fence.excludes(task(3, 6, 1, 5))  # an attempt of an earlier batch
    assert fence.excludes(task(2, 9, 1, 9))  # of an earlier run
    assert not fence.excludes(task(3, 7, 1, 2))  # itself
    assert not fence.excludes(task(3, 7, 1, 3))  # a later retry
    assert not fence.excludes(task(3, 8, 1, 0))  # the next batch
    assert not fence.excludes(task(3, 7, 0, 0))  # another partition


def test_fence_records_round_trip_and_are_told_from_markers_by_their_key() -> None:
    fence = Fence(3, 7, 1, 2)
    assert decode_fence(encode_fence(fence), where="t[0]@1") == fence
    prefix = b"k.1/"
    assert is_fence_key(fence_key("k.1", "abc"), prefix)
    assert not is_fence_key(b"k.1/7/1/2/abc", prefix)


def test_a_record_under_a_fence_key_that_is_not_a_fence_is_refused_naming_where() -> None:
    with pytest.raises(CoordinatorLogError, match=r"t\[0\]@9 is not a valid twophase fence"):
        decode_fence(b'{"v": 1, "identity": "k.1"}', where="t[0]@9")

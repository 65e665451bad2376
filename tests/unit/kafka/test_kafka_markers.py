"""Marker records: keys unique per commit, values round-trip, bad values are named."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase import Fingerprint, Marker
from twophase.connectors.kafka._marker_records import (
    decode_marker,
    encode_marker,
    identity_prefix,
    marker_key,
    new_nonce,
)
from twophase.errors import CoordinatorLogError

pytestmark = pytest.mark.unit

markers = st.builds(
    Marker,
    identity=st.from_regex(r"[A-Za-z0-9_.-]{1,64}\.[0-9a-f]{16}", fullmatch=True),
    batch_id=st.integers(0, 2**62),
    partition_id=st.integers(0, 100_000),
    attempt=st.integers(0, 1000),
    fingerprint=st.builds(
        Fingerprint, st.integers(0, 2**40), st.integers(0, 2**64 - 1), st.sampled_from((1, 2))
    ),
)


@given(markers, st.integers(0, 10**9))
def test_marker_values_round_trip(marker: Marker, records: int) -> None:
    value = encode_marker(marker, transactional_id="twophase-x-1", records=records)
    assert decode_marker(value) == marker
    body = json.loads(value)
    assert body["records"] == records
    assert body["transactional_id"] == "twophase-x-1"


@given(markers)
def test_marker_keys_start_with_the_identity_and_are_unique_per_commit(marker: Marker) -> None:
    first = marker_key(marker, new_nonce())
    second = marker_key(marker, new_nonce())
    assert first.startswith(identity_prefix(marker.identity))
    # The same identity, batch, partition and attempt committed twice (a replay
    # in another layout) must not share a key, or compaction could drop one.
    assert first != second


@pytest.mark.parametrize(
    "value",
    [
        b"not json",
        b"[1, 2]",
        b'{"v": 1, "identity": "x"}',
        b'{"v": 1, "identity": "x", "batch": 1, "partition": 0, "attempt": 0, "fingerprint": "zz"}',
    ],
)
def test_invalid_marker_values_raise_a_named_error(value: bytes) -> None:
    with pytest.raises(CoordinatorLogError, match="control topic"):
        decode_marker(value, where="the control topic[0]@42")


def test_markers_of_another_format_version_name_it_and_the_fix() -> None:
    with pytest.raises(CoordinatorLogError, match="format version 99, written by a newer") as err:
        decode_marker(b'{"v": 99}')
    assert "on every driver and executor" in str(err.value)


def test_a_marker_of_the_release_before_fingerprint_versions_reads_as_version_1() -> None:
    value = (
        b'{"attempt":0,"batch":7,"fingerprint":"3:00000000000000ff","identity":"q.0123456789abcdef",'
        b'"partition":2,"records":3,"transactional_id":"twophase-q-2","v":1}'
    )
    assert decode_marker(value).fingerprint == Fingerprint(3, 255, version=1)

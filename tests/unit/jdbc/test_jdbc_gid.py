"""Global transaction ids: format, parse, PostgreSQL's 200-byte limit, identity prefixes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from twophase.connectors.jdbc._gid import format_gid, gid_prefix, parse_gid
from twophase.connectors.jdbc._mariadb._xid import GTRIDS
from twophase.connectors.jdbc._postgres._gid import GIDS, MAX_GID_BYTES
from twophase.errors import ConfigurationError

pytestmark = pytest.mark.unit

identities = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FF), min_size=1, max_size=60
)


@given(
    identity=identities,
    batch=st.integers(0, 2**63 - 1),
    partition=st.integers(0, 2**31 - 1),
    attempt=st.integers(0, 2**31 - 1),
)
def test_gid_round_trips_and_carries_every_part(
    identity: str, batch: int, partition: int, attempt: int
) -> None:
    gid = format_gid(identity, batch, partition, attempt)
    assert gid.startswith(gid_prefix(identity))
    parsed = parse_gid(gid, identity)
    assert parsed is not None
    assert (parsed.identity, parsed.batch_id, parsed.partition_id, parsed.attempt) == (
        identity,
        batch,
        partition,
        attempt,
    )


def test_gids_of_different_attempts_differ() -> None:
    gids = {format_gid("q", 3, p, a) for p in range(3) for a in range(3)}
    assert len(gids) == 9


def test_an_identity_that_prefixes_another_never_claims_its_gids() -> None:
    theirs = format_gid("abc:1", 2, 3, 4)  # identity "abc:1"
    assert theirs.startswith(gid_prefix("abc"))  # same text prefix...
    assert parse_gid(theirs, "abc") is None  # ...but not ours
    assert parse_gid(theirs, "abc:1") is not None


@pytest.mark.parametrize(
    "gid",
    ["", "tp:", "tp:x", "tp:x:1:2", "tp:x:1:2:-3", "tp::1:2:3", "other:x:1:2:3", "tp:x:1:2:٣"],
)
def test_foreign_or_malformed_gids_are_not_parsed(gid: str) -> None:
    assert parse_gid(gid) is None


def test_gid_at_the_limit_is_accepted_and_one_byte_more_is_refused() -> None:
    suffix = ":1:2:3"
    identity = "i" * (MAX_GID_BYTES - len("tp:") - len(suffix))
    assert len(GIDS.checked(format_gid(identity, 1, 2, 3)).encode()) == MAX_GID_BYTES
    with pytest.raises(ConfigurationError, match="over PostgreSQL's limit of 199"):
        GIDS.checked(format_gid(identity + "i", 1, 2, 3))


def test_multibyte_identities_are_measured_in_bytes() -> None:
    identity = "é" * 96  # 192 bytes but only 96 characters
    with pytest.raises(ConfigurationError, match="bytes"):
        GIDS.checked(format_gid(identity, 1, 2, 3))


def test_identity_check_reserves_room_for_the_largest_numbers() -> None:
    GIDS.check_identity("q" * 150)
    with pytest.raises(ConfigurationError, match="shorter sink name"):
        GIDS.check_identity("q" * 160)
    with pytest.raises(ConfigurationError):
        GIDS.check_identity("")


def test_each_dialect_states_its_own_limit_in_the_same_words() -> None:
    GTRIDS.check_identity("q" * 61)  # "tp:" + 61 = 64 bytes: MariaDB's gtrid limit
    with pytest.raises(ConfigurationError) as info:
        GTRIDS.check_identity("q" * 62)
    assert "its XA gtrid could reach 65 bytes, over MariaDB's limit of 64" in str(info.value)
    assert "(at most 44 bytes)" in str(info.value)  # a name of 44 bytes + ".<16 hex>" = 61


@pytest.mark.parametrize(("batch", "partition", "attempt"), [(-1, 0, 0), (0, -1, 0), (0, 0, True)])
def test_negative_or_boolean_numbers_are_refused(batch: int, partition: int, attempt: int) -> None:
    with pytest.raises(ConfigurationError, match="non-negative integer"):
        format_gid("q", batch, partition, attempt)

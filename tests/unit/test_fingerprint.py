"""Fingerprints: order independent, multiset exact, sensitive to every value and type; versioned."""

from __future__ import annotations

import datetime
import decimal
import hashlib

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from twophase import Fingerprint, fingerprint_batches
from twophase import _bytes_hash as bhmod
from twophase._bytes_hash import _BYTES_HASHERS
from twophase._fingerprint import row_hashes
from twophase._values import FINGERPRINT_VERSION, FINGERPRINT_VERSIONS

pytestmark = pytest.mark.unit

values = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        st.one_of(st.none(), st.text(max_size=30)),
    ),
    max_size=60,
)


def batch(rows: list[tuple[int | None, str | None]]) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "v": pa.array([r[1] for r in rows], pa.string()),
        }
    )


@settings(max_examples=200, deadline=None)
@given(rows=values, data=st.data())
def test_fingerprint_ignores_order_and_batching(
    rows: list[tuple[int | None, str | None]], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(rows))
    cut = data.draw(st.integers(0, len(rows)))
    whole = fingerprint_batches([batch(rows)])
    assert fingerprint_batches([batch(shuffled[:cut]), batch(shuffled[cut:])]) == whole
    assert whole.count == len(rows)


@settings(max_examples=200, deadline=None)
@given(rows=values.filter(bool), data=st.data())
def test_fingerprint_changes_when_a_row_changes_or_repeats(
    rows: list[tuple[int | None, str | None]], data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(rows) - 1))
    k, v = rows[index]
    changed = list(rows)
    changed[index] = ((k or 0) + 1 if k is None or k < 2**63 - 1 else 0, v)
    assert fingerprint_batches([batch(changed)]) != fingerprint_batches([batch(rows)])
    assert fingerprint_batches([batch([*rows, rows[index]])]) != fingerprint_batches([batch(rows)])


def test_null_empty_and_zero_are_distinct() -> None:
    a = pa.record_batch({"s": pa.array([None], pa.string())})
    b = pa.record_batch({"s": pa.array([""], pa.string())})
    c = pa.record_batch({"i": pa.array([None], pa.int64())})
    d = pa.record_batch({"i": pa.array([0], pa.int64())})
    assert len({fingerprint_batches([x]) for x in (a, b)}) == 2
    assert len({fingerprint_batches([x]) for x in (c, d)}) == 2


def test_swapping_values_between_columns_changes_the_hash() -> None:
    a = pa.record_batch({"x": [1], "y": [2]})
    b = pa.record_batch({"x": [2], "y": [1]})
    assert row_hashes(a)[0] != row_hashes(b)[0]


def test_every_spark_type_is_hashed_deterministically() -> None:
    rows = pa.record_batch(
        {
            "i8": pa.array([1, None], pa.int8()),
            "f": pa.array([1.5, -0.0], pa.float32()),
            "d": pa.array([0.0, float("nan")], pa.float64()),
            "dec": pa.array([decimal.Decimal("1.10"), None], pa.decimal128(10, 2)),
            "bin": pa.array([b"\x00\x01", b""], pa.binary()),
            "b": pa.array([True, None], pa.bool_()),
            "date": pa.array([datetime.date(2024, 2, 29), None], pa.date32()),
            "ts": pa.array(
                [datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc), None],
                pa.timestamp("us", "UTC"),
            ),
            "ntz": pa.array([datetime.datetime(2024, 1, 1), None], pa.timestamp("us")),
            "arr": pa.array([[1, 2], None], pa.list_(pa.int32())),
            "st": pa.array(
                [{"a": 1, "b": "x"}, None], pa.struct([("a", pa.int32()), ("b", pa.string())])
            ),
            "m": pa.array([[("k", 1)], None], pa.map_(pa.string(), pa.int32())),
            "large": pa.array(["é" * 3000, "x"], pa.large_string()),
        }
    )
    first = fingerprint_batches([rows])
    assert first == fingerprint_batches([rows.take([1, 0])])
    assert first.count == 2
    # -0.0 == 0.0 and NaN == NaN for the fingerprint
    zero = pa.record_batch({"d": pa.array([0.0], pa.float64())})
    neg = pa.record_batch({"d": pa.array([-0.0], pa.float64())})
    assert fingerprint_batches([zero]) == fingerprint_batches([neg])


def test_long_values_cross_the_chunk_boundary() -> None:
    big = ["a" * (3 << 20), "b" * (5 << 20), "c"]
    one = fingerprint_batches([pa.record_batch({"v": big})])
    other = fingerprint_batches([pa.record_batch({"v": big[::-1]})])
    assert one == other
    assert one != fingerprint_batches(
        [pa.record_batch({"v": ["a" * (3 << 20), "b" * (5 << 20), "d"]})]
    )


def test_fingerprint_text_round_trip() -> None:
    fp = Fingerprint(3, 2**64 - 1)
    assert Fingerprint.parse(str(fp)) == fp


# ------------------------------------------------------------------ versions


def _bytes(i: int, n: int) -> bytes:
    return (hashlib.sha512(str(i).encode()).digest() * (n // 64 + 1))[:n]


def golden_batches() -> list[pa.RecordBatch]:
    """Fixed rows covering every path of both versions (short, long, huge, nested, nulls)."""
    n = 40
    mixed = pa.record_batch(
        {
            "k": pa.array(range(n), pa.int64()),
            "b": pa.array(
                [None if i % 9 == 4 else _bytes(i, i * 37 % 700) for i in range(n)], pa.binary()
            ),
            "s": pa.array(
                [_bytes(i, i * 5 % 90).hex()[: i * 3 % 130] for i in range(n)], pa.string()
            ),
            "u": pa.array(["é" * i for i in range(n)], pa.large_string()),
            "l": pa.array([[i, i + 1] if i % 3 else None for i in range(n)], pa.list_(pa.int32())),
            "d": pa.array([decimal.Decimal(i) / 8 for i in range(n)], pa.decimal128(12, 3)),
        }
    )
    huge = pa.record_batch(
        {"h": pa.array([_bytes(1, 70_000), b"", _bytes(2, 65_535)], pa.large_binary())}
    )
    return [mixed, huge]


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        # Computed by the release before fingerprint versions: markers it wrote must still match.
        (1, ["40:66c2d6908cb07d31", "3:9dcf2e901dac949c"]),
        # Pinned: a change of numpy, pyarrow or the code must not change what markers hold.
        (2, ["v2:40:03a2c91d2db96ca8", "v2:3:61ed712a00a1fab5"]),
    ],
)
def test_fingerprints_of_fixed_rows_never_change(version: int, expected: list[str]) -> None:
    assert [str(fingerprint_batches([b], version)) for b in golden_batches()] == expected


def test_new_fingerprints_are_version_2_and_the_versions_never_compare_equal() -> None:
    rows = pa.record_batch({"x": [1, 2]})  # no binary column: equal digests in both versions
    v1, v2 = fingerprint_batches([rows], 1), fingerprint_batches([rows])
    assert (v1.version, v2.version) == (1, FINGERPRINT_VERSION) == (1, 2)
    assert (v1.count, v1.digest) == (v2.count, v2.digest)
    assert v1 != v2
    assert set(_BYTES_HASHERS) == set(FINGERPRINT_VERSIONS)


def test_an_unknown_version_is_refused() -> None:
    with pytest.raises(ValueError, match="fingerprint version 3 is unknown"):
        fingerprint_batches([pa.record_batch({"x": [1]})], 3)


@given(
    count=st.integers(0, 2**40),
    digest=st.integers(0, 2**64 - 1),
    version=st.sampled_from(FINGERPRINT_VERSIONS),
)
def test_fingerprint_text_round_trips_in_every_version(
    count: int, digest: int, version: int
) -> None:
    fp = Fingerprint(count, digest, version)
    assert Fingerprint.parse(str(fp)) == fp


def test_version_1_text_is_the_form_earlier_releases_wrote_and_read() -> None:
    old = Fingerprint.parse("3:00000000000000ff")  # as stored by the release before versions
    assert old == Fingerprint(3, 255, 1)
    assert str(old) == "3:00000000000000ff"
    assert str(Fingerprint(3, 255)) == "v2:3:00000000000000ff"


_M = 2**64 - 1


def _mix_int(x: int) -> int:
    x &= _M
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _M
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _M
    return x ^ (x >> 31)


def reference_v2(value: bytes) -> int:
    """Version 2 hash of one value, one word at a time (what the numpy code vectorises)."""
    if len(value) >= bhmod._BLAKE_BYTES:
        return int.from_bytes(hashlib.blake2b(value, digest_size=8).digest(), "little")
    h = _mix_int(len(value) + int(bhmod._SEED))
    if not value:
        return h
    padded = value + bytes(-len(value) % 8)
    words = (int.from_bytes(padded[j : j + 8], "little") for j in range(0, len(padded), 8))
    total = sum(_mix_int(w ^ (j * int(bhmod._WORD_KEY) & _M)) for j, w in enumerate(words))
    return _mix_int(h + total)


@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.one_of(st.none(), st.binary(max_size=300)), max_size=40),
    chunk=st.sampled_from([1, 7, 64, 1000, bhmod._WORD_CHUNK_BYTES]),
    data=st.data(),
)
def test_version_2_hashes_each_value_alone_whatever_the_chunks_and_slices(
    values: list[bytes | None], chunk: int, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, len(values)))
    stop = data.draw(st.integers(start, len(values)))
    arr = pa.array(values, pa.binary()).slice(start, stop - start)
    saved = bhmod._WORD_CHUNK_BYTES
    bhmod._WORD_CHUNK_BYTES = chunk
    try:
        hashed = bhmod._hash_bytes_v2(arr)
    finally:
        bhmod._WORD_CHUNK_BYTES = saved
    for h, value in zip(hashed, values[start:stop], strict=True):
        if value is not None:  # the hash of a null is the caller's
            assert int(h) == reference_v2(value)


def test_version_2_sends_only_values_of_64_kib_and_more_to_blake2b() -> None:
    values = [b"x" * (bhmod._BLAKE_BYTES - 1), b"y" * bhmod._BLAKE_BYTES, b"z" * 3]
    assert [int(h) for h in bhmod._hash_bytes_v2(pa.array(values))] == [
        reference_v2(v) for v in values
    ]


@settings(max_examples=200, deadline=None)
@given(value=st.binary(min_size=1, max_size=200), data=st.data())
def test_version_2_sees_every_byte_and_the_length(value: bytes, data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(value) - 1))
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != value[index]))
    changed = value[:index] + bytes([byte]) + value[index + 1 :]
    zeros = data.draw(st.integers(1, 9))
    hashed = bhmod._hash_bytes_v2(pa.array([value, changed, value + bytes(zeros)]))
    assert len({int(h) for h in hashed}) == 3


@pytest.mark.parametrize("version", FINGERPRINT_VERSIONS)
def test_a_value_split_differently_between_two_columns_changes_the_hash(version: int) -> None:
    for first, second in [(("ab", "c"), ("a", "bc")), (("x" * 60, "y"), ("x" * 59, "xy"))]:
        a = pa.record_batch({"p": [first[0]], "q": [first[1]]})
        b = pa.record_batch({"p": [second[0]], "q": [second[1]]})
        assert row_hashes(a, version)[0] != row_hashes(b, version)[0]


@settings(max_examples=100, deadline=None)
@given(rows=st.lists(st.one_of(st.none(), st.binary(max_size=200)), max_size=40), data=st.data())
def test_long_values_are_order_independent_too(
    rows: list[bytes | None], data: st.DataObject
) -> None:
    shuffled = data.draw(st.permutations(rows))
    cut = data.draw(st.integers(0, len(rows)))

    def batch_of(values: list[bytes | None]) -> pa.RecordBatch:
        return pa.record_batch({"v": pa.array(values, pa.binary())})

    whole = fingerprint_batches([batch_of(rows)])
    assert fingerprint_batches([batch_of(shuffled[:cut]), batch_of(shuffled[cut:])]) == whole

"""Protocol B's replay check: which partitions of a replayed batch are already committed.

The coordinator reads the markers of a batch that was started before and matches
their fingerprints, as a multiset, with the fingerprints of the replayed
partitions, before anything is written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from ._types import Fingerprint, Marker
from .errors import NondeterministicBatchError

__all__ = ["match_markers"]


def match_markers(
    markers: Sequence[Marker], replayed: Mapping[int, Fingerprint], *, sink: str, batch_id: int
) -> tuple[frozenset[int], dict[int, Fingerprint]]:
    """Match committed markers with the fingerprints of a replayed batch.

    Fingerprints are compared as multisets: every committed fingerprint must be
    found among the replayed partitions (as many times as it was committed).

    Parameters
    ----------
    markers
        Markers of the batch's committed partitions.
    replayed
        Partition id -> fingerprint of the replay's non-empty partitions.
    sink, batch_id
        For the error message.

    Returns
    -------
    tuple
        (partitions to skip, fingerprint each remaining partition must have).

    Raises
    ------
    NondeterministicBatchError
        A committed partition is not part of the replay.
    """
    committed = Counter(m.fingerprint for m in markers)
    committed_at = {(m.partition_id, m.fingerprint) for m in markers}
    by_fingerprint: dict[Fingerprint, list[int]] = {}
    # Prefer skipping the partition that committed those rows under the same
    # id, so that a partition written now never reuses a committed (id, rows).
    for pid in sorted(replayed, key=lambda p: ((p, replayed[p]) not in committed_at, p)):
        by_fingerprint.setdefault(replayed[pid], []).append(pid)
    skip: set[int] = set()
    missing: list[tuple[Fingerprint, int]] = []
    for fingerprint, count in sorted(committed.items()):
        candidates = by_fingerprint.get(fingerprint, [])
        if len(candidates) < count:
            missing.append((fingerprint, count - len(candidates)))
        skip.update(candidates[:count])
    if missing:
        committed_rows = sum(m.fingerprint.count for m in markers)
        replayed_rows = sum(f.count for f in replayed.values())
        detail = ", ".join(f"{fp} x{n}" for fp, n in missing[:5])
        raise NondeterministicBatchError(
            f"replay of batch {batch_id} does not match what was already committed: "
            f"{len(markers)} partition(s) with {committed_rows} rows are committed, but "
            f"{sum(n for _, n in missing)} of them (fingerprints {detail}) are not among "
            f"the {len(replayed)} replayed partitions ({replayed_rows} rows). Nothing was "
            "written. The input of the batch changed between runs (non-deterministic "
            "functions, a shuffle whose partition contents changed, or a source that "
            "does not replay the same rows). Fix: make the pipeline deterministic up to "
            "the sink, or set staging=True on the sink so that replays read the staged "
            "copy of each batch. If this batch itself can never be replayed as it ran, "
            "finish it with the 'twophase resolve' command (docs/operations.md), which "
            "says what each choice risks",
            sink=sink,
            batch_id=batch_id,
        )
    expected = {pid: fp for pid, fp in replayed.items() if pid not in skip}
    return frozenset(skip), expected

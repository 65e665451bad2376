"""The markers protocol's replay check: which partitions of a replayed batch are already committed.

The coordinator reads the markers of a batch that was started before and matches
their fingerprints, as a multiset, with the fingerprints of the replayed
partitions, before anything is written. Markers written by an earlier release
carry an earlier fingerprint version: the replayed partitions are then
fingerprinted by that version too, for those markers only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from .._values import FINGERPRINT_VERSION, FINGERPRINT_VERSIONS, Fingerprint, Marker
from ..errors import ConfigurationError, NondeterministicBatchError

__all__ = ["legacy_versions", "match_markers"]


def legacy_versions(markers: Sequence[Marker], *, sink: str, batch_id: int) -> list[int]:
    """Return the earlier fingerprint versions among ``markers`` (written by earlier releases).

    Parameters
    ----------
    markers
        Markers of the batch's committed partitions.
    sink, batch_id
        For the error message.

    Returns
    -------
    list of int
        Versions other than the current one, ascending.

    Raises
    ------
    ConfigurationError
        A marker has a version this release cannot compute (a newer release
        wrote it).
    """
    versions = {m.fingerprint.version for m in markers}
    unknown = sorted(versions - set(FINGERPRINT_VERSIONS))
    if unknown:
        raise ConfigurationError(
            f"the markers of batch {batch_id} were written with fingerprint version(s) "
            f"{unknown}, which this release of twophase cannot compute to check the replay: "
            "a newer release ran this query. Run the query with that release again",
            sink=sink,
            batch_id=batch_id,
        )
    return sorted(versions - {FINGERPRINT_VERSION})


def match_markers(
    markers: Sequence[Marker],
    replayed: Mapping[int, Fingerprint],
    *,
    sink: str,
    batch_id: int,
    legacy: Sequence[Mapping[int, Fingerprint]] = (),
) -> tuple[frozenset[int], dict[int, Fingerprint]]:
    """Match committed markers with the fingerprints of a replayed batch.

    Fingerprints are compared as multisets: every committed fingerprint must be
    found among the replayed partitions (as many times as it was committed),
    each replayed partition standing for at most one marker.

    Parameters
    ----------
    markers
        Markers of the batch's committed partitions.
    replayed
        Partition id -> fingerprint of the replay's non-empty partitions (the
        current version).
    sink, batch_id
        For the error message.
    legacy
        The same partitions fingerprinted by each of :func:`legacy_versions`,
        for the markers of earlier releases.

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
    for fingerprints in (replayed, *legacy):
        for pid in sorted(
            fingerprints, key=lambda p: ((p, fingerprints[p]) not in committed_at, p)
        ):
            by_fingerprint.setdefault(fingerprints[pid], []).append(pid)
    skip: set[int] = set()
    missing: list[tuple[Fingerprint, int]] = []
    for fingerprint, count in sorted(committed.items()):
        # Equal rows have equal fingerprints in every version: a partition
        # taken for a marker of one version is not there for another.
        candidates = [p for p in by_fingerprint.get(fingerprint, []) if p not in skip]
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

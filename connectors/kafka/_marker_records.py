"""Idempotence markers in the compacted control topic: their key, value and format version.

A marker is one record in partition 0 of the control topic, produced inside
the partition's transaction, so it is visible to ``read_committed`` readers
if and only if the partition's records are.

Record layout
-------------
key
    ``<identity>/<batch>/<partition>/<attempt>/<nonce>`` (UTF-8). The nonce
    makes every committed marker its own key: a compacted topic keeps only the
    latest record per key, and two commits of one batch may share identity,
    batch, partition and attempt (a replay in another partition layout), so
    without it compaction could erase a marker that is still needed.
value
    compact JSON: ``{"v": 1, "identity", "batch", "partition", "attempt",
    "fingerprint", "records", "transactional_id"}``; the fingerprint in
    :meth:`twophase.Fingerprint.__str__` form. A null value is a tombstone
    (garbage collection of markers of finished batches, see
    :mod:`._transaction` and :mod:`._pool`).

:mod:`._marker_reader` reads them back.
"""

from __future__ import annotations

import json
import uuid

import twophase
from twophase import Fingerprint, Marker
from twophase.errors import CoordinatorLogError

__all__ = [
    "CONTROL_PARTITION",
    "decode_marker",
    "encode_marker",
    "identity_prefix",
    "marker_key",
    "new_nonce",
]

#: Markers of every identity go to this partition of the control topic, so that
#: adding partitions to the topic never moves them.
CONTROL_PARTITION = 0

_FORMAT = 1


def new_nonce() -> str:
    """Return a short random nonce, unique per transaction.

    Returns
    -------
    str
        12 hex digits.
    """
    return uuid.uuid4().hex[:12]


def identity_prefix(identity: str) -> bytes:
    """Return the key prefix shared by every control record of an identity.

    Parameters
    ----------
    identity
        The sink identity token.

    Returns
    -------
    bytes
        ``b"<identity>/"``.
    """
    return f"{identity}/".encode()


def marker_key(marker: Marker, nonce: str) -> bytes:
    """Return the control-topic key of a marker.

    Parameters
    ----------
    marker
        The marker.
    nonce
        From :func:`new_nonce`, one per transaction.

    Returns
    -------
    bytes
        ``<identity>/<batch>/<partition>/<attempt>/<nonce>``.
    """
    return (
        f"{marker.identity}/{marker.batch_id}/{marker.partition_id}/{marker.attempt}/{nonce}"
    ).encode()


def encode_marker(marker: Marker, *, transactional_id: str, records: int) -> bytes:
    """Encode a marker as the value of its control record.

    Parameters
    ----------
    marker
        The marker.
    transactional_id
        The producer's ``transactional.id`` (for operators).
    records
        Records the transaction produced (for operators).

    Returns
    -------
    bytes
        Compact JSON.
    """
    body = {
        "v": _FORMAT,
        "identity": marker.identity,
        "batch": marker.batch_id,
        "partition": marker.partition_id,
        "attempt": marker.attempt,
        "fingerprint": str(marker.fingerprint),
        "records": records,
        "transactional_id": transactional_id,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode_marker(value: bytes, *, where: str = "the control topic") -> Marker:
    """Decode the value of a control record.

    Parameters
    ----------
    value
        The record value (not a tombstone).
    where
        Topic and offset, named in errors.

    Returns
    -------
    Marker
        The marker.

    Raises
    ------
    CoordinatorLogError
        If the value is not a marker of a known format.
    """
    try:
        body = json.loads(value)
        if not isinstance(body, dict):
            raise TypeError("not an object")
        version = body.get("v")
        if version != _FORMAT:
            newer = isinstance(version, int) and version > _FORMAT
            raise CoordinatorLogError(
                f"marker at {where} has format version {version!r}"
                + (", written by a newer twophase release" if newer else "")
                + f"; twophase {twophase.__version__} reads version {_FORMAT}. Run the same "
                "(or a later) release on every driver and executor (docs/upgrading.md)"
            )
        return Marker(
            identity=str(body["identity"]),
            batch_id=int(body["batch"]),
            partition_id=int(body["partition"]),
            attempt=int(body["attempt"]),
            fingerprint=Fingerprint.parse(str(body["fingerprint"])),
        )
    except CoordinatorLogError:
        raise
    except (ValueError, TypeError, KeyError) as exc:
        raise CoordinatorLogError(
            f"the record at {where} is not a valid twophase marker ({exc}); something else "
            "writes to the control topic. Give the sink a control topic of its own"
        ) from exc

"""confluent-kafka names that its type information does not export cleanly.

``confluent_kafka.admin`` re-exports these without ``__all__``, which mypy's
strict mode (no implicit re-export) refuses; importing them in one place keeps
the ``type: ignore`` comments here, each with its reason.
"""

from __future__ import annotations

from typing import Any

# Re-exported by confluent_kafka.admin without __all__ (implicit re-export).
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    ConfigResource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

__all__ = [
    "AclOperation",
    "ConfigResource",
    "NewTopic",
    "ResourceType",
    "earliest_offset",
    "latest_offset",
]


def earliest_offset() -> Any:
    """Return ``OffsetSpec.earliest()`` (untyped in confluent-kafka).

    Returns
    -------
    OffsetSpec
        The spec asking for the log start offset.
    """
    return OffsetSpec.earliest()  # type: ignore[no-untyped-call]  # untyped classmethod


def latest_offset() -> Any:
    """Return ``OffsetSpec.latest()`` (untyped in confluent-kafka).

    Returns
    -------
    OffsetSpec
        The spec asking for the end offset (high-water mark or last stable
        offset, by isolation level).
    """
    return OffsetSpec.latest()  # type: ignore[no-untyped-call]  # untyped classmethod

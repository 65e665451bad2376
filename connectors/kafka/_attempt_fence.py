"""Fence records: what stops a late attempt on another lane from committing (several lanes).

With one ``transactional.id`` per partition slot, two attempts of a partition
fence each other by ``init_transactions``: whichever initialises later
disables the other. With several lanes they may run under different ids, and
a zombie -- an attempt of an earlier run, or an earlier attempt of a retried
task, whose process lives on -- could begin on a freshly initialised producer
*after* the newer attempt fenced every lane, check the markers before the
newer attempt commits, and commit as well.

So whoever fences lanes first records why, in the control topic:

* the driver's recovery of run *E*: "every attempt of a run before *E*";
* a retried task (attempt *a* of batch *b*, partition *p*, run *E*): "every
  attempt of partition *p* ranked below (*E*, *b*, *a*)".

and only then fences (:func:`._fencing.record_fence` writes the record).
Every attempt that runs on a producer initialised in its own task reads the
records (with the markers of its batch, after its ``init_transactions``) and
stops (:class:`~twophase.errors.FatalError`) if one ranks it below. Either the
record was written before that read, and the zombie sees it, or after, and
then the lanes were fenced after the zombie's ``init_transactions``, so its
commit fails. An attempt on a pooled producer that committed since its
initialisation cannot be a zombie: recovery and retries fenced every producer
initialised before them.

Record layout: key ``<identity>/fence/<nonce>``; value compact JSON
``{"v": 1, "fence": true, "epoch", "batch", "partition", "attempt"}`` (-1
for "any"). One record per recovery of an unfinished batch and per task
retry: a few per run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import twophase
from twophase import TaskContext
from twophase.errors import CoordinatorLogError

__all__ = ["Fence", "decode_fence", "encode_fence", "fence_key", "is_fence_key"]

_FORMAT = 1
_INFIX = b"fence/"


@dataclass(frozen=True)
class Fence:
    """Attempts ranked below ``(epoch, batch, attempt)`` of ``partition`` (-1: any) are zombies."""

    epoch: int
    batch: int = -1
    partition: int = -1
    attempt: int = -1

    @classmethod
    def of_retry(cls, task: TaskContext) -> Fence:
        """Return the fence a retried task records: the earlier attempts of its partition."""
        return cls(task.epoch, task.batch_id, task.partition_id, task.attempt)

    def excludes(self, task: TaskContext) -> bool:
        """Whether ``task`` ranks below this fence (and must not commit)."""
        if self.partition not in (-1, task.partition_id):
            return False
        return (task.epoch, task.batch_id, task.attempt) < (self.epoch, self.batch, self.attempt)

    def describe(self) -> str:
        """Who fenced, for messages."""
        if self.batch < 0:
            return f"run {self.epoch} recovered the sink"
        return (
            f"attempt {self.attempt} of batch {self.batch}, partition {self.partition} "
            f"(run {self.epoch}) took over"
        )


def fence_key(identity: str, nonce: str) -> bytes:
    """Return the control-topic key of a fence record of ``identity``."""
    return f"{identity}/fence/{nonce}".encode()


def is_fence_key(key: bytes, prefix: bytes) -> bool:
    """Whether ``key`` (starting with the identity ``prefix``) names a fence record."""
    return key[len(prefix) : len(prefix) + len(_INFIX)] == _INFIX


def encode_fence(fence: Fence) -> bytes:
    """Encode a fence as the value of its control record."""
    body = {
        "v": _FORMAT,
        "fence": True,
        "epoch": fence.epoch,
        "batch": fence.batch,
        "partition": fence.partition,
        "attempt": fence.attempt,
    }
    return json.dumps(body, separators=(",", ":"), sort_keys=True).encode()


def decode_fence(value: bytes, *, where: str) -> Fence:
    """Decode a fence record's value; :class:`CoordinatorLogError` when it is not one."""
    try:
        body = json.loads(value)
        if not isinstance(body, dict) or body.get("fence") is not True:
            raise ValueError("not a fence record")
        version = body.get("v")
        if version != _FORMAT:
            raise ValueError(
                f"format version {version!r}"
                + (
                    ", written by a newer twophase release"
                    if isinstance(version, int) and version > _FORMAT
                    else ""
                )
                + f"; twophase {twophase.__version__} reads version {_FORMAT}"
            )
        return Fence(
            int(body["epoch"]), int(body["batch"]), int(body["partition"]), int(body["attempt"])
        )
    except (ValueError, TypeError, KeyError) as exc:
        raise CoordinatorLogError(
            f"the record at {where} is not a valid twophase fence record ({exc}). Run the "
            "same (or a later) release on every driver and executor (docs/upgrading.md), or "
            "give the sink a control topic of its own"
        ) from exc

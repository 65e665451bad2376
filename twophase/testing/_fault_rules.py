"""Fault rules: which hook calls fail and how, stored with a target and counted across processes.

A rule (:class:`FaultRule`) names a hook and, optionally, the batch, partition
and attempt it applies to. Rules are kept in the target's storage, not in the
sink: executors see rules added after the sink was pickled, and "fail N times"
counts across every process sharing the target. Hooks call
:meth:`FaultRules.check_fault` first (the fake sinks do; ``with_faults`` wraps
any other sink's hooks so that they do).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from ._storage import Storage

__all__ = ["FaultRule", "FaultRules"]


@dataclass(frozen=True)
class FaultRule:
    """Make a hook fail. Stored in the target; matched on every hook call.

    Attributes
    ----------
    hook
        Hook name: ``begin_transaction``, ``write``, ``write_dead_letters``,
        ``abort``; coordinated
        ``pre_commit``, ``commit``, ``recover_and_commit``,
        ``transaction_status``; markers
        ``commit_with_marker``, ``read_markers``; both ``list_in_doubt``,
        ``recover_and_abort``.
    batch_id, partition_id, attempt
        Restrict the rule (None matches any).
    times
        How many times it fires in all (across processes); -1 for always.
    error
        Name of the exception class in :mod:`twophase.errors`, ``"kill"``
        to end the calling process at once (``os._exit``, a lost executor),
        or ``"kill-pid"`` to SIGKILL the process whose pid is ``message``
        (a driver killed while its executors run phase 1).
    message
        Text of the error.
    rule_id
        Unique id (for counting).
    """

    hook: str
    batch_id: int | None = None
    partition_id: int | None = None
    attempt: int | None = None
    times: int = 1
    error: str = "AbortRequiredError"
    message: str = "injected fault"
    rule_id: str = ""

    def matches(
        self, hook: str, batch_id: int | None, partition_id: int | None, attempt: int | None
    ) -> bool:
        """Return whether the rule applies to this call."""
        return (
            self.hook == hook
            and (self.batch_id is None or self.batch_id == batch_id)
            and (self.partition_id is None or self.partition_id == partition_id)
            and (self.attempt is None or self.attempt == attempt)
        )


class FaultRules:
    """Add, list and fire the fault rules kept in a target's storage."""

    _storage: Storage

    def fail(
        self,
        hook: str,
        *,
        batch_id: int | None = None,
        partition_id: int | None = None,
        attempt: int | None = None,
        times: int = 1,
        error: str | type[BaseException] = "AbortRequiredError",
        message: str = "injected fault",
    ) -> FaultRule:
        """Add a fault rule: the next matching hook call(s) raise.

        Parameters
        ----------
        hook
            Hook name (see :class:`FaultRule`).
        batch_id, partition_id, attempt
            Restrict the rule.
        times
            Number of firings (-1: always).
        error
            An exception class of :mod:`twophase.errors` (or its name),
            ``"kill"`` to end the process, or ``"kill-pid"`` to SIGKILL the
            process whose pid is ``message`` (e.g. the driver).
        message
            The error text.

        Returns
        -------
        FaultRule
            The stored rule (pass it to :meth:`fired`; :meth:`clear_faults`
            removes every rule).
        """
        name = error if isinstance(error, str) else error.__name__
        rule = FaultRule(
            hook, batch_id, partition_id, attempt, times, name, message, uuid.uuid4().hex
        )
        self._storage.put(f"faults/{rule.rule_id}", json.dumps(rule.__dict__).encode())
        return rule

    def clear_faults(self) -> None:
        """Remove every fault rule."""
        for name in self._storage.list("faults"):
            self._storage.delete(f"faults/{name}")

    def rules(self) -> list[FaultRule]:
        """Return the fault rules in force."""
        rules = []
        for name in self._storage.list("faults"):
            raw = self._storage.get(f"faults/{name}")
            if raw:
                rules.append(FaultRule(**json.loads(raw)))
        return rules

    def check_fault(
        self,
        hook: str,
        batch_id: int | None = None,
        partition_id: int | None = None,
        attempt: int | None = None,
    ) -> None:
        """Raise the injected error if a rule matches this hook call.

        Parameters
        ----------
        hook
            Hook being called.
        batch_id, partition_id, attempt
            What the call is about.
        """
        for rule in self.rules():
            if not rule.matches(hook, batch_id, partition_id, attempt):
                continue
            if rule.times >= 0:
                fired = [n for n in self._storage.list("fired") if n.startswith(rule.rule_id)]
                claimed = False
                for index in range(len(fired), rule.times):
                    if self._storage.create_exclusive(f"fired/{rule.rule_id}.{index}"):
                        claimed = True
                        break
                if not claimed:
                    continue
            else:  # unlimited: still counted, so that a test can assert it fired
                self._storage.create_exclusive(f"fired/{rule.rule_id}.u{uuid.uuid4().hex}")
            _raise(rule)

    def fired(self, rule: FaultRule) -> int:
        """Return how many times a rule has fired (in every process sharing the target)."""
        return len([n for n in self._storage.list("fired") if n.startswith(rule.rule_id)])


def _raise(rule: FaultRule) -> None:
    if rule.error == "kill":
        os._exit(17)
    if rule.error == "kill-pid":
        # Kill another process (e.g. the driver, from an executor) mid-hook.
        os.kill(int(rule.message), signal.SIGKILL)
        time.sleep(60)  # the hook never returns: the driver is gone
    import builtins

    from .. import errors

    factory: Callable[..., BaseException] | None = getattr(errors, rule.error, None)
    if factory is None:
        factory = getattr(builtins, rule.error, None)
    if factory is None:
        raise RuntimeError(f"unknown injected error class {rule.error!r}")
    exc = factory(f"{rule.message} ({rule.hook})")
    with contextlib.suppress(AttributeError):
        exc.injected = True  # type: ignore[attr-defined]
    raise exc

"""Zombie task attempts on the standalone cluster: freeze an attempt's whole worker, resume it late.

A zombie is a task attempt Spark gave up on -- its executor was declared lost -- whose process
lives on and tries to commit after Spark's retry of the same partition did (docs/guarantees.md).
:func:`play_zombie` makes one for real:

1. the attempt stands at a probe ``pause`` rule, right before a hook (``commit_with_marker``,
   ``pre_commit``...): its transaction is open, its rows written;
2. the attempt's whole worker is frozen with ``SIGSTOP``: the worker daemon first, then the
   executor JVM, its PySpark daemon and Python workers. The worker daemon must be frozen too: on a
   standalone cluster, once the driver declares the executor lost it asks the master to kill it,
   and the worker daemon would then kill the executor's whole process tree, frozen or not;
3. the pause is released (the frozen Python worker will see that when it runs again);
4. the driver stops hearing the executor's heartbeats and, after ``spark.network.timeout`` (10 s
   with ``cluster_session``), declares it lost and reruns its task on the other worker; the helper
   waits until that retry is done (by default: the same hook succeeded with a newer attempt);
5. the Python processes resume (``SIGCONT``), the executor JVM and the worker daemon still frozen:
   the zombie now runs its hook, after the retry, and the helper waits for the hook's outcome
   event. The executor JVM stays frozen because the driver has already sent it ``StopExecutor``:
   resumed, it would shut down and take its Python workers with it, racing the zombie's commit
   (a Python worker needs its JVM only to hand its result back);
6. the executor JVM and the worker daemon resume; the executor stops on the driver's order and the
   worker daemon kills what is left of its process tree.

Everything frozen is resumed when the ``with`` block of :class:`FrozenWorker` ends, whatever
happened, so that a failing test leaves a working cluster to the next one.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.cluster.probes import Control, Rule, pid_alive
from twophase_dev import ClusterProcess, SparkCluster

__all__ = ["FrozenWorker", "ZombieOutcome", "play_zombie"]


def _state(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[-1].split()[0]


class FrozenWorker:
    """Worker ``index`` of ``cluster`` with every process below it, stopped with ``SIGSTOP``.

    Use as a context manager: whatever is still frozen at the end of the block is resumed.
    """

    def __init__(self, cluster: SparkCluster, index: int) -> None:
        self.cluster = cluster
        self.index = index
        #: The processes stopped, parents first.
        self.frozen: list[ClusterProcess] = []

    def freeze(self) -> FrozenWorker:
        """Stop the worker daemon, then everything below it (again until nothing new appears)."""
        seen: set[int] = set()
        for _ in range(10):
            new = [p for p in self.cluster.worker_tree(self.index) if p.pid not in seen]
            if not new:
                break
            for process in new:
                os.kill(process.pid, signal.SIGSTOP)
                seen.add(process.pid)
                self.frozen.append(process)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if all(_state(p.pid) in (None, "T", "t") for p in self.frozen):
                return self
            time.sleep(0.02)
        raise AssertionError(f"worker {self.index} did not stop: {self.frozen}")

    def pids(self, *roles: str) -> list[int]:
        return [p.pid for p in self.frozen if not roles or p.role in roles]

    def thaw(self, *roles: str) -> None:
        """Resume the frozen processes of ``roles`` (all when none is given), children first."""
        for process in reversed(self.frozen):
            if roles and process.role not in roles:
                continue
            if pid_alive(process.pid):
                os.kill(process.pid, signal.SIGCONT)
        self.frozen = [p for p in self.frozen if roles and p.role not in roles]

    def __enter__(self) -> FrozenWorker:
        return self.freeze()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.thaw()


@dataclass
class ZombieOutcome:
    """What happened to the zombie attempt."""

    paused: dict[str, Any]
    retry: dict[str, Any]
    outcome: dict[str, Any]
    frozen: list[ClusterProcess] = field(default_factory=list)
    seconds_to_retry: float = 0.0

    @property
    def python_pid(self) -> int:
        return int(self.paused["pid"])

    @property
    def executor_pid(self) -> int:
        return int(self.paused["executor_pid"])


def play_zombie(
    cluster: SparkCluster,
    control: Control,
    rule: Rule,
    *,
    retried: Callable[[dict[str, Any]], bool] | None = None,
    alive: Callable[[], bool] | None = None,
    timeout: float = 60.0,
) -> ZombieOutcome:
    """Turn the attempt paused by ``rule`` (a ``pause`` rule) into a zombie; return its outcome.

    Parameters
    ----------
    cluster
        The cluster running the attempt.
    control
        The probes' control directory.
    rule
        The ``pause`` rule the attempt stands at.
    retried
        Tells from an event that the retry is done; by default, an ``ok`` outcome of the rule's
        hook for the same batch and partition with a newer attempt.
    alive
        Tells whether the driver still runs (the waits fail early once it does not).
    timeout
        Seconds for each wait.
    """
    assert rule.action == "pause", rule
    paused = control.wait_for(timeout, alive=alive, event="paused", rule=rule.rule_id)
    python_pid = int(paused["pid"])
    worker = cluster.worker_of_pid(python_pid)
    assert worker is not None, f"paused Python worker {python_pid} is on no worker of the cluster"

    def newer_attempt_done(event: dict[str, Any]) -> bool:
        return event["attempt"] > paused["attempt"]

    with FrozenWorker(cluster, worker) as frozen:
        stopped = list(frozen.frozen)
        roles = {p.role for p in stopped}
        assert {"worker", "executor", "python-worker"} <= roles, stopped
        frozen_at = time.monotonic()
        control.release(rule.rule_id)  # seen by the zombie once it runs again
        if retried is None:
            retry = control.wait_for(
                timeout,
                newer_attempt_done,
                alive=alive,
                event="hook",
                hook=rule.hook,
                batch=paused["batch"],
                partition=paused["partition"],
                outcome="ok",
            )
        else:
            retry = control.wait_for(timeout, retried, alive=alive)
        seconds = time.monotonic() - frozen_at
        assert pid_alive(python_pid), "the zombie died while frozen"
        # The zombie runs again: its Python processes only. Its executor JVM would obey the
        # driver's StopExecutor and the worker daemon the master's kill request at once.
        frozen.thaw("python-daemon", "python-worker", "other")
        outcome = control.wait_for(
            timeout,
            lambda e: e["pid"] == python_pid,
            event="hook",
            hook=rule.hook,
            batch=paused["batch"],
            partition=paused["partition"],
        )
    return ZombieOutcome(paused, retry, outcome, stopped, seconds)

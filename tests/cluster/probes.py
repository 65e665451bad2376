"""The connectors' sinks with probes: every hook call is an event, and a rule may act at a hook.

Runs in three kinds of processes: the test (which adds rules and reads events), the Spark driver
(:mod:`tests.cluster.driver`) and the executors' Python workers on the cluster. They share one
*control directory*:

- ``events.jsonl``: one JSON line per event, appended with a single ``os.write`` on an
  ``O_APPEND`` descriptor, so lines of concurrent processes never interleave. Every hook call of a
  probed sink emits ``{"event": "hook", "hook": ..., "outcome": "ok" | "error", "batch",
  "partition", "attempt", "pid", "executor_pid"}`` when it returns or raises; actions emit their
  own events.
- ``rules/``: :class:`Rule` files. A rule fires before (``when="before"``) or after a hook call of
  one batch/partition/attempt, at most ``times`` times across all processes (claimed with
  ``O_EXCL`` files in ``fired/``), and runs an action: ``kill-executor`` (SIGKILL the executor JVM
  that runs this Python worker), ``kill-python-worker`` (SIGKILL this Python worker),
  ``kill-app-executors`` (on the driver: SIGKILL every executor of the application, then go on) or
  ``pause`` (wait until the test calls :meth:`Control.release` with the rule id).

:func:`probed` turns a connector's sink into a probed one: the probed classes are ordinary
subclasses defined here, so that Spark's Python workers unpickle them by reference (classes made
at run time, like those of ``twophase.testing.with_faults``, cannot be imported by a worker).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from twophase.connectors.jdbc import (
    MariaDBMarkerSink,
    MariaDBTwoPhaseSink,
    PostgresMarkerSink,
    PostgresTwoPhaseSink,
)
from twophase.connectors.kafka import KafkaSink

__all__ = [
    "Control",
    "ProbedKafkaSink",
    "ProbedPostgresMarkerSink",
    "ProbedPostgresTwoPhaseSink",
    "Rule",
    "executor_pid_of",
    "executor_pids_of_app",
    "probed",
]

EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
ACTIONS = ("kill-executor", "kill-python-worker", "kill-app-executors", "pause")
#: Longest a ``pause`` waits for its release before going on by itself.
PAUSE_TIMEOUT = 180.0

S = TypeVar("S")


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[-1].split()[1])


def pid_alive(pid: int) -> bool:
    """Tell whether ``pid`` runs (a zombie not yet reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


_EXECUTOR_PID: list[int | None] = []


def executor_pid_of(pid: int | None = None) -> int | None:
    """Return the pid of the executor JVM above process ``pid`` (this process by default)."""
    if pid is None and _EXECUTOR_PID:
        return _EXECUTOR_PID[0]
    current: int | None = pid if pid is not None else os.getpid()
    found = None
    while current not in (None, 0, 1):
        assert current is not None
        if EXECUTOR_CLASS in _cmdline(current):
            found = current
            break
        current = _ppid(current)
    if pid is None:
        _EXECUTOR_PID.append(found)
    return found


def executor_pids_of_app(app_id: str) -> list[int]:
    """Return the pids of the live executor JVMs of application ``app_id`` on this machine."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            argv = _cmdline(int(name))
            if EXECUTOR_CLASS in argv and app_id in argv and pid_alive(int(name)):
                found.append(int(name))
    return sorted(found)


# --------------------------------------------------------------------------------------------
# Control directory
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """Run ``action`` before or after a hook call (``None`` fields match anything)."""

    rule_id: str
    hook: str
    action: str
    when: str = "before"
    batch: int | None = None
    partition: int | None = None
    attempt: int | None = None
    times: int = 1

    def matches(self, hook: str, when: str, fields: dict[str, Any]) -> bool:
        return (
            self.hook == hook
            and self.when == when
            and self.batch in (None, fields.get("batch"))
            and self.partition in (None, fields.get("partition"))
            and self.attempt in (None, fields.get("attempt"))
        )


class Control:
    """The control directory shared by the test, the driver and the executors.

    Parameters
    ----------
    path
        The directory (created if missing).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        for sub in ("rules", "fired", "released"):
            (self.path / sub).mkdir(parents=True, exist_ok=True)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Control, (str(self.path),))

    # ------------------------------------------------------------------ rules
    def add(
        self,
        hook: str,
        action: str,
        *,
        when: str = "before",
        batch: int | None = None,
        partition: int | None = None,
        attempt: int | None = None,
        times: int = 1,
    ) -> Rule:
        """Add a rule; return it (its ``rule_id`` names its pause, see :meth:`release`)."""
        if action not in ACTIONS:
            raise ValueError(f"unknown action {action!r}; known: {ACTIONS}")
        if when not in ("before", "after"):
            raise ValueError(f"when must be 'before' or 'after', not {when!r}")
        rule = Rule(uuid.uuid4().hex[:12], hook, action, when, batch, partition, attempt, times)
        tmp = self.path / "rules" / f".{rule.rule_id}.tmp"
        tmp.write_text(json.dumps(asdict(rule)))
        tmp.replace(self.path / "rules" / f"{rule.rule_id}.json")
        return rule

    def rules(self) -> list[Rule]:
        found = []
        for file in sorted((self.path / "rules").glob("*.json")):
            found.append(Rule(**json.loads(file.read_text())))
        return found

    def _claim(self, rule: Rule) -> bool:
        for index in range(rule.times):
            try:
                fd = os.open(
                    self.path / "fired" / f"{rule.rule_id}.{index}",
                    os.O_CREAT | os.O_EXCL | os.O_WRONLY,
                )
            except FileExistsError:
                continue
            os.close(fd)
            return True
        return False

    def fired(self, rule: Rule) -> int:
        """Return how many times ``rule`` has fired (in every process)."""
        return len(list((self.path / "fired").glob(f"{rule.rule_id}.*")))

    # ----------------------------------------------------------------- events
    def emit(self, **fields: Any) -> dict[str, Any]:
        """Append one event (with time and pid) to ``events.jsonl``; return it."""
        event = {"t": time.time(), "pid": os.getpid(), **fields}
        line = (json.dumps(event, default=str) + "\n").encode()
        fd = os.open(self.path / "events.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        return event

    def events(self, **match: Any) -> list[dict[str, Any]]:
        """Return the events whose fields equal every ``match`` item, oldest first."""
        try:
            lines = (self.path / "events.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        found = []
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            if all(event.get(k) == v for k, v in match.items()):
                found.append(event)
        return found

    def wait_for(
        self,
        timeout: float,
        predicate: Callable[[dict[str, Any]], bool] | None = None,
        *,
        alive: Callable[[], bool] | None = None,
        **match: Any,
    ) -> dict[str, Any]:
        """Wait for the first event matching ``match`` (and ``predicate``); return it.

        ``alive`` (e.g. "the driver still runs") is checked on every poll: once it is false, a
        last look is taken and the wait fails.
        """
        deadline = time.monotonic() + timeout
        while True:
            still_alive = alive is None or alive()
            for event in self.events(**match):
                if predicate is None or predicate(event):
                    return event
            if not still_alive or time.monotonic() > deadline:
                tail = "\n".join(json.dumps(e) for e in self.events()[-25:])
                why = "the watched process ended" if not still_alive else f"{timeout:.0f} s passed"
                raise AssertionError(f"no event {match} ({why}); last events:\n{tail}")
            time.sleep(0.1)

    # --------------------------------------------------------------- releases
    def release(self, name: str) -> None:
        """Let every process paused on ``name`` (a rule id) go on."""
        (self.path / "released" / name).touch()

    def released(self, name: str) -> bool:
        return (self.path / "released" / name).exists()

    # ---------------------------------------------------------------- actions
    def fire(self, hook: str, when: str, fields: dict[str, Any]) -> None:
        """Run the actions of the rules matching this hook call (called by the probed hooks)."""
        for rule in self.rules():
            if rule.matches(hook, when, fields) and self._claim(rule):
                try:
                    _ACTIONS[rule.action](self, rule, fields)
                except Exception as exc:  # a broken test, not a fault: make it visible
                    self.emit(event="rule-error", rule=rule.rule_id, error=repr(exc), **fields)
                    raise


def _kill_executor(control: Control, rule: Rule, fields: dict[str, Any]) -> None:
    executor = executor_pid_of()
    control.emit(event="kill-executor", rule=rule.rule_id, target=executor, **fields)
    if executor is None:
        raise RuntimeError("kill-executor: this process does not run under an executor JVM")
    os.kill(executor, signal.SIGKILL)
    # The executor's PySpark daemon notices its executor is gone and ends its workers (SIGHUP).
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.1)
    os._exit(70)


def _kill_python_worker(control: Control, rule: Rule, fields: dict[str, Any]) -> None:
    control.emit(event="kill-python-worker", rule=rule.rule_id, target=os.getpid(), **fields)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)


def _kill_app_executors(control: Control, rule: Rule, fields: dict[str, Any]) -> None:
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    if sc is None:
        raise RuntimeError("kill-app-executors runs on the driver, which has no SparkContext")
    app_id = sc.applicationId
    pids = executor_pids_of_app(app_id)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 15
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    control.emit(
        event="kill-app-executors",
        rule=rule.rule_id,
        targets=pids,
        gone=[not pid_alive(p) for p in pids],
        **fields,
    )


def _pause(control: Control, rule: Rule, fields: dict[str, Any]) -> None:
    control.emit(event="paused", rule=rule.rule_id, **fields)
    deadline = time.monotonic() + PAUSE_TIMEOUT
    while not control.released(rule.rule_id) and time.monotonic() < deadline:
        time.sleep(0.05)
    control.emit(event="resumed", rule=rule.rule_id, **fields)


_ACTIONS: dict[str, Callable[[Control, Rule, dict[str, Any]], None]] = {
    "kill-executor": _kill_executor,
    "kill-python-worker": _kill_python_worker,
    "kill-app-executors": _kill_app_executors,
    "pause": _pause,
}


# --------------------------------------------------------------------------------------------
# Probed sinks
# --------------------------------------------------------------------------------------------


def _fields_of(context: Any) -> dict[str, Any]:
    return {
        "batch": context.batch_id,
        "partition": context.partition_id,
        "attempt": context.attempt,
    }


class _Probed:
    """Events and rules around the hooks; placed before the connector's class in the MRO."""

    _control: Control

    def _around(self, hook: str, fields: dict[str, Any], call: Callable[[], Any]) -> Any:
        control = self._control
        fields = {**fields, "executor_pid": executor_pid_of()}
        control.fire(hook, "before", fields)
        try:
            result = call()
        except BaseException as exc:
            error = f"{type(exc).__name__}: {exc}"[:600]
            control.emit(event="hook", hook=hook, outcome="error", error=error, **fields)
            raise
        control.emit(event="hook", hook=hook, outcome="ok", **fields)
        control.fire(hook, "after", fields)
        return result

    def _txn_fields(self, txn: Any) -> dict[str, Any]:
        return dict(self.__dict__.get("_probe_txns", {}).get(id(txn), {}))

    def begin_transaction(self, context: Any) -> Any:
        fields = _fields_of(context)
        parent = super()
        txn = self._around("begin_transaction", fields, lambda: parent.begin_transaction(context))
        self.__dict__.setdefault("_probe_txns", {})[id(txn)] = fields
        return txn

    def write(self, txn: Any, batch: Any) -> Any:
        parent = super()
        return self._around("write", self._txn_fields(txn), lambda: parent.write(txn, batch))

    def abort(self, txn: Any) -> None:
        parent = super()
        self._around("abort", self._txn_fields(txn), lambda: parent.abort(txn))


class _ProbedCoordinated(_Probed):
    def pre_commit(self, txn: Any) -> Any:
        parent = super()
        return self._around("pre_commit", self._txn_fields(txn), lambda: parent.pre_commit(txn))

    def commit(self, handle: Any) -> None:
        parent = super()
        self._around("commit", _fields_of_handle(handle), lambda: parent.commit(handle))

    def recover_and_abort(self, handle: Any) -> None:
        parent = super()
        self._around(
            "recover_and_abort",
            _fields_of_handle(handle),
            lambda: parent.recover_and_abort(handle),
        )


class _ProbedMarkers(_Probed):
    def commit_with_marker(self, txn: Any, marker: Any) -> None:
        parent = super()
        self._around(
            "commit_with_marker",
            self._txn_fields(txn),
            lambda: parent.commit_with_marker(txn, marker),
        )


def _fields_of_handle(handle: Any) -> dict[str, Any]:
    return {
        "batch": handle.batch_id,
        "partition": handle.partition_id,
        "attempt": handle.attempt,
    }


class ProbedKafkaSink(_ProbedMarkers, KafkaSink):
    """``KafkaSink`` with probes."""


class ProbedPostgresMarkerSink(_ProbedMarkers, PostgresMarkerSink):
    """``PostgresMarkerSink`` (the markers protocol) with probes."""


class ProbedPostgresTwoPhaseSink(_ProbedCoordinated, PostgresTwoPhaseSink):
    """``PostgresTwoPhaseSink`` (the coordinated protocol) with probes."""


class ProbedMariaDBMarkerSink(_ProbedMarkers, MariaDBMarkerSink):
    """``MariaDBMarkerSink`` (the markers protocol) with probes."""


class ProbedMariaDBTwoPhaseSink(_ProbedCoordinated, MariaDBTwoPhaseSink):
    """``MariaDBTwoPhaseSink`` (the coordinated protocol, XA) with probes."""


def probed(sink: S, control: Control) -> S:
    """Return a copy of a connector's ``sink`` whose hooks report to and obey ``control``."""
    classes: list[tuple[type[Any], type[Any]]] = [
        (KafkaSink, ProbedKafkaSink),
        (PostgresMarkerSink, ProbedPostgresMarkerSink),
        (PostgresTwoPhaseSink, ProbedPostgresTwoPhaseSink),
        (MariaDBMarkerSink, ProbedMariaDBMarkerSink),
        (MariaDBTwoPhaseSink, ProbedMariaDBTwoPhaseSink),
    ]
    for base, cls in classes:
        if isinstance(sink, base):
            clone: Any = object.__new__(cls)
            clone.__dict__.update(sink.__dict__)
            clone._control = control
            return clone
    raise TypeError(f"no probed class for {type(sink).__name__}")

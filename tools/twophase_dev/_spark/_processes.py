"""The processes of a Spark standalone cluster told apart: daemons, executors, PySpark's Python.

A cluster's process tree is read from ``/proc`` (:mod:`twophase_dev._host._proc`) and each process
gets a role: the master and worker daemons and the executors by their main class, the Python
daemons and workers by being Python processes below an executor. Processes that lost their parent
(a Python daemon whose executor was just killed) are found by the environment marker
:data:`CLUSTER_ENV_MARKER` every process of a cluster started here carries.

Runs on: the developer's or test session's machine (the Spark driver's).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from twophase_dev._host._proc import (
    ProcStat,
    all_pids,
    environ_has,
    live_table,
    process_cmdline,
)

__all__ = [
    "CLUSTER_ENV_MARKER",
    "EXECUTOR_CLASS",
    "MASTER_CLASS",
    "WORKER_CLASS",
    "ClusterProcess",
    "arg_after",
    "cluster_processes",
    "worker_daemons",
]

#: Environment variable set on every process of a cluster (value: the cluster's work directory).
CLUSTER_ENV_MARKER = "TWOPHASE_DEV_SPARK_CLUSTER"

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


@dataclass(frozen=True)
class ClusterProcess:
    """One live process of the cluster, as seen in ``/proc``.

    Attributes
    ----------
    pid, ppid : int
        Its id and its parent's.
    role : str
        ``master``, ``worker``, ``executor`` (an executor JVM), ``python-daemon`` (PySpark's
        ``pyspark.daemon``, child of an executor), ``python-worker`` (a Python worker forked by a
        daemon, or started by the executor directly), or ``other``.
    worker : int or None
        Index of the worker whose process tree holds it (``None`` for the master and orphans).
    app_id, executor_id : str or None
        For an executor and its Python processes: the application and executor ids.
    state : str
        The kernel's state letter (``R``, ``S``, ``T`` when stopped by ``SIGSTOP``...).
    """

    pid: int
    ppid: int
    role: str
    worker: int | None
    app_id: str | None
    executor_id: str | None
    state: str

    @property
    def stopped(self) -> bool:
        """``True`` while the process is stopped (``SIGSTOP``)."""
        return self.state in ("T", "t")


def arg_after(argv: Sequence[str], flag: str) -> str | None:
    """Return the argument that follows ``flag`` in ``argv``, ``None`` if there is none."""
    with contextlib.suppress(ValueError, IndexError):
        return argv[argv.index(flag) + 1]
    return None


def _is_python(argv: Sequence[str]) -> bool:
    return bool(argv) and "python" in Path(argv[0]).name


def worker_daemons(master_url: str) -> list[tuple[int, list[str]]]:
    """Return the worker daemons on this machine registered with ``master_url``, in pid order.

    Parameters
    ----------
    master_url : str
        ``spark://host:port``: a worker's last argument.

    Returns
    -------
    list of (int, list of str)
        Each worker's pid and command line.
    """
    found = []
    for pid in sorted(all_pids()):
        argv = process_cmdline(pid)
        if WORKER_CLASS in argv and argv[-1] == master_url:
            found.append((pid, argv))
    return found


def _role(
    argv: Sequence[str], stat: ProcStat, parent: ClusterProcess | None
) -> tuple[str, str | None, str | None]:
    """Return the role, application id and executor id of a process of the cluster."""
    if MASTER_CLASS in argv:
        return "master", None, None
    if WORKER_CLASS in argv:
        return "worker", None, None
    if EXECUTOR_CLASS in argv:
        return "executor", arg_after(argv, "--app-id"), arg_after(argv, "--executor-id")
    if parent is not None and _is_python(argv):
        role = "other"
        if parent.role == "executor":
            role = "python-daemon" if "pyspark.daemon" in argv else "python-worker"
        elif parent.role in ("python-daemon", "python-worker"):
            role = "python-worker"
        return role, parent.app_id, parent.executor_id
    if _is_python(argv) and any(a.startswith("pyspark.") for a in argv):
        # An orphan (its executor is gone). PySpark's daemon leads its own process group; the
        # workers it forked do not.
        return ("python-daemon" if stat.pgid == stat.pid else "python-worker"), None, None
    return "other", None, None


def cluster_processes(
    roots: Sequence[tuple[int, int | None]], marker: str | None
) -> list[ClusterProcess]:
    """Return the live processes below ``roots``, and the orphans that carry ``marker``.

    Parameters
    ----------
    roots : sequence of (int, int or None)
        The daemons' pids, each with its worker index (``None`` for the master).
    marker : str or None
        The value of :data:`CLUSTER_ENV_MARKER` of the cluster's processes, to find those whose
        parent died; ``None`` for a cluster started elsewhere.

    Returns
    -------
    list of ClusterProcess
        Parents before their children.
    """
    table = live_table()
    children: dict[int, list[int]] = {}
    for stat in table.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    found: list[ClusterProcess] = []
    seen: set[int] = set()

    def visit(pid: int, worker: int | None, parent: ClusterProcess | None) -> None:
        if pid in seen or pid not in table:
            return
        seen.add(pid)
        stat = table[pid]
        role, app, executor = _role(process_cmdline(pid), stat, parent)
        process = ClusterProcess(pid, stat.ppid, role, worker, app, executor, stat.state)
        found.append(process)
        for child in sorted(children.get(pid, [])):
            visit(child, worker, process)

    for pid, worker in roots:
        visit(pid, worker, None)
    if marker is not None:
        entry = f"{CLUSTER_ENV_MARKER}={marker}".encode()
        for pid in sorted(table):
            if pid not in seen and environ_has(pid, entry):
                visit(pid, None, None)
    return found

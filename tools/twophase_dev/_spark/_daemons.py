"""How a Spark standalone daemon is launched here: its command line, environment and settings.

The master and the workers are ``$SPARK_HOME/bin/spark-class`` runs of PySpark's own Spark
(``SPARK_HOME`` being the ``pyspark`` package directory) on 127.0.0.1. Each carries the cluster's
work directory twice: on its command line (``-Dtwophase.dev.workdir=``, by which its recorded pid
is trusted) and in its environment (:data:`~twophase_dev._spark._processes.CLUSTER_ENV_MARKER`,
inherited by the executors and their Python processes). A daemon is ready when its log says so.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from twophase_dev._errors import DevInfraError
from twophase_dev._host._files import tail
from twophase_dev._host._ports import LOOPBACK
from twophase_dev._host._proc import process_alive
from twophase_dev._host._process import ManagedProcess
from twophase_dev._host._wait import wait_until
from twophase_dev._jvm import pyspark_home, spark_jvm_options
from twophase_dev._spark._processes import (
    CLUSTER_ENV_MARKER,
    MASTER_CLASS,
    WORKER_CLASS,
    arg_after,
    worker_daemons,
)

__all__ = [
    "MASTER_ALIVE",
    "SparkWorker",
    "daemon_env",
    "find_workers",
    "launch_worker",
    "master_argv",
    "master_url_in",
    "port_of",
    "wait_for_log",
    "write_daemon_properties",
]

#: What the master logs once it runs (and accepts workers).
MASTER_ALIVE = "I have been elected leader! New state: ALIVE"
#: What a worker logs once the master knows it.
WORKER_REGISTERED = "Successfully registered with master"

_MASTER_URL_RE = re.compile(r"Starting Spark master at (spark://\S+)")
_WORKER_ADDRESS_RE = re.compile(r"Starting Spark worker (\S+) with")

#: The daemons' ``--properties-file``, in the cluster's work directory.
_PROPERTIES_FILE = "spark-daemons.conf"

#: Settings of the master and worker daemons (their ``--properties-file``).
_DAEMON_PROPERTIES = {
    # Spark 4 starts the master's REST submission server on the fixed port 6066 by default: a
    # second cluster on the machine (another checkout's CI) would collide. Client mode never uses
    # it.
    "spark.master.rest.enabled": "false",
    # The master declares a worker dead after this long without a heartbeat. The zombie tests
    # freeze a worker for ~15 s (SIGSTOP); it must come back as the same registered worker.
    "spark.worker.timeout": "60",
    # Finished applications' directories (executor logs, fetched jars) are removed with the
    # cluster's work directory by stop(); no periodic cleanup thread is needed.
    "spark.worker.cleanup.enabled": "false",
}


@dataclass
class SparkWorker:
    """One worker daemon of a :class:`~twophase_dev.SparkCluster`.

    Attributes
    ----------
    index : int
        Its position in :attr:`SparkCluster.workers` (0, 1, ...).
    pid : int
        The worker JVM's pid.
    work_dir : pathlib.Path
        Its ``--work-dir``: one directory per application and executor, holding the executor's
        ``stdout`` and ``stderr`` (the executor logs) and the jars it fetched.
    log_file : pathlib.Path
        The worker daemon's log.
    address : str or None
        ``host:port`` of its RPC endpoint, once known from its log.
    """

    index: int
    pid: int
    work_dir: Path
    log_file: Path
    address: str | None = None
    process: ManagedProcess | None = None

    def alive(self) -> bool:
        """Tell whether the worker JVM still runs.

        Returns
        -------
        bool
            ``True`` while it runs.
        """
        if self.process is not None:
            return self.process.alive()
        return process_alive(self.pid)

    def executor_logs(self) -> list[Path]:
        """Return the ``stderr`` files of every executor this worker has launched, oldest first.

        Returns
        -------
        list of pathlib.Path
            ``<work_dir>/<app-id>/<executor-id>/stderr`` files.
        """
        found = list(self.work_dir.glob("app-*/*/stderr"))
        return sorted(found, key=lambda p: p.stat().st_mtime if p.exists() else 0.0)

    def wait_registered(self, deadline: float) -> None:
        """Wait until the master knows this worker (then read its address); raise if it died."""
        assert self.process is not None, "only a worker started by this handle is waited for"
        wait_for_log(
            self.process, self.log_file, WORKER_REGISTERED, f"worker {self.index}", deadline
        )
        self.address = worker_address_in(self.log_file)

    def copy_executor_logs(self, target: Path) -> None:
        """Copy each executor's ``stdout`` and ``stderr`` to ``<target>/<app>/<executor>/``."""
        for stream in [
            *self.work_dir.glob("app-*/*/stderr"),
            *self.work_dir.glob("app-*/*/stdout"),
        ]:
            directory = target / stream.parent.parent.name / stream.parent.name
            directory.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copyfile(stream, directory / stream.name)


def write_daemon_properties(work_dir: Path) -> None:
    """Write the daemons' ``--properties-file`` into the cluster's ``work_dir``."""
    properties = work_dir / _PROPERTIES_FILE
    properties.write_text("".join(f"{k} {v}\n" for k, v in _DAEMON_PROPERTIES.items()))


def daemon_env(work_dir: Path, *, daemon_memory: str, python: str) -> dict[str, str]:
    """Return the environment of a cluster's daemons (inherited by its executors).

    Parameters
    ----------
    work_dir : pathlib.Path
        The cluster's work directory.
    daemon_memory : str
        Heap of each daemon.
    python : str
        The executors' Python unless the application sets ``spark.pyspark.python``.

    Returns
    -------
    dict of str to str
        This process's environment without its ``SPARK_*`` and ``PYSPARK_*`` settings, plus the
        cluster's.
    """
    # A SPARK_* setting of the caller's shell (another SPARK_HOME, conf dir, worker options...)
    # must not leak into this cluster.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    env.update(
        {
            "SPARK_HOME": str(pyspark_home()),
            # No SPARK_CONF_DIR of its own (the settings come from --properties-file): the class
            # path of the daemons and the executors then starts with PySpark's conf directory
            # like a local driver's, so they start from the class-data archive.
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_LOCAL_DIRS": str(work_dir / "local"),
            "SPARK_DAEMON_MEMORY": daemon_memory,
            # The marker ManagedProcess looks for in the daemons' command lines.
            "SPARK_DAEMON_JAVA_OPTS": f"-Dtwophase.dev.workdir={work_dir} {spark_jvm_options()}",
            # Used by executors only if the application sets no spark.pyspark.python.
            "PYSPARK_PYTHON": python,
            CLUSTER_ENV_MARKER: str(work_dir),
        }
    )
    return env


def _spark_class() -> str:
    return str(pyspark_home() / "bin" / "spark-class")


def master_argv(port: int, cluster_dir: Path) -> list[str]:
    """Return the master's command line (RPC on ``port`` of 127.0.0.1, no web UI port fixed)."""
    properties = cluster_dir / _PROPERTIES_FILE
    return [
        _spark_class(),
        MASTER_CLASS,
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--webui-port",
        "0",  # any free port: nobody needs the UI of a test cluster
        "--properties-file",
        str(properties),
    ]


def _worker_argv(
    master_url: str, *, cores: int, memory: str, work_dir: Path, properties: Path
) -> list[str]:
    """Return a worker's command line (the master URL last: :func:`worker_daemons` relies on it)."""
    return [
        _spark_class(),
        WORKER_CLASS,
        "--host",
        LOOPBACK,
        "--port",
        "0",
        "--webui-port",
        "0",
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--work-dir",
        str(work_dir),
        "--properties-file",
        str(properties),
        master_url,
    ]


def launch_worker(
    index: int,
    master_url: str,
    *,
    cores: int,
    memory: str,
    cluster_dir: Path,
    log_dir: Path,
    spawn: Callable[[list[str], Path, Path], ManagedProcess],
) -> SparkWorker:
    """Start worker ``index`` of the cluster in ``cluster_dir`` (it registers in the background).

    Parameters
    ----------
    index : int
        The worker's index.
    master_url : str
        The master it registers with.
    cores, memory : int, str
        What it offers to executors.
    cluster_dir, log_dir : pathlib.Path
        The cluster's work directory (``worker-<i>/`` goes there) and log directory.
    spawn : callable
        Starts a daemon: ``spawn(argv, log_file, cwd)``.

    Returns
    -------
    SparkWorker
        The worker, its address not known yet (see :meth:`SparkWorker.wait_registered`).
    """
    work_dir = cluster_dir / f"worker-{index}"
    work_dir.mkdir(exist_ok=True)
    log_file = log_dir / f"worker-{index}.log"
    properties = cluster_dir / _PROPERTIES_FILE
    argv = _worker_argv(
        master_url, cores=cores, memory=memory, work_dir=work_dir, properties=properties
    )
    process = spawn(argv, log_file, work_dir)
    return SparkWorker(index, process.pid, work_dir, log_file, None, process)


def find_workers(master_url: str) -> tuple[list[SparkWorker], int | None]:
    """Return the workers on this machine registered with ``master_url``, and their cores.

    Parameters
    ----------
    master_url : str
        ``spark://host:port``.

    Returns
    -------
    (list of SparkWorker, int or None)
        The workers (their logs unknown: ``os.devnull``) and the cores one of them offers.
    """
    workers: list[SparkWorker] = []
    cores = None
    for pid, argv in worker_daemons(master_url):
        work = arg_after(argv, "--work-dir") or ""
        workers.append(SparkWorker(len(workers), pid, Path(work), Path(os.devnull)))
        offered = arg_after(argv, "--cores")
        if offered is not None and offered.isdigit():
            cores = int(offered)
    return workers, cores


def _read(log_file: Path) -> str:
    try:
        return log_file.read_text(errors="replace")
    except OSError:
        return ""


def master_url_in(log_file: Path) -> str:
    """Return the URL the master bound, from its log (Spark may have moved to another port)."""
    match = _MASTER_URL_RE.search(_read(log_file))
    if match is None:
        raise DevInfraError(f"no master URL in {log_file}:\n{tail(log_file)}")
    return match.group(1)


def worker_address_in(log_file: Path) -> str | None:
    """Return a worker's RPC ``host:port`` from its log, ``None`` if not logged (yet)."""
    found = _WORKER_ADDRESS_RE.search(_read(log_file))
    return found.group(1) if found else None


def wait_for_log(
    process: ManagedProcess, log_file: Path, needle: str, what: str, deadline: float
) -> None:
    """Wait until ``needle`` is in ``log_file``; raise if ``process`` dies or ``deadline`` passes.

    Parameters
    ----------
    process : ManagedProcess
        The daemon.
    log_file : pathlib.Path
        Its log.
    needle : str
        The line that says it is ready.
    what : str
        The daemon, for messages (``worker 1``).
    deadline : float
        :func:`time.monotonic` value to give up at.
    """

    def died() -> None:
        if not process.alive():
            raise DevInfraError(
                f"{what} exited during startup (exit {process.returncode()}). "
                f"Log {log_file}:\n{tail(log_file, 40)}"
            )

    if not wait_until(
        lambda: needle in _read(log_file),
        timeout=max(0.0, deadline - time.monotonic()),
        abort=died,
    ):
        raise DevInfraError(f"{what} did not start in time. Log {log_file}:\n{tail(log_file, 40)}")


def port_of(master_url: str) -> int:
    """Return the port of a ``spark://host:port`` URL."""
    match = re.match(r"spark://[^:/]+:(\d+)", master_url)
    if match is None:
        raise DevInfraError(f"not a standalone master URL: {master_url!r} (spark://host:port)")
    return int(match.group(1))

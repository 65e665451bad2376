"""A Spark standalone cluster on 127.0.0.1: one master and N one-core workers, each its own JVM.

The daemons come from the installed PySpark itself (``$SPARK_HOME/bin/spark-class
org.apache.spark.deploy.master.Master`` / ``...worker.Worker``, ``SPARK_HOME`` being the ``pyspark``
package directory): nothing is downloaded. Applications connect in client mode with
:func:`cluster_session`, which gives the executors Spark's Kafka jars (``spark.jars``, fetched from
the driver) and the driver's Python (the project's ``.venv``).

Every process of the cluster -- master, workers, the executors the workers launch and the Python
daemons and workers of those executors -- carries the environment variable
:data:`CLUSTER_ENV_MARKER` naming the cluster's work directory, so that :meth:`SparkCluster.stop`
finds and kills all of them, even those whose parent already died.

Runs on: the developer's or test session's machine (the Spark driver's machine).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from twophase_dev._common import (
    LOOPBACK,
    DevInfraError,
    ManagedProcess,
    ServiceContext,
    free_ports,
    make_work_dir,
    process_alive,
    process_cmdline,
    rotate_log,
    tail,
    wait_for_port,
    wait_until,
    write_owner,
)
from twophase_dev._jvm import find_java, pyspark_home, spark_jvm_options
from twophase_dev._spark import spark_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CLUSTER_ENV_MARKER",
    "ClusterProcess",
    "SparkCluster",
    "SparkWorker",
    "cluster_conf",
    "cluster_session",
    "pyspark_home",
]

#: Environment variable set on every process of a cluster (value: the cluster's work directory).
CLUSTER_ENV_MARKER = "TWOPHASE_DEV_SPARK_CLUSTER"

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"

_MASTER_URL_RE = re.compile(r"Starting Spark master at (spark://\S+)")
_MASTER_ALIVE = "I have been elected leader! New state: ALIVE"
_WORKER_ADDRESS_RE = re.compile(r"Starting Spark worker (\S+) with")
_WORKER_REGISTERED = "Successfully registered with master"

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


# --------------------------------------------------------------------------------------------
# The process table
# --------------------------------------------------------------------------------------------


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


def _stat(pid: int) -> tuple[int, str, int, int] | None:
    """Return ``(ppid, state, start_time, pgid)`` of ``pid`` from ``/proc``, ``None`` if gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = raw.rsplit(")", 1)[-1].split()
    # After the command: state (field 3 of stat), ppid, pgrp, ..., starttime (field 22).
    return int(fields[1]), fields[0], int(fields[19]), int(fields[2])


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _arg_after(argv: Sequence[str], flag: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return argv[argv.index(flag) + 1]
    return None


def _is_python(argv: Sequence[str]) -> bool:
    return bool(argv) and "python" in Path(argv[0]).name


def _kill_all(pids: Iterable[tuple[int, int]], sig: int) -> None:
    """Send ``sig`` to each ``(pid, start_time)`` that is still the same process."""
    for pid, started in pids:
        stat = _stat(pid)
        if stat is None or stat[2] != started or stat[1] in ("Z", "X"):
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


# --------------------------------------------------------------------------------------------
# Workers
# --------------------------------------------------------------------------------------------


@dataclass
class SparkWorker:
    """One worker daemon of a :class:`SparkCluster`.

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


class SparkCluster(ServiceContext):
    """A Spark standalone cluster on 127.0.0.1: a master and ``workers`` worker JVMs.

    Parameters
    ----------
    workers : int, optional
        Number of worker daemons (2 by default), each offering ``worker_cores`` cores.
    worker_cores : int, optional
        Cores per worker: 1 by default, so that every worker runs exactly one executor with one
        task at a time, and "the other executor" is always the other worker.
    worker_memory : str, optional
        Memory a worker offers to executors (``1g``); :func:`cluster_session` asks for 512m each.
    daemon_memory : str, optional
        Heap of the master and worker daemons themselves.
    port : int, optional
        The master's RPC port; a free one is picked if omitted (Spark moves on to the next port if
        it is taken meanwhile; the URL it really bound is read from its log).
    work_dir : pathlib.Path, optional
        Configuration, the workers' work directories (executor logs) and scratch space; a throwaway
        ``twophase-dev-spark-cluster-*`` directory in the system temporary directory by default,
        removed by :meth:`stop`.
    log_dir : pathlib.Path, optional
        Where ``master.log`` and ``worker-<i>.log`` go, and where :meth:`stop` copies the executor
        logs (``executors/<app>/<executor>/stderr``); kept after :meth:`stop`. Defaults to
        ``<work_dir>/logs``.
    python : str, optional
        The Python of the executors' Python workers; the current interpreter by default (the
        project's ``.venv`` when run from it).
    detach : bool, optional
        ``True`` for a cluster that outlives this Python process (``twophase-dev cluster up``);
        ``False`` (default) makes the kernel stop the daemons if this process dies first.
    startup_timeout : float, optional
        Seconds to wait for the master to be elected and every worker to register.

    Examples
    --------
    >>> with SparkCluster() as cluster:  # doctest: +SKIP
    ...     spark = cluster_session("demo", cluster)
    ...     print(cluster.master_url, cluster.executor_pids())
    """

    def __init__(
        self,
        *,
        workers: int = 2,
        worker_cores: int = 1,
        worker_memory: str = "1g",
        daemon_memory: str = "256m",
        port: int | None = None,
        work_dir: Path | None = None,
        log_dir: Path | None = None,
        python: str | None = None,
        detach: bool = False,
        startup_timeout: float = 90.0,
    ):
        if workers < 1 or worker_cores < 1:
            raise ValueError("a cluster needs at least one worker with at least one core")
        self.worker_count = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.port = port
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir
        self._log_dir = log_dir
        self.python = python or sys.executable
        self.detach = detach
        self.startup_timeout = startup_timeout
        self._master: ManagedProcess | None = None
        self._master_url: str | None = None
        self.workers: list[SparkWorker] = []
        #: ``False`` for a cluster this package did not start (see :meth:`external`).
        self.managed = True
        #: Seconds the last :meth:`start` took.
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------- attaching

    @classmethod
    def external(cls, master_url: str) -> SparkCluster:
        """Describe a cluster this package did not start (e.g. ``$TWOPHASE_SPARK_MASTER``).

        Its workers are found on this machine by their command line (the master URL is their last
        argument), so :meth:`processes` and the pid helpers work for any cluster on 127.0.0.1;
        :meth:`start` and :meth:`stop` raise :class:`DevInfraError`.

        Parameters
        ----------
        master_url : str
            ``spark://host:port``.

        Returns
        -------
        SparkCluster
            The handle.
        """
        cluster = cls()
        cluster.managed = False
        cluster._master_url = master_url
        cluster.port = _port_of(master_url)
        workers: list[SparkWorker] = []
        for pid in sorted(_all_pids()):
            argv = process_cmdline(pid)
            if _WORKER_CLASS in argv and argv[-1] == master_url:
                work = _arg_after(argv, "--work-dir") or ""
                workers.append(SparkWorker(len(workers), pid, Path(work), Path(os.devnull)))
                cores = _arg_after(argv, "--cores")
                if cores is not None and cores.isdigit():
                    cluster.worker_cores = int(cores)
        cluster.workers = workers
        cluster.worker_count = len(workers)
        return cluster

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> SparkCluster:
        """Re-create the handle of a cluster started by another process (see :meth:`to_record`).

        Parameters
        ----------
        record : mapping
            What :meth:`to_record` returned.

        Returns
        -------
        SparkCluster
            A handle that can inspect and stop that cluster.
        """
        cluster = cls(
            workers=len(record["workers"]),
            worker_cores=int(record["worker_cores"]),
            worker_memory=str(record["worker_memory"]),
            daemon_memory=str(record.get("daemon_memory", "256m")),
            port=int(record["port"]),
            work_dir=Path(record["work_dir"]),
            log_dir=Path(record["log_dir"]),
            python=str(record["python"]),
            detach=True,
        )
        cluster._own_work_dir = bool(record.get("own_work_dir", True))
        cluster._master_url = str(record["master_url"])
        marker = str(cluster.work_dir)
        cluster._master = ManagedProcess(int(record["pid"]), marker)
        cluster.workers = [
            SparkWorker(
                int(w["index"]),
                int(w["pid"]),
                Path(w["work_dir"]),
                Path(w["log_file"]),
                w.get("address"),
                ManagedProcess(int(w["pid"]), marker),
            )
            for w in record["workers"]
        ]
        return cluster

    def to_record(self) -> dict[str, Any]:
        """Describe this running cluster as JSON-serialisable data (for ``twophase-dev`` state).

        Returns
        -------
        dict
            Enough to re-create the handle with :meth:`from_record`.
        """
        if self._master is None or self.work_dir is None:
            raise DevInfraError("the cluster has not been started")
        return {
            "kind": "spark-cluster",
            "pid": self._master.pid,
            "port": self.port,
            "master_url": self.master_url,
            "worker_cores": self.worker_cores,
            "worker_memory": self.worker_memory,
            "daemon_memory": self.daemon_memory,
            "python": self.python,
            "work_dir": str(self.work_dir),
            "own_work_dir": self._own_work_dir,
            "log_dir": str(self.log_dir),
            "log_file": str(self.log_file),
            "workers": [
                {
                    "index": w.index,
                    "pid": w.pid,
                    "work_dir": str(w.work_dir),
                    "log_file": str(w.log_file),
                    "address": w.address,
                }
                for w in self.workers
            ],
        }

    # ---------------------------------------------------------------- properties

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, the value for ``SparkSession.builder.master``."""
        if self._master_url is None:
            raise DevInfraError("the cluster has no master yet: call start() first")
        return self._master_url

    @property
    def log_dir(self) -> Path:
        """Directory of ``master.log``, ``worker-<i>.log`` and the harvested executor logs."""
        if self._log_dir is not None:
            return self._log_dir
        if self.work_dir is None:
            raise DevInfraError("the cluster has no work directory yet: call start() first")
        return self.work_dir / "logs"

    @property
    def log_file(self) -> Path:
        """The master's log."""
        return self.log_dir / "master.log"

    @property
    def pid(self) -> int | None:
        """Process id of the master JVM, ``None`` when not started (or external)."""
        return None if self._master is None else self._master.pid

    @property
    def total_cores(self) -> int:
        """Cores the workers offer together (one executor per core with :func:`cluster_session`)."""
        return self.worker_count * self.worker_cores

    def is_running(self) -> bool:
        """Tell whether the master runs (for an external cluster: whether its port answers).

        Returns
        -------
        bool
            ``True`` while the master process is alive.
        """
        if not self.managed:
            return self.port is not None and wait_for_port(LOOPBACK, self.port, timeout=0)
        return self._master is not None and self._master.alive()

    # ---------------------------------------------------------------- processes

    def processes(self) -> list[ClusterProcess]:
        """Return the live processes of the cluster: master, workers and everything below them.

        Executors are recognised by their main class, Python daemons and workers by being Python
        processes below an executor. Processes that lost their parent (a Python daemon whose
        executor was just killed) are included with ``worker=None`` when they carry the cluster's
        environment marker (managed clusters only).

        Returns
        -------
        list of ClusterProcess
            Parents before their children.
        """
        table: dict[int, tuple[int, str, int]] = {}
        for pid in _all_pids():
            stat = _stat(pid)
            if stat is not None and stat[1] not in ("Z", "X"):
                table[pid] = (stat[0], stat[1], stat[3])
        children: dict[int, list[int]] = {}
        for pid, (ppid, _state, _pgid) in table.items():
            children.setdefault(ppid, []).append(pid)
        found: list[ClusterProcess] = []
        seen: set[int] = set()

        def visit(pid: int, worker: int | None, parent: ClusterProcess | None) -> None:
            if pid in seen or pid not in table:
                return
            seen.add(pid)
            argv = process_cmdline(pid)
            role, app, executor = "other", None, None
            if _MASTER_CLASS in argv:
                role = "master"
            elif _WORKER_CLASS in argv:
                role = "worker"
            elif _EXECUTOR_CLASS in argv:
                role = "executor"
                app, executor = _arg_after(argv, "--app-id"), _arg_after(argv, "--executor-id")
            elif parent is not None and _is_python(argv):
                app, executor = parent.app_id, parent.executor_id
                if parent.role == "executor":
                    role = "python-daemon" if "pyspark.daemon" in argv else "python-worker"
                elif parent.role in ("python-daemon", "python-worker"):
                    role = "python-worker"
            elif _is_python(argv) and any(a.startswith("pyspark.") for a in argv):
                # An orphan (its executor is gone). PySpark's daemon leads its own process group;
                # the workers it forked do not.
                role = "python-daemon" if table[pid][2] == pid else "python-worker"
            process = ClusterProcess(pid, table[pid][0], role, worker, app, executor, table[pid][1])
            found.append(process)
            for child in sorted(children.get(pid, [])):
                visit(child, worker, process)

        if self._master is not None and self._master.alive():
            visit(self._master.pid, None, None)
        for worker in self.workers:
            if worker.alive():
                visit(worker.pid, worker.index, None)
        if self.managed and self.work_dir is not None:
            entry = f"{CLUSTER_ENV_MARKER}={self.work_dir}".encode()
            for pid in sorted(table):
                if pid not in seen and _environ_has(pid, entry):
                    visit(pid, None, None)
        return found

    def executor_pids(self, app_id: str | None = None) -> list[int]:
        """Return the pids of the live executor JVMs (of one application if ``app_id`` is given).

        Parameters
        ----------
        app_id : str, optional
            ``spark.sparkContext.applicationId``.

        Returns
        -------
        list of int
            One pid per executor, in worker order.
        """
        return [
            p.pid
            for p in self.processes()
            if p.role == "executor" and (app_id is None or p.app_id == app_id)
        ]

    def python_worker_pids(self, app_id: str | None = None) -> list[int]:
        """Return the pids of the executors' Python workers (not their daemons).

        Parameters
        ----------
        app_id : str, optional
            Only those of this application.

        Returns
        -------
        list of int
            The pids.
        """
        return [
            p.pid
            for p in self.processes()
            if p.role == "python-worker" and (app_id is None or p.app_id == app_id)
        ]

    def worker_tree(self, index: int) -> list[ClusterProcess]:
        """Return worker ``index``'s daemon and every process below it (executors, Python).

        Parameters
        ----------
        index : int
            The worker's index.

        Returns
        -------
        list of ClusterProcess
            Parents first.
        """
        return [p for p in self.processes() if p.worker == index]

    def worker_of_pid(self, pid: int) -> int | None:
        """Return the index of the worker whose tree holds process ``pid``, if any.

        Parameters
        ----------
        pid : int
            An executor's or Python worker's pid.

        Returns
        -------
        int or None
            The worker index.
        """
        for process in self.processes():
            if process.pid == pid:
                return process.worker
        return None

    # ---------------------------------------------------------------- lifecycle

    def _require_managed(self, action: str) -> None:
        if not self.managed:
            raise DevInfraError(
                f"cannot {action} the Spark cluster at {self.master_url}: it was not started by "
                "twophase_dev in this environment (TWOPHASE_SPARK_MASTER points at it)"
            )

    def _env(self) -> dict[str, str]:
        assert self.work_dir is not None
        env = dict(os.environ)
        for key in list(env):
            # A SPARK_* setting of the caller's shell (another SPARK_HOME, conf dir, worker
            # options...) must not leak into this cluster.
            if key.startswith(("SPARK_", "PYSPARK_")):
                del env[key]
        env.update(
            {
                "SPARK_HOME": str(pyspark_home()),
                # No SPARK_CONF_DIR of its own (the settings come from --properties-file): the
                # class path of the daemons and the executors then starts with PySpark's conf
                # directory like a local driver's, so they start from the class-data archive.
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOCAL_DIRS": str(self.work_dir / "local"),
                "SPARK_DAEMON_MEMORY": self.daemon_memory,
                # The marker ManagedProcess looks for in the daemons' command lines.
                "SPARK_DAEMON_JAVA_OPTS": (
                    f"-Dtwophase.dev.workdir={self.work_dir} {spark_jvm_options()}"
                ),
                # Used by executors only if the application sets no spark.pyspark.python.
                "PYSPARK_PYTHON": self.python,
                CLUSTER_ENV_MARKER: str(self.work_dir),
            }
        )
        return env

    def start(self) -> SparkCluster:
        """Start the master, then the workers, and wait until every worker has registered.

        Returns
        -------
        SparkCluster
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If Java or PySpark is missing or a daemon does not come up in time; the message
            includes the end of its log.
        """
        self._require_managed("start")
        if self.is_running():
            return self
        started = time.monotonic()
        created = self.work_dir is None
        if self.work_dir is None:
            self.work_dir = make_work_dir("spark-cluster")
        try:
            self._start_in(self.work_dir)
        except BaseException:
            self._kill_everything()
            if created:
                shutil.rmtree(self.work_dir, ignore_errors=True)
                self.work_dir = None
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _start_in(self, work_dir: Path) -> None:
        if find_java() is None:
            raise DevInfraError(
                "Java was not found. Spark needs Java 17 or newer: run 'bash scripts/setup.sh'."
            )
        (work_dir / "local").mkdir(exist_ok=True)
        properties = work_dir / "spark-daemons.conf"
        properties.write_text("".join(f"{k} {v}\n" for k, v in _DAEMON_PROPERTIES.items()))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        spark_class = str(pyspark_home() / "bin" / "spark-class")
        env = self._env()
        port = self.port if self.port is not None else free_ports(1)[0]
        rotate_log(self.log_file)
        self._master = ManagedProcess.spawn(
            [
                spark_class,
                _MASTER_CLASS,
                "--host",
                LOOPBACK,
                "--port",
                str(port),
                "--webui-port",
                "0",  # any free port: nobody needs the UI of a test cluster
                "--properties-file",
                str(properties),
            ],
            marker=str(work_dir),
            log_file=self.log_file,
            cwd=work_dir,
            env=env,
            detach=self.detach,
            death_signal="TERM",
        )
        write_owner(work_dir, self._master.pid)
        deadline = time.monotonic() + self.startup_timeout
        self._wait_for_log(self._master, self.log_file, _MASTER_ALIVE, "the Spark master", deadline)
        match = _MASTER_URL_RE.search(self.log_file.read_text(errors="replace"))
        if match is None:
            raise DevInfraError(f"no master URL in {self.log_file}:\n{tail(self.log_file)}")
        self._master_url = match.group(1)
        self.port = _port_of(self._master_url)
        self.workers = []
        for index in range(self.worker_count):
            worker_dir = work_dir / f"worker-{index}"
            worker_dir.mkdir(exist_ok=True)
            log_file = self.log_dir / f"worker-{index}.log"
            rotate_log(log_file)
            process = ManagedProcess.spawn(
                [
                    spark_class,
                    _WORKER_CLASS,
                    "--host",
                    LOOPBACK,
                    "--port",
                    "0",
                    "--webui-port",
                    "0",
                    "--cores",
                    str(self.worker_cores),
                    "--memory",
                    self.worker_memory,
                    "--work-dir",
                    str(worker_dir),
                    "--properties-file",
                    str(properties),
                    self._master_url,
                ],
                marker=str(work_dir),
                log_file=log_file,
                cwd=worker_dir,
                env=env,
                detach=self.detach,
                death_signal="TERM",
            )
            self.workers.append(
                SparkWorker(index, process.pid, worker_dir, log_file, None, process)
            )
        for worker in self.workers:
            assert worker.process is not None
            self._wait_for_log(
                worker.process,
                worker.log_file,
                _WORKER_REGISTERED,
                f"worker {worker.index}",
                deadline,
            )
            found = _WORKER_ADDRESS_RE.search(worker.log_file.read_text(errors="replace"))
            worker.address = found.group(1) if found else None

    def _wait_for_log(
        self, process: ManagedProcess, log_file: Path, needle: str, what: str, deadline: float
    ) -> None:
        def died() -> None:
            if not process.alive():
                raise DevInfraError(
                    f"{what} exited during startup (exit {process.returncode()}). "
                    f"Log {log_file}:\n{tail(log_file, 40)}"
                )

        def logged() -> bool:
            try:
                return needle in log_file.read_text(errors="replace")
            except OSError:
                return False

        if not wait_until(logged, timeout=max(0.0, deadline - time.monotonic()), abort=died):
            raise DevInfraError(
                f"{what} did not start within {self.startup_timeout:.0f} s. "
                f"Log {log_file}:\n{tail(log_file, 40)}"
            )

    def _snapshot(self) -> list[tuple[int, int]]:
        """Return ``(pid, start_time)`` of every process of the cluster, children first."""
        pids = [p.pid for p in reversed(self.processes())]
        snapshot = []
        for pid in pids:
            stat = _stat(pid)
            if stat is not None:
                snapshot.append((pid, stat[2]))
        return snapshot

    def _kill_everything(self) -> None:
        snapshot = self._snapshot()
        _kill_all(snapshot, signal.SIGKILL)
        for process in [self._master, *(w.process for w in self.workers)]:
            if process is not None:
                process.wait(5.0)

    def stop(self, *, timeout: float = 20.0, remove_data: bool = True) -> None:
        """Stop the workers (with their executors and Python processes), then the master.

        Stopped (``SIGSTOP``) processes are resumed first. Each worker gets ``SIGTERM`` (it kills
        its executors); whatever of the cluster is still alive after ``timeout`` seconds -- a
        worker, an executor, a Python daemon whose executor is gone -- gets ``SIGKILL``. The
        executors' ``stdout``/``stderr`` are copied to ``<log_dir>/executors/`` before the work
        directory is removed.

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait for the daemons to exit on ``SIGTERM``.
        remove_data : bool, optional
            Remove the work directory if this handle created it.
        """
        self._require_managed("stop")
        snapshot = self._snapshot()
        _kill_all(snapshot, signal.SIGCONT)
        worker_processes = [w.process for w in self.workers if w.process is not None]
        for process in worker_processes:
            process.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in worker_processes:
            process.wait(max(0.1, deadline - time.monotonic()))
        if self._master is not None:
            self._master.signal(signal.SIGTERM)
            self._master.wait(max(1.0, deadline - time.monotonic()))
        # Everything left (a daemon that ignored SIGTERM, orphaned executors or Python workers).
        leftovers = self._snapshot() + snapshot
        _kill_all(leftovers, signal.SIGKILL)
        for remaining in [self._master, *worker_processes]:
            if remaining is not None and not remaining.wait(10.0):
                raise DevInfraError(f"process {remaining.pid} did not exit even after SIGKILL")
        wait_until(lambda: not any(process_alive(pid) for pid, _ in leftovers), timeout=10.0)
        self._harvest_executor_logs()
        if remove_data and self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def _harvest_executor_logs(self) -> None:
        if self._log_dir is None:
            return  # the logs live in the work directory, which goes anyway
        for worker in self.workers:
            for stream in [
                *worker.work_dir.glob("app-*/*/stderr"),
                *worker.work_dir.glob("app-*/*/stdout"),
            ]:
                target = self.log_dir / "executors" / stream.parent.parent.name / stream.parent.name
                target.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copyfile(stream, target / stream.name)

    def __repr__(self) -> str:
        state = "running" if self.managed and self.is_running() else "stopped"
        if not self.managed:
            state = "external"
        url = self._master_url or "-"
        return f"SparkCluster(master_url={url!r}, workers={self.worker_count}, {state})"


def _port_of(master_url: str) -> int:
    match = re.match(r"spark://[^:/]+:(\d+)", master_url)
    if match is None:
        raise DevInfraError(f"not a standalone master URL: {master_url!r} (spark://host:port)")
    return int(match.group(1))


# --------------------------------------------------------------------------------------------
# Applications
# --------------------------------------------------------------------------------------------


def cluster_conf(cluster: SparkCluster, *, python_path: Sequence[str] = ()) -> dict[str, str]:
    """Return the settings :func:`cluster_session` adds to :func:`~twophase_dev.spark_test_conf`.

    Parameters
    ----------
    cluster : SparkCluster
        The cluster (its Python and size).
    python_path : sequence of str, optional
        Directories the executors' Python workers must import from besides the installed packages
        (e.g. the repository root, for classes defined in test modules).

    Returns
    -------
    dict of str to str
        Configuration keys and values, each explained in the source.
    """
    conf = {
        # Client mode: the driver is this process, the executors run on the workers.
        "spark.submit.deployMode": "client",
        # One executor per worker core, each running one task at a time: with 2 one-core workers a
        # batch of 2 partitions runs one task on each executor, and a retry lands on the survivor.
        "spark.executor.cores": "1",
        "spark.executor.memory": "512m",
        "spark.cores.max": str(cluster.total_cores),
        # Task retries on (local mode has none): a task that fails -- its Python worker killed,
        # its executor lost -- runs again, 4 attempts in all (Spark's default on a cluster, set
        # explicitly because the tests rely on it).
        "spark.task.maxFailures": "4",
        # Speculative attempts are refused by twophase (docs/guarantees.md); a cluster is where
        # someone would turn them on, so the tests pin them off.
        "spark.speculation": "false",
        # Executors send a heartbeat every second...
        "spark.executor.heartbeatInterval": "1s",
        # ...and the driver declares an executor lost after 10 s without one (Spark's default is
        # 120 s). A SIGKILLed executor is noticed at once anyway (its connection drops); this one
        # is for a frozen (SIGSTOPped) executor, the zombie tests' case. It is also the default of
        # the RPC ask and shuffle timeouts, which 10 s on loopback leaves ample room for.
        "spark.network.timeout": "10s",
        # The driver checks for expired heartbeats every second instead of every minute.
        "spark.network.timeoutInterval": "1s",
        # A block (a broadcast piece) held by an executor that was just killed is fetched from
        # elsewhere after 1 s instead of 5 s.
        "spark.shuffle.io.retryWait": "1s",
        # Tasks go to any free executor at once: with executors coming and going, waiting 3 s for
        # a "preferred" one (Kafka partitions have preferred executors) only slows retries down.
        "spark.locality.wait": "0s",
        # The first job waits until every executor has registered (at most a minute), so that a
        # test's first batch already runs on both workers.
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        # A failed task may be retried on the executor where it failed; Spark's default, pinned
        # because excluding an executor of a two-executor cluster would stall retries.
        "spark.excludeOnFailure.enabled": "false",
        # Short-lived test JVMs: the C1 compiler alone warms up faster than tiered compilation,
        # the serial collector needs no GC threads on a 2-core machine, and Spark's classes come
        # from the class-data archive (twophase_dev._jvm).
        "spark.executor.extraJavaOptions": spark_jvm_options(),
        "spark.driver.extraJavaOptions": spark_jvm_options(),
        # The executors' Python workers run the cluster's interpreter (the project's .venv).
        "spark.pyspark.python": cluster.python,
        "spark.executorEnv.PYSPARK_PYTHON": cluster.python,
    }
    if python_path:
        conf["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(python_path)
    return conf


def cluster_session(
    app_name: str,
    cluster: SparkCluster,
    *,
    extra_conf: Mapping[str, str] | None = None,
    python_path: Sequence[str] = (),
    kafka: bool = True,
    wait_for_executors: bool = True,
    timeout: float = 90.0,
    log_level: str = "WARN",
) -> SparkSession:
    """Create a client-mode SparkSession on ``cluster`` with Spark's Kafka jars on the executors.

    The settings are :func:`~twophase_dev.spark_test_conf` plus :func:`cluster_conf`; Spark ships
    ``spark.jars`` (the Kafka connector) to every executor.

    Parameters
    ----------
    app_name : str
        Spark application name.
    cluster : SparkCluster
        A running cluster.
    extra_conf : mapping of str to str, optional
        Overrides and additions.
    python_path : sequence of str, optional
        See :func:`cluster_conf`.
    kafka : bool, optional
        Put Spark's Kafka connector on the driver's and the executors' classpaths.
    wait_for_executors : bool, optional
        Return only once one executor per worker core has registered.
    timeout : float, optional
        Seconds to wait for them.
    log_level : str, optional
        Log level of the driver's Spark logger.

    Returns
    -------
    pyspark.sql.SparkSession
        The session; ``spark.sparkContext.applicationId`` names its executors in
        :meth:`SparkCluster.processes`.

    Raises
    ------
    DevInfraError
        If another SparkContext already runs in this process (one per process: run the
        cluster's driver in a process of its own), or the executors do not register in time.
    """
    conf = cluster_conf(cluster, python_path=python_path)
    conf.update(extra_conf or {})
    session = spark_session(
        app_name, master=cluster.master_url, extra_conf=conf, kafka=kafka, log_level=log_level
    )
    master = session.sparkContext.master
    if master != cluster.master_url:
        raise DevInfraError(
            f"a SparkContext with master {master!r} already runs in this process (one per "
            f"process); stop it first, or run the driver for {cluster.master_url} in a process "
            "of its own"
        )
    if wait_for_executors:
        wanted = cluster.total_cores
        tracker = session.sparkContext._jsc.sc().statusTracker()

        def registered() -> bool:
            return len(tracker.getExecutorInfos()) - 1 >= wanted  # the driver is listed too

        if not wait_until(registered, timeout=timeout, interval=0.25):
            raise DevInfraError(
                f"only {len(tracker.getExecutorInfos()) - 1} of {wanted} executors registered "
                f"within {timeout:.0f} s; see the worker logs in {cluster.log_dir}"
            )
    return session

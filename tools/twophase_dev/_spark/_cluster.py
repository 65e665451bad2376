"""A Spark standalone cluster on 127.0.0.1: a master and N one-core workers, each its own JVM.

:class:`SparkCluster` is a :class:`~twophase_dev._server.ManagedService` whose server is the
master (its work directory, owner file, logs, records and failed-start clean-up are the base
class's); it adds the workers (:mod:`._daemons`), the process table that tells executors and
PySpark's Python processes apart (:mod:`._processes`), and a stop that finds every process of the
cluster, even those whose parent already died. Applications connect in client mode with
:func:`~twophase_dev.cluster_session`.

Runs on: the developer's or test session's machine (the Spark driver's machine).
"""

from __future__ import annotations

import shutil
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from twophase_dev._errors import DevInfraError
from twophase_dev._host._files import tail
from twophase_dev._host._ports import LOOPBACK, free_ports, wait_for_port
from twophase_dev._host._proc import ProcStat, process_alive, read_stat, signal_each
from twophase_dev._host._process import ManagedProcess
from twophase_dev._host._wait import wait_until
from twophase_dev._jvm import find_java
from twophase_dev._server import ManagedService
from twophase_dev._spark._daemons import (
    MASTER_ALIVE,
    SparkWorker,
    daemon_env,
    find_workers,
    launch_worker,
    master_argv,
    master_url_in,
    port_of,
    write_daemon_properties,
)
from twophase_dev._spark._processes import (
    ClusterProcess,
    cluster_processes,
)

__all__ = ["SparkCluster"]


class SparkCluster(ManagedService):
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

    kind: ClassVar[str] = "spark-cluster"
    product: ClassVar[str] = "Spark"
    noun: ClassVar[str] = "cluster"
    address_env: ClassVar[str] = "TWOPHASE_SPARK_MASTER"
    log_name: ClassVar[str] = "master.log"
    ready_interval: ClassVar[float] = 0.2
    log_lines: ClassVar[int] = 40
    not_ready: ClassVar[str] = "master did not start"

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
        super().__init__(
            port=port,
            work_dir=work_dir,
            log_dir=log_dir,
            detach=detach,
            startup_timeout=startup_timeout,
        )
        self.worker_count = workers
        self.worker_cores = worker_cores
        self.worker_memory = worker_memory
        self.daemon_memory = daemon_memory
        self.python = python or sys.executable
        self._master_url: str | None = None
        self.workers: list[SparkWorker] = []

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
        cluster = cls()
        cluster.managed = False
        cluster._master_url = master_url
        cluster.port = port_of(master_url)
        cluster.workers, cores = find_workers(master_url)
        cluster.worker_cores = cores or cluster.worker_cores
        cluster.worker_count = len(cluster.workers)
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
        cluster._master_url = str(record["master_url"])
        cluster._adopt(record)
        cluster.workers = [
            SparkWorker(
                int(w["index"]),
                int(w["pid"]),
                Path(w["work_dir"]),
                Path(w["log_file"]),
                w.get("address"),
                ManagedProcess(int(w["pid"]), cluster._marker()),
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
        options = {
            "worker_cores": self.worker_cores,
            "worker_memory": self.worker_memory,
            "daemon_memory": self.daemon_memory,
            "python": self.python,
        }
        workers = [
            {
                "index": w.index,
                "pid": w.pid,
                "work_dir": str(w.work_dir),
                "log_file": str(w.log_file),
                "address": w.address,
            }
            for w in self.workers
        ]
        return self._service_record(
            {"master_url": self._master_url, **options}, {"workers": workers}
        )

    # ---------------------------------------------------------------- properties

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:<port>``, the value for ``SparkSession.builder.master``."""
        if self._master_url is None:
            raise DevInfraError("the cluster has no master yet: call start() first")
        return self._master_url

    @property
    def total_cores(self) -> int:
        """Cores the workers offer together (one executor per core with :func:`cluster_session`)."""
        return self.worker_count * self.worker_cores

    def _address(self) -> str:
        return self._master_url or f"spark://{self.host}:{self.port}"

    def _reachable(self) -> bool:
        return self.port is not None and wait_for_port(LOOPBACK, self.port, timeout=0)

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
        roots: list[tuple[int, int | None]] = []
        if self._process is not None and self._process.alive():
            roots.append((self._process.pid, None))
        roots += [(w.pid, w.index) for w in self.workers if w.alive()]
        marker = str(self.work_dir) if self.managed and self.work_dir is not None else None
        return cluster_processes(roots, marker)

    def executor_pids(self, app_id: str | None = None) -> list[int]:
        """Return the pids of the live executor JVMs, in worker order (of ``app_id`` if given).

        ``app_id`` is ``spark.sparkContext.applicationId``; one pid per executor.
        """
        return [p.pid for p in self._of_role("executor", app_id)]

    def python_worker_pids(self, app_id: str | None = None) -> list[int]:
        """Return the pids of the executors' Python workers, not their daemons (of ``app_id``)."""
        return [p.pid for p in self._of_role("python-worker", app_id)]

    def _of_role(self, role: str, app_id: str | None) -> list[ClusterProcess]:
        return [
            p for p in self.processes() if p.role == role and (app_id is None or p.app_id == app_id)
        ]

    def worker_tree(self, index: int) -> list[ClusterProcess]:
        """Return worker ``index``'s daemon and every process below it, parents first."""
        return [p for p in self.processes() if p.worker == index]

    def worker_of_pid(self, pid: int) -> int | None:
        """Return the index of the worker whose tree holds process ``pid`` (``None`` if none)."""
        for process in self.processes():
            if process.pid == pid:
                return process.worker
        return None

    # ---------------------------------------------------------------- lifecycle

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
        return super().start()

    def _locate(self) -> None:
        if find_java() is None:
            raise DevInfraError(
                "Java was not found. Spark needs Java 17 or newer: run 'bash scripts/setup.sh'."
            )

    def _logs(self) -> list[Path]:
        workers = [self.log_dir / f"worker-{i}.log" for i in range(self.worker_count)]
        return [self.log_file, *workers]

    def _env(self) -> dict[str, str]:
        work_dir = self._require_work_dir()
        return daemon_env(work_dir, daemon_memory=self.daemon_memory, python=self.python)

    def _start_in(self, work_dir: Path) -> None:
        (work_dir / "local").mkdir(exist_ok=True)
        write_daemon_properties(work_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.port is None:
            self.port = free_ports(1)[0]
        self._rotate_logs()
        deadline = time.monotonic() + self.startup_timeout
        self._launch()  # the master, until it is elected
        self._master_url = master_url_in(self.log_file)
        self.port = port_of(self._master_url)
        self.workers = [
            launch_worker(
                index,
                self._master_url,
                cores=self.worker_cores,
                memory=self.worker_memory,
                cluster_dir=work_dir,
                log_dir=self.log_dir,
                spawn=self._spawn_daemon,
            )
            for index in range(self.worker_count)
        ]
        for worker in self.workers:
            worker.wait_registered(deadline)

    def _spawn_daemon(self, argv: list[str], log_file: Path, cwd: Path) -> ManagedProcess:
        return ManagedProcess.spawn(
            argv,
            marker=self._marker(),
            log_file=log_file,
            cwd=cwd,
            env=self._env(),
            detach=self.detach,
            death_signal=self.death_signal,
        )

    def _spawn(self) -> ManagedProcess:
        work_dir = self._require_work_dir()
        assert self.port is not None
        argv = master_argv(self.port, work_dir)
        return self._spawn_daemon(argv, self.log_file, work_dir)

    def _ready(self) -> bool:
        try:
            return MASTER_ALIVE in self.log_file.read_text(errors="replace")
        except OSError:
            return False

    def _is_port_race(self, log: str) -> bool:
        return False  # Spark moves on to the next port by itself

    def _startup_log(self) -> str:
        return tail(self.log_file, 40)

    def _abandon_start(self, created: bool) -> None:
        self._kill_everything()

    def _snapshot(self) -> list[ProcStat]:
        """Return every process of the cluster, children first, each named by its start time."""
        found = (read_stat(p.pid) for p in reversed(self.processes()))
        return [stat for stat in found if stat is not None]

    def _daemons(self) -> list[ManagedProcess]:
        workers = [w.process for w in self.workers if w.process is not None]
        return workers if self._process is None else [self._process, *workers]

    def _kill_everything(self) -> None:
        signal_each(self._snapshot(), signal.SIGKILL)
        for process in self._daemons():
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
        signal_each(snapshot, signal.SIGCONT)
        worker_processes = [w.process for w in self.workers if w.process is not None]
        for process in worker_processes:
            process.signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for process in worker_processes:
            process.wait(max(0.1, deadline - time.monotonic()))
        if self._process is not None:
            self._process.signal(signal.SIGTERM)
            self._process.wait(max(1.0, deadline - time.monotonic()))
        # Everything left (a daemon that ignored SIGTERM, orphaned executors or Python workers).
        leftovers = self._snapshot() + snapshot
        signal_each(leftovers, signal.SIGKILL)
        for remaining in self._daemons():
            if not remaining.wait(10.0):
                raise DevInfraError(f"process {remaining.pid} did not exit even after SIGKILL")
        wait_until(lambda: not any(process_alive(s.pid) for s in leftovers), timeout=10.0)
        if self._log_dir is not None:  # else the logs live in the work directory, which goes
            for worker in self.workers:
                worker.copy_executor_logs(self.log_dir / "executors")
        if remove_data and self._own_work_dir and self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __repr__(self) -> str:
        state = "running" if self.managed and self.is_running() else "stopped"
        if not self.managed:
            state = "external"
        url = self._master_url or "-"
        return f"SparkCluster(master_url={url!r}, workers={self.worker_count}, {state})"

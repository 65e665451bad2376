"""A local Spark Connect server, started from the installed PySpark.

The PySpark wheel ships the Connect server (``jars/spark-connect_*.jar``) from 4.0 on; for 3.5,
whose wheel has none, :func:`~twophase_dev._spark.spark_connect_jars` resolves the server jar of
the same version with Maven (cached). It is started with ``bin/spark-submit --class
org.apache.spark.sql.connect.service.SparkConnectServer`` on a free port of 127.0.0.1, in local
mode, with Spark's Kafka jars and this project's Python for its Python workers -- including the
``foreachBatch`` worker, which is where a twophase sink runs under Spark Connect. Clients
connect with :meth:`SparkConnectServer.session` (``sc://...``).

Every process of the server (the JVM and the Python workers it starts) carries the environment
variable :data:`CONNECT_ENV_MARKER`, so :meth:`SparkConnectServer.kill` -- a driver crash --
and :meth:`SparkConnectServer.stop` find all of them.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from twophase_dev._cluster import _all_pids, _environ_has, _kill_all, _stat, pyspark_home
from twophase_dev._common import (
    LOOPBACK,
    DevInfraError,
    ManagedProcess,
    ServiceContext,
    free_ports,
    make_work_dir,
    rotate_log,
    tail,
    wait_until,
    write_owner,
)
from twophase_dev._jvm import find_java, spark_jvm_options
from twophase_dev._spark import spark_connect_jars, spark_kafka_jars, spark_test_conf

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CONNECT_ENV_MARKER", "SparkConnectServer"]

#: Environment variable set on every process of a Connect server (value: its work directory).
CONNECT_ENV_MARKER = "TWOPHASE_DEV_SPARK_CONNECT"

_SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_STARTED = "Spark Connect server started at"


class SparkConnectServer(ServiceContext):
    """A Spark Connect server in local mode on ``127.0.0.1``.

    Parameters
    ----------
    master : str, optional
        The server's Spark master (``local[2,2]`` retries a failed task once).
    conf : mapping of str to str, optional
        Extra Spark settings of the server (on top of :func:`spark_test_conf`).
    kafka : bool, optional
        Put Spark's Kafka connector on the server's classpath.
    jars : sequence of pathlib.Path, optional
        More jars for the server's classpath (a Hadoop file system's connector).
    env : mapping of str to str, optional
        More environment variables of the server and its Python workers.
    python_path : sequence of str, optional
        Directories added to the Python workers' ``PYTHONPATH`` (test modules whose functions
        are pickled by reference).
    port : int, optional
        The gRPC port; a free one by default. A restarted server keeps its port.
    startup_timeout : float, optional
        Seconds to wait for the server.

    Examples
    --------
    >>> with SparkConnectServer() as server:  # doctest: +SKIP
    ...     spark = server.session()
    ...     spark.range(3).count()
    3
    """

    def __init__(
        self,
        *,
        master: str = "local[2]",
        conf: Mapping[str, str] | None = None,
        kafka: bool = True,
        jars: tuple[Path, ...] = (),
        env: Mapping[str, str] | None = None,
        python_path: tuple[str, ...] = (),
        port: int | None = None,
        startup_timeout: float = 120.0,
    ) -> None:
        self.master = master
        self.conf = dict(conf or {})
        self.kafka = kafka
        self.jars = jars
        self.env = dict(env or {})
        self.python_path = python_path
        self.port = port if port is not None else free_ports(1)[0]
        self.startup_timeout = startup_timeout
        self.work_dir: Path | None = None
        self._process: ManagedProcess | None = None
        #: Seconds the last :meth:`start` took.
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        """Return the ``sc://`` URL clients connect to."""
        return f"sc://{LOOPBACK}:{self.port}"

    @property
    def log_file(self) -> Path:
        """Return the server's log (stdout and stderr, Python workers included)."""
        assert self.work_dir is not None, "the server was never started"
        return self.work_dir / "connect-server.log"

    @property
    def pid(self) -> int | None:
        """Return the JVM's pid while it runs."""
        return self._process.pid if self._process is not None and self._process.alive() else None

    def _env(self) -> dict[str, str]:
        assert self.work_dir is not None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        paths = [*self.python_path, env.get("PYTHONPATH", "")]
        env.update(
            {
                "SPARK_HOME": str(pyspark_home()),
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_LOCAL_DIRS": str(self.work_dir / "local"),
                "PYSPARK_PYTHON": sys.executable,
                "PYTHONPATH": os.pathsep.join(p for p in paths if p),
                CONNECT_ENV_MARKER: str(self.work_dir),
                **self.env,
            }
        )
        return env

    def _argv(self) -> list[str]:
        conf = spark_test_conf(kafka=False)
        conf.update(
            {
                "spark.connect.grpc.binding.address": LOOPBACK,
                "spark.connect.grpc.binding.port": str(self.port),
                "spark.driver.extraJavaOptions": (
                    f"-Dtwophase.dev.workdir={self.work_dir} {spark_jvm_options()}"
                ),
            }
        )
        conf.update(self.conf)
        argv = [str(pyspark_home() / "bin" / "spark-submit"), "--master", self.master]
        jars = [*spark_connect_jars(), *(spark_kafka_jars() if self.kafka else []), *self.jars]
        if jars:
            argv += ["--jars", ",".join(str(j) for j in jars)]
        for key, value in conf.items():
            argv += ["--conf", f"{key}={value}"]
        return [*argv, "--class", _SERVER_CLASS, "--name", "twophase-connect", "spark-internal"]

    def start(self) -> SparkConnectServer:
        """Start the server and wait until it accepts sessions.

        Returns
        -------
        SparkConnectServer
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If Java is missing or the server does not come up; the message ends with its log.
        """
        if self.pid is not None:
            return self
        if find_java() is None:
            raise DevInfraError("Java was not found: run 'bash scripts/setup.sh'")
        started = time.monotonic()
        if self.work_dir is None:
            self.work_dir = make_work_dir("spark-connect")
        (self.work_dir / "local").mkdir(exist_ok=True)
        rotate_log(self.log_file)
        process = ManagedProcess.spawn(
            self._argv(),
            marker=str(self.work_dir),
            log_file=self.log_file,
            cwd=self.work_dir,
            env=self._env(),
        )
        self._process = process
        write_owner(self.work_dir, process.pid)

        def ready() -> bool:
            try:
                return _STARTED in self.log_file.read_text(errors="replace")
            except OSError:
                return False

        def died() -> None:
            if not process.alive():
                raise DevInfraError(
                    f"the Spark Connect server exited during startup "
                    f"(exit {process.returncode()}):\n{tail(self.log_file, 40)}"
                )

        if not wait_until(ready, timeout=self.startup_timeout, abort=died):
            self.kill()
            raise DevInfraError(
                f"the Spark Connect server did not start within {self.startup_timeout:.0f} s:\n"
                f"{tail(self.log_file, 40)}"
            )
        self.startup_seconds = time.monotonic() - started
        return self

    def _processes(self) -> list[tuple[int, int]]:
        """Return ``(pid, start_time)`` of every process of this server, children last."""
        assert self.work_dir is not None
        entry = f"{CONNECT_ENV_MARKER}={self.work_dir}".encode()
        found = []
        for pid in _all_pids():
            if pid != os.getpid() and _environ_has(pid, entry):
                stat = _stat(pid)
                if stat is not None:
                    found.append((pid, stat[2]))
        return found

    def python_worker_pids(self) -> list[int]:
        """Return the pids of the server's Python processes (``foreachBatch`` worker included)."""
        jvm = self.pid
        return [pid for pid, _ in self._processes() if pid != jvm]

    def kill(self) -> None:
        """Crash the server: ``SIGKILL`` the JVM and every Python process it started."""
        if self.work_dir is None:
            return
        _kill_all(self._processes(), signal.SIGKILL)
        if self._process is not None:
            self._process.wait(10.0)
        wait_until(lambda: not self._processes(), timeout=10.0)

    def restart(self) -> SparkConnectServer:
        """Start the server again (same port and work directory) after :meth:`kill`."""
        self.kill()
        return self.start()

    def stop(self) -> None:
        """Stop the server (``SIGTERM``, then ``SIGKILL``) and remove its work directory."""
        if self._process is not None:
            with contextlib.suppress(DevInfraError):
                self._process.stop([(signal.SIGTERM, 15.0)])
        self.kill()
        if self.work_dir is not None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            self.work_dir = None

    def session(self) -> SparkSession:
        """Return a new Spark Connect session on this server.

        Returns
        -------
        pyspark.sql.SparkSession
            A Connect session (``pyspark.sql.connect``); stop it with ``spark.stop()``.
        """
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(self.url).create()

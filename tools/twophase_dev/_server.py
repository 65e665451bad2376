"""A server process on this machine started and watched by the dev tools, written once.

:class:`ManagedService` holds what every managed server needs: its throwaway work directory and
owner file, its logs and their rotation, starting it and waiting until it is ready or died (and
cleaning up after a failed start), the handles of servers it did not start (``external``), and the
records ``twophase-dev`` keeps to find a running server again. The database servers
(:mod:`twophase_dev._database`), the Kafka broker, the storage emulators, the Spark cluster and the
Spark Connect server build on it and say only what is their own.

Runs on: the developer's or test session's machine, never on Spark executors.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from twophase_dev._errors import DevInfraError, PortRaceError
from twophase_dev._host._files import rotate_log, tail
from twophase_dev._host._ports import LOOPBACK, port_is_free
from twophase_dev._host._process import ManagedProcess
from twophase_dev._host._wait import wait_until
from twophase_dev._host._workdirs import make_work_dir, write_owner

if TYPE_CHECKING:
    from twophase_dev._netns._namespace import NetworkNamespace

__all__ = ["ManagedService", "ServiceContext"]

_C = TypeVar("_C", bound="ServiceContext")
_M = TypeVar("_M", bound="ManagedService")


class ServiceContext:
    """``with handle:`` starts a service and stops it (removing its data) on the way out."""

    def start(self) -> object:
        """Start the service (see the subclass)."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop the service (see the subclass)."""
        raise NotImplementedError

    def __enter__(self: _C) -> _C:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class ManagedService(ServiceContext):
    """A server process on 127.0.0.1 started and watched by this package (or an external one).

    Parameters
    ----------
    port : int, optional
        TCP port; a free one is picked if omitted.
    work_dir : pathlib.Path, optional
        The server's directory; a throwaway ``twophase-dev-<kind>-*`` directory in the system
        temporary directory by default (removed by ``stop``).
    log_dir : pathlib.Path, optional
        Where the logs go; kept after ``stop``. Defaults to ``<work_dir>/logs``.
    detach : bool, optional
        ``True`` for a server that outlives this Python process; ``False`` makes the kernel stop it
        if this process dies first.
    startup_timeout : float, optional
        Seconds to wait for the server to be ready.
    netns : NetworkNamespace, optional
        Run the server inside this (created) network namespace, listening on its
        :attr:`~twophase_dev.NetworkNamespace.address` instead of 127.0.0.1, so that a test can
        cut it off (:meth:`~twophase_dev.NetworkNamespace.cut`). Such a server has no record.
    """

    #: ``kind`` of the records and of the work directory's name (``postgres``, ``kafka``, ...).
    kind: ClassVar[str]
    #: The product's name in messages (``PostgreSQL``, ``MariaDB``, ``Kafka``).
    product: ClassVar[str]
    #: What the product calls one running instance, in messages (``server``, ``broker``).
    noun: ClassVar[str] = "server"
    #: The environment variable that points at an external server of this kind.
    address_env: ClassVar[str]
    #: The server log's file name in :attr:`log_dir`.
    log_name: ClassVar[str]
    #: Signals (and seconds to wait after each) that stop a server which must go at once; after
    #: them ``SIGKILL``.
    crash_signals: ClassVar[tuple[tuple[int, float], ...]] = ()
    #: Signal the kernel sends the server when this process dies (unless ``detach``).
    death_signal: ClassVar[str] = "TERM"
    #: Seconds between two readiness checks while it starts.
    ready_interval: ClassVar[float] = 0.1
    #: The end of the log shown when it does not become ready, in lines.
    log_lines: ClassVar[int] = 30
    #: What it failed to do in time, for the message (``did not accept connections``).
    not_ready: ClassVar[str] = "did not accept connections"

    def __init__(
        self,
        *,
        port: int | None,
        work_dir: Path | None,
        log_dir: Path | None,
        detach: bool,
        startup_timeout: float,
        netns: NetworkNamespace | None = None,
    ):
        #: The network namespace the server runs in, ``None`` for this process's.
        self.netns = netns
        self.host = LOOPBACK if netns is None else netns.address
        self.port = port
        self._fixed_port = port is not None
        self._own_work_dir = work_dir is None
        self.work_dir = work_dir
        self._log_dir = log_dir
        self.detach = detach
        self.startup_timeout = startup_timeout
        self._process: ManagedProcess | None = None
        #: ``False`` for a server this package did not start (see ``external``).
        self.managed = True
        #: Seconds the last :meth:`start` took.
        self.startup_seconds: float | None = None

    # ---------------------------------------------------------------- what a subclass says

    def _address(self) -> str:
        """Return where clients find it, for messages."""
        return f"{self.host}:{self.port}"

    def _reachable(self) -> bool:
        """Tell whether an external server answers."""
        raise NotImplementedError

    def _locate(self) -> None:
        """Find the binaries (and the OS user) before anything is created; raise if missing."""
        raise NotImplementedError

    def _start_in(self, work_dir: Path) -> None:
        """Prepare ``work_dir``, choose the ports and :meth:`_launch` the server."""
        raise NotImplementedError

    def _forget_data(self) -> None:
        """Note that the data directory is gone (the next start makes it again)."""

    def _spawn(self) -> ManagedProcess:
        """Start the server process (its output appended to a log)."""
        raise NotImplementedError

    def _ready(self) -> bool:
        """Tell whether the starting server is ready for clients."""
        raise NotImplementedError

    def _is_port_race(self, log: str) -> bool:
        """Tell whether the end of the log says a port was taken."""
        raise NotImplementedError

    def _startup_log(self) -> str:
        """Return the end of the logs, shown when the server died while starting."""
        return tail(self.log_file, 30)

    def _logs(self) -> list[Path]:
        """Return the logs that :meth:`_rotate_logs` moves aside (the server log by default)."""
        return [self.log_file]

    def _abandon_start(self, created: bool) -> None:
        """Clean up after a start that failed (``created``: its work directory is new).

        By default the server process is stopped if this start made its work directory; the
        directory itself is removed by :meth:`start`.
        """
        if created and self._process is not None and self._process.alive():
            self._process.stop(self.crash_signals)

    # ---------------------------------------------------------------- network namespace

    def _namespace_prefix(self) -> list[str] | None:
        """Return the prefix that runs the server in :attr:`netns`, ``None`` without one."""
        return None if self.netns is None else self.netns.exec_prefix()

    def _port_free(self, port: int) -> bool:
        """Tell whether ``port`` can be listened on where the server runs (its namespace)."""
        if self.netns is None:
            return port_is_free(port)
        return self.netns.port_is_free(port)

    # ---------------------------------------------------------------- records

    def _marker(self) -> str:
        """Return what the server's command line names, by which its pid is trusted."""
        return str(self._require_work_dir())

    def _adopt(self, record: Mapping[str, Any]) -> None:
        """Take over the running server that ``record`` (see ``to_record``) describes."""
        self._own_work_dir = bool(record.get("own_work_dir", True))
        self._process = ManagedProcess(int(record["pid"]), self._marker())

    def _service_record(
        self, address: Mapping[str, Any], options: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Return this running server's record (see ``to_record``).

        Parameters
        ----------
        address : mapping
            Where clients find it, after ``kind``, ``pid`` and ``port``.
        options : mapping
            How it was made, after the work directory and logs.

        Returns
        -------
        dict
            The record.
        """
        if self._process is None or self.work_dir is None:
            raise DevInfraError(f"the {self.noun} has not been started")
        if self.netns is not None:
            raise DevInfraError(
                f"a {self.product} {self.noun} in network namespace {self.netns.name} has no "
                "record: it lives only as long as the test session that made the namespace"
            )
        return {
            "kind": self.kind,
            "pid": self._process.pid,
            "port": self.port,
            **address,
            "work_dir": str(self.work_dir),
            "own_work_dir": self._own_work_dir,
            "log_dir": str(self.log_dir),
            "log_file": str(self.log_file),
            **options,
        }

    # ---------------------------------------------------------------- paths and state

    def _rotate_logs(self) -> None:
        """Move each of :meth:`_logs` to ``<name>.1``, so that a new run starts with empty logs."""
        for log in self._logs():
            rotate_log(log)

    def _require_work_dir(self) -> Path:
        if self.work_dir is None:
            raise DevInfraError(f"the {self.noun} has no work directory yet: call start() first")
        return self.work_dir

    @property
    def log_dir(self) -> Path:
        """Directory holding the server's logs."""
        if self._log_dir is not None:
            return self._log_dir
        return self._require_work_dir() / "logs"

    @property
    def log_file(self) -> Path:
        """The server log."""
        return self.log_dir / self.log_name

    @property
    def pid(self) -> int | None:
        """Process id of the server, ``None`` when not started."""
        return None if self._process is None else self._process.pid

    def is_running(self) -> bool:
        """Tell whether the server process is alive.

        Returns
        -------
        bool
            ``True`` while the server process started by this handle runs; for an ``external``
            server, whether it answers.
        """
        if not self.managed:
            return self._reachable()
        return self._process is not None and self._process.alive()

    # ---------------------------------------------------------------- lifecycle

    def _require_managed(self, action: str) -> None:
        if not self.managed:
            raise DevInfraError(
                f"cannot {action} the {self.product} {self.noun} at {self._address()}: it was not "
                f"started by twophase_dev in this environment ({self.address_env} points at it)"
            )

    def start(self: _M) -> _M:
        """Make the data directory on the first call, start the server, wait until it is ready.

        Returns
        -------
        ManagedService
            ``self``, for chaining.

        Raises
        ------
        DevInfraError
            If the server is not installed, the port is taken (when given explicitly), or the server
            does not start in time; the message includes the end of its log.
        """
        self._require_managed("start")
        if self.is_running():
            return self
        if self.netns is not None and not self.netns.created:
            raise DevInfraError(
                f"network namespace {self.netns.name} of the {self.product} {self.noun} is gone"
            )
        started = time.monotonic()
        self._locate()
        created = self.work_dir is None
        if self.work_dir is None:
            self.work_dir = make_work_dir(self.kind)
        try:
            self._start_in(self.work_dir)
        except BaseException:
            self._abandon_start(created)
            if created:
                shutil.rmtree(self.work_dir, ignore_errors=True)
                self.work_dir = None
                self._forget_data()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _launch(self) -> None:
        work_dir = self._require_work_dir()
        self._process = process = self._spawn()
        write_owner(work_dir, process.pid)

        def died() -> None:
            if process.alive():
                return
            log = self._startup_log()
            if self._is_port_race(log) and not self._fixed_port:
                raise PortRaceError()
            raise DevInfraError(
                f"{self.product} exited during startup (exit {process.returncode()}). "
                f"Log {self.log_file}:\n{log}"
            )

        if not wait_until(
            self._ready, timeout=self.startup_timeout, interval=self.ready_interval, abort=died
        ):
            process.stop(self.crash_signals)
            raise DevInfraError(
                f"{self.product} {self.not_ready} within {self.startup_timeout:.0f} s. "
                f"Log {self.log_file}:\n{tail(self.log_file, self.log_lines)}"
            )

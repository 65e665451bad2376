"""Shared helpers of the local infrastructure: paths, ports, processes, errors.

Everything here runs in the developer's or the test session's Python process; nothing is shipped to
Spark executors.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any, TypeVar

__all__ = [
    "LOOPBACK",
    "DevInfraError",
    "ManagedProcess",
    "PortRaceError",
    "ServiceContext",
    "cache_root",
    "clean_stale_work_dirs",
    "free_ports",
    "make_work_dir",
    "port_is_free",
    "run_logged",
    "tail",
    "work_dir_in_use",
]

#: The only address the local services listen on.
LOOPBACK = "127.0.0.1"

#: File in each throwaway work directory that names the processes that own it.
_OWNER_FILE = "owner.json"
#: Prefix of every throwaway work directory, so that stale ones can be found again.
_WORK_DIR_PREFIX = "twophase-dev-"

_C = TypeVar("_C", bound="ServiceContext")


class DevInfraError(RuntimeError):
    """A local service could not be prepared, started, reached or stopped.

    The message says what failed, where the log is and, when known, how to fix it.
    """


class PortRaceError(Exception):
    """A picked port was taken by someone else between picking and binding (the caller retries)."""


def cache_root() -> Path:
    """Return the cache directory of twophase's local infrastructure.

    Returns
    -------
    pathlib.Path
        ``$TWOPHASE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/twophase`` or ``~/.cache/twophase``.
        It is not created here.
    """
    explicit = os.environ.get("TWOPHASE_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "twophase"


def port_is_free(port: int, host: str = LOOPBACK) -> bool:
    """Tell whether a TCP port can be bound on ``host`` right now.

    Parameters
    ----------
    port : int
        The port to probe.
    host : str, optional
        The address to probe, loopback by default.

    Returns
    -------
    bool
        ``True`` if a listening socket could be bound (and was closed again at once).
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_ports(count: int, host: str = LOOPBACK) -> list[int]:
    """Pick ``count`` distinct TCP ports that are free on ``host`` at the time of the call.

    The sockets are all held open until every port is chosen, so the ports differ; another process
    may still take one before the caller binds it, which the services detect and retry.

    Parameters
    ----------
    count : int
        How many ports to pick (at least 1).
    host : str, optional
        The address to bind, loopback by default.

    Returns
    -------
    list of int
        The ports, in the order they were handed out by the kernel.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind((host, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def wait_for_port(host: str, port: int, timeout: float) -> bool:
    """Wait until something accepts TCP connections on ``host:port``.

    Parameters
    ----------
    host : str
        Address to connect to.
    port : int
        Port to connect to.
    timeout : float
        Seconds to wait at most.

    Returns
    -------
    bool
        ``True`` once a connection succeeded, ``False`` if ``timeout`` ran out first.
    """
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=1.0):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def tail(path: Path, lines: int = 30) -> str:
    """Return the last ``lines`` lines of a text file, or a note if it cannot be read.

    Parameters
    ----------
    path : pathlib.Path
        The file (typically a service log).
    lines : int, optional
        How many lines to return.

    Returns
    -------
    str
        The lines joined by newlines.
    """
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read().decode("utf-8", errors="replace")
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(data.splitlines()[-lines:])


def rotate_log(path: Path) -> None:
    """Move an existing log ``path`` to ``path.1`` so that a new run starts with an empty file.

    Parameters
    ----------
    path : pathlib.Path
        The log file; nothing happens if it does not exist.
    """
    if path.exists():
        path.replace(path.with_name(path.name + ".1"))


# --------------------------------------------------------------------------------------------
# Processes
# --------------------------------------------------------------------------------------------


def process_alive(pid: int) -> bool:
    """Tell whether process ``pid`` exists and is not a zombie.

    Parameters
    ----------
    pid : int
        The process id.

    Returns
    -------
    bool
        ``False`` for a missing process and for one that exited but was not reaped yet.
    """
    if pid <= 0:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    # The state follows the command name, which is in parentheses and may contain spaces.
    state = stat.rsplit(")", 1)[-1].split()[0]
    return state not in ("Z", "X")


def process_cmdline(pid: int) -> list[str]:
    """Return the command line of process ``pid`` (empty if it is gone or unreadable).

    Parameters
    ----------
    pid : int
        The process id.

    Returns
    -------
    list of str
        The arguments, ``argv[0]`` first.
    """
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def process_mentions(pid: int, needle: str) -> bool:
    """Tell whether process ``pid`` is alive and ``needle`` occurs in its command line.

    This guards against pid reuse: a recorded pid is only trusted (and only ever signalled) if the
    process still refers to the service's own work directory.

    Parameters
    ----------
    pid : int
        The process id.
    needle : str
        Text expected in one of the arguments, e.g. the service's work directory.

    Returns
    -------
    bool
        ``True`` if the process is alive and mentions ``needle``.
    """
    if not process_alive(pid):
        return False
    return any(needle in arg for arg in process_cmdline(pid))


def _pdeathsig_prefix(signame: str) -> list[str]:
    """Return a command prefix that makes the child receive ``signame`` when its parent dies."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return []
    return [setpriv, f"--pdeathsig={signame}", "--"]


def _setpriv_prefix(user: str | None, signame: str, detach: bool) -> list[str]:
    """Return a prefix that switches to ``user`` and then sets the parent-death signal.

    The order matters: a change of user id clears the parent-death signal.
    """
    if user is None:
        return [] if detach else _pdeathsig_prefix(signame)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise DevInfraError(
            f"running a server as {user!r} inside a network namespace needs 'setpriv' "
            "(util-linux), which was not found"
        )
    entry = pwd.getpwnam(user)
    death = [] if detach else [f"--pdeathsig={signame}"]
    return [
        setpriv,
        f"--reuid={entry.pw_uid}",
        f"--regid={entry.pw_gid}",
        "--clear-groups",
        *death,
        "--",
    ]


class ManagedProcess:
    """One server process started (or adopted) by this package.

    Parameters
    ----------
    pid : int
        The process id.
    marker : str
        Text that must appear in the process's command line (its work directory); the process is
        only considered running, and only signalled, while that holds.
    popen : subprocess.Popen or None
        The handle if this Python process started it (then it is reaped properly), else ``None``.
    """

    def __init__(self, pid: int, marker: str, popen: subprocess.Popen[bytes] | None = None):
        self.pid = pid
        self.marker = marker
        self._popen = popen

    @classmethod
    def spawn(
        cls,
        argv: Sequence[str],
        *,
        marker: str,
        log_file: Path,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        user: str | None = None,
        detach: bool = False,
        death_signal: str = "TERM",
        namespace_prefix: Sequence[str] | None = None,
    ) -> ManagedProcess:
        """Start a server process with its output appended to ``log_file``.

        Parameters
        ----------
        argv : sequence of str
            The command.
        marker : str
            See the class parameters.
        log_file : pathlib.Path
            Receives the process's stdout and stderr (opened by this process, so it may live in a
            directory the ``user`` cannot write).
        cwd : pathlib.Path
            Working directory; must be accessible to ``user``.
        env : mapping, optional
            Environment; the current one if ``None``.
        user : str, optional
            Run as this OS user (requires root), e.g. ``postgres``.
        detach : bool, optional
            ``True`` to let the process outlive this Python process (``twophase-dev up``): it gets
            its own session. ``False`` (tests) to have the kernel send it ``death_signal`` if this
            process dies without stopping it, so that no server is left behind.
        death_signal : str, optional
            Signal name for the previous point, e.g. ``TERM`` or ``QUIT``.
        namespace_prefix : sequence of str, optional
            Run the command inside a network namespace with this prefix (``ip netns exec NAME``,
            see :meth:`~twophase_dev.NetworkNamespace.exec_prefix`). ``ip`` and ``setpriv``
            ``exec`` the command, so the pid is still the server's. Joining a namespace needs
            root, so ``user`` is then switched to by ``setpriv`` inside it (which must be
            installed), which also sets the parent-death signal after the switch.

        Returns
        -------
        ManagedProcess
            The started process (it may still fail during startup; the caller checks readiness).
        """
        if namespace_prefix is not None:
            command = [*namespace_prefix, *_setpriv_prefix(user, death_signal, detach), *argv]
            user = None
        else:
            command = list(argv) if detach else [*_pdeathsig_prefix(death_signal), *argv]
        log_file.parent.mkdir(parents=True, exist_ok=True)
        with log_file.open("ab") as out:
            popen = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                user=user,
                group=user_group(user) if user else None,
                extra_groups=[] if user else None,
                start_new_session=detach,
            )
        return cls(popen.pid, marker, popen)

    def alive(self) -> bool:
        """Tell whether the process still runs (and is still the same process).

        Returns
        -------
        bool
            ``True`` while it runs.
        """
        if self._popen is not None:
            return self._popen.poll() is None
        return process_mentions(self.pid, self.marker)

    def returncode(self) -> int | None:
        """Return the exit status if this process started it and it has exited, else ``None``.

        Returns
        -------
        int or None
            The exit status.
        """
        return None if self._popen is None else self._popen.poll()

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the process if it is still ours and alive.

        Parameters
        ----------
        sig : int
            The signal number.
        """
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> bool:
        """Wait for the process to exit.

        Parameters
        ----------
        timeout : float
            Seconds to wait at most.

        Returns
        -------
        bool
            ``True`` if it has exited.
        """
        if self._popen is not None:
            try:
                self._popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return False
            return True
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)
        return True

    def stop(self, signals: Sequence[tuple[int, float]]) -> None:
        """Stop the process by escalating through ``signals``, then ``SIGKILL``.

        Parameters
        ----------
        signals : sequence of (int, float)
            Each signal with the seconds to wait for an exit after sending it.

        Raises
        ------
        DevInfraError
            If the process survives even ``SIGKILL``.
        """
        for sig, grace in [*signals, (signal.SIGKILL, 10.0)]:
            if not self.alive():
                break
            self.signal(sig)
            if self.wait(grace):
                break
        if self.alive():
            raise DevInfraError(f"process {self.pid} did not exit even after SIGKILL")


def user_group(user: str) -> int:
    """Return the primary group id of OS user ``user``.

    Parameters
    ----------
    user : str
        The user name.

    Returns
    -------
    int
        Its primary gid.
    """
    return pwd.getpwnam(user).pw_gid


# --------------------------------------------------------------------------------------------
# Throwaway work directories
# --------------------------------------------------------------------------------------------


def make_work_dir(kind: str, parent: Path | None = None) -> Path:
    """Create a fresh throwaway work directory for one service instance.

    The directory is named ``twophase-dev-<kind>-*`` and holds an owner file naming this process,
    so that :func:`clean_stale_work_dirs` can remove it if this process dies without cleaning up.

    Parameters
    ----------
    kind : str
        ``kafka`` or ``postgres``.
    parent : pathlib.Path, optional
        Where to create it; the system temporary directory by default.

    Returns
    -------
    pathlib.Path
        The new directory.
    """
    base = parent if parent is not None else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{_WORK_DIR_PREFIX}{kind}-", dir=base))
    write_owner(work, service_pid=None)
    return work


def write_owner(work_dir: Path, service_pid: int | None) -> None:
    """Record which processes own ``work_dir`` (this one, and the service once it runs).

    Parameters
    ----------
    work_dir : pathlib.Path
        A directory made by :func:`make_work_dir`.
    service_pid : int or None
        The server's pid once started.
    """
    data = {"creator_pid": os.getpid(), "service_pid": service_pid}
    tmp = work_dir / (_OWNER_FILE + ".tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(work_dir / _OWNER_FILE)


def owner_service_pid(work_dir: Path) -> int | None:
    """Return the live server pid that the owner file of ``work_dir`` names, if any.

    A server restarted by a handle other than the one ``twophase-dev up`` recorded (a chaos test
    that attached to it) has a new pid; its owner file names it.

    Parameters
    ----------
    work_dir : pathlib.Path
        A directory made by :func:`make_work_dir`.

    Returns
    -------
    int or None
        The pid, if that process is alive and mentions ``work_dir`` in its command line.
    """
    data = _read_owner(work_dir)
    pid = None if data is None else data.get("service_pid")
    if isinstance(pid, int) and process_mentions(pid, str(work_dir)):
        return pid
    return None


def _read_owner(work_dir: Path) -> dict[str, Any] | None:
    """Return what the owner file of ``work_dir`` says, ``None`` if it is missing or unreadable."""
    try:
        data = json.loads((work_dir / _OWNER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def work_dir_in_use(work_dir: Path) -> bool:
    """Tell whether a live process owns ``work_dir`` (its creator, or the server it names).

    Parameters
    ----------
    work_dir : pathlib.Path
        A directory made by :func:`make_work_dir`.

    Returns
    -------
    bool
        ``True`` if it must not be deleted (also for a directory younger than a minute without an
        owner file, which may be being created).
    """
    data = _read_owner(work_dir)
    if data is None:
        # No readable owner file: either being created right now or not ours to judge. Only dirs
        # older than a minute without one are considered abandoned.
        try:
            return time.time() - work_dir.stat().st_mtime < 60
        except OSError:
            return False
    creator = data.get("creator_pid")
    service = data.get("service_pid")
    if isinstance(service, int) and process_mentions(service, str(work_dir)):
        return True
    return isinstance(creator, int) and process_alive(creator)


def clean_stale_work_dirs(parent: Path | None = None) -> list[Path]:
    """Remove throwaway work directories whose owners are all gone.

    A directory is stale when neither the process that created it nor the server that used it is
    alive (e.g. a test session killed with ``SIGKILL``).

    Parameters
    ----------
    parent : pathlib.Path, optional
        Where to look; the system temporary directory by default.

    Returns
    -------
    list of pathlib.Path
        The directories removed.
    """
    base = parent if parent is not None else Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        candidates = sorted(base.glob(f"{_WORK_DIR_PREFIX}*"))
    except OSError:
        return removed
    for work_dir in candidates:
        if not work_dir.is_dir() or work_dir_in_use(work_dir):
            continue
        shutil.rmtree(work_dir, ignore_errors=True)
        if not work_dir.exists():
            removed.append(work_dir)
    return removed


def wait_until(
    condition: Callable[[], bool],
    *,
    timeout: float,
    interval: float = 0.2,
    abort: Callable[[], None] | None = None,
) -> bool:
    """Poll ``condition`` until it holds or ``timeout`` seconds have passed.

    Parameters
    ----------
    condition : callable
        Returns ``True`` when done.
    timeout : float
        Seconds to wait at most.
    interval : float, optional
        Seconds between polls.
    abort : callable, optional
        Called before each poll; raises to give up early (e.g. the server process died).

    Returns
    -------
    bool
        Whether ``condition`` held in time.
    """
    deadline = time.monotonic() + timeout
    while True:
        if abort is not None:
            abort()
        if condition():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[IO[str]]:
    """Hold an exclusive advisory lock on ``path`` (created if needed) for the ``with`` block.

    Parameters
    ----------
    path : pathlib.Path
        The lock file.

    Yields
    ------
    typing.IO
        The open lock file.
    """
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield fh
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def run_logged(argv: Sequence[str], *, what: str, cwd: Path, log_file: Path, **kwargs: Any) -> None:
    """Run a setup command to its end, its output written to ``log_file``; raise if it fails.

    Parameters
    ----------
    argv : sequence of str
        The command.
    what : str
        What it does, for the error message (e.g. ``"initdb"``).
    cwd : pathlib.Path
        Its working directory.
    log_file : pathlib.Path
        Receives its standard output and standard error (replaced).
    **kwargs
        Passed on to :func:`subprocess.run` (e.g. ``user``).

    Raises
    ------
    DevInfraError
        If it exits with another status than 0; the message ends with its output's last 2000
        characters.
    """
    result = subprocess.run(
        list(argv),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        **kwargs,
    )
    log_file.write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise DevInfraError(
            f"{what} failed (exit {result.returncode}):\n"
            f"{(result.stdout + result.stderr).strip()[-2000:]}"
        )


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

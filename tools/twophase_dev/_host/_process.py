"""One server process started (or adopted) by the dev tools, and running a setup command to its end.

A process is started with its output in a log, optionally as another OS user or inside a network
namespace, and with a parent-death signal unless it is detached; a recorded pid is only trusted
and signalled while its command line still names the service's work directory.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from twophase_dev._errors import DevInfraError
from twophase_dev._host._proc import process_mentions

__all__ = ["ManagedProcess", "run_logged", "user_group"]


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

"""Files of the dev tools that are not a service's data: the cache, logs and lock files.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = ["cache_root", "file_lock", "rotate_log", "tail"]


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

"""Where PostgreSQL's server binaries are, and which OS user runs them (not root).

The binaries are those of Debian's ``postgresql`` package (``/usr/lib/postgresql/<major>/bin``)
unless ``$TWOPHASE_PG_BIN`` names others. PostgreSQL refuses to run as root, so when this process
is root the server runs as the ``postgres`` OS user (``$TWOPHASE_PG_OS_USER``), which must be able
to reach its work directory.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import os
import pwd
import shutil
from pathlib import Path

from twophase_dev._errors import DevInfraError

__all__ = ["check_reachable", "find_postgres_bin_dir", "run_user"]


def find_postgres_bin_dir() -> Path:
    """Locate the directory holding ``initdb`` and ``postgres``.

    Returns
    -------
    pathlib.Path
        ``$TWOPHASE_PG_BIN`` if set; else the newest ``/usr/lib/postgresql/<major>/bin``; else the
        directory of an ``initdb`` found on ``PATH``.

    Raises
    ------
    DevInfraError
        If no PostgreSQL server installation is found.
    """
    explicit = os.environ.get("TWOPHASE_PG_BIN")
    if explicit:
        path = Path(explicit)
        if not (path / "initdb").is_file():
            raise DevInfraError(f"TWOPHASE_PG_BIN={explicit} has no initdb")
        return path
    candidates = []
    for initdb in Path("/usr/lib/postgresql").glob("*/bin/initdb"):
        major = initdb.parent.parent.name
        if major.isdigit():
            candidates.append((int(major), initdb.parent))
    if candidates:
        return max(candidates)[1]
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).resolve().parent
    raise DevInfraError(
        "PostgreSQL server binaries (initdb, postgres) were not found. Install them with "
        "'bash scripts/setup.sh' (or 'apt-get install -y postgresql'), or set TWOPHASE_PG_BIN."
    )


def run_user() -> str | None:
    """Return the OS user the server must run as, ``None`` to run as this process's user."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("TWOPHASE_PG_OS_USER", "postgres")
    try:
        pwd.getpwnam(name)
    except KeyError:
        raise DevInfraError(
            f"running as root, PostgreSQL must run as an unprivileged OS user, but user {name!r} "
            "does not exist. Install the 'postgresql' package (it creates it) or set "
            "TWOPHASE_PG_OS_USER."
        ) from None
    return name


def check_reachable(path: Path, user: str) -> None:
    """Fail clearly if ``user`` cannot traverse every parent directory of ``path``."""
    entry = pwd.getpwnam(user)
    for parent in [*reversed(path.parents)]:
        st = parent.stat()
        if st.st_uid == entry.pw_uid:
            continue
        if st.st_mode & 0o001 or (st.st_gid == entry.pw_gid and st.st_mode & 0o010):
            continue
        raise DevInfraError(
            f"PostgreSQL runs as OS user {user!r}, which cannot enter {parent} (mode "
            f"{oct(st.st_mode & 0o777)}); put the work directory elsewhere (the default, in the "
            "system temporary directory, works)"
        )

"""Where MariaDB's server binaries are: ``mariadbd`` and ``mariadb-install-db``.

They come from Debian's ``mariadb-server-core`` package (``/usr/sbin``, ``PATH``) unless
``$TWOPHASE_MARIADB_BIN`` names a directory holding both.

Runs on: the developer's or test session's machine.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from twophase_dev._errors import DevInfraError

__all__ = ["find_mariadb_binaries"]


def find_mariadb_binaries() -> tuple[Path, Path]:
    """Locate ``mariadbd`` and ``mariadb-install-db``.

    Returns
    -------
    tuple of pathlib.Path
        ``(mariadbd, mariadb-install-db)``, from ``$TWOPHASE_MARIADB_BIN`` (a directory holding
        both) if set, else from ``/usr/sbin`` and ``PATH``.

    Raises
    ------
    DevInfraError
        If either is missing.
    """
    explicit = os.environ.get("TWOPHASE_MARIADB_BIN")
    if explicit:
        server, install = Path(explicit) / "mariadbd", Path(explicit) / "mariadb-install-db"
        if not (server.is_file() and install.is_file()):
            raise DevInfraError(
                f"TWOPHASE_MARIADB_BIN={explicit} lacks mariadbd or mariadb-install-db"
            )
        return server, install
    search = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/usr/bin"])
    server_path = shutil.which("mariadbd", path=search)
    install_path = shutil.which("mariadb-install-db", path=search)
    if server_path is None or install_path is None:
        raise DevInfraError(
            "MariaDB server binaries (mariadbd, mariadb-install-db) were not found. Install them "
            "with 'bash scripts/setup.sh' (or 'apt-get install -y mariadb-server-core "
            "mariadb-client-core'), or set TWOPHASE_MARIADB_BIN."
        )
    return Path(server_path), Path(install_path)

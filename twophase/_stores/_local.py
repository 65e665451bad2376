"""The coordinator log on a local directory: plain files, fsync, atomic rename and hard links.

A record is written to a temporary file, flushed, and then renamed over its
name (overwrite) or hard-linked to it (create-if-absent: ``link()`` fails if
the name exists, atomically). A file system without ``link()`` is refused by
path before the first record, since a FUSE mount of cloud storage often lacks it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile

from ..errors import ConfigurationError

__all__ = ["LocalFileStore"]


class LocalFileStore:
    """A :class:`LogStore` on a local directory, with fsync and atomic rename.

    Parameters
    ----------
    root
        Directory of the log (created when missing).
    fsync
        Flush every record and its directory to disk (on by default; tests may
        turn it off for speed).
    """

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = os.fspath(root)
        self.fsync = fsync
        self._links_checked = False

    def _check_links(self, directory: str) -> None:
        """Refuse, by path, a file system whose create-if-absent (a hard link) does not work.

        A FUSE mount of cloud storage (Databricks ``/Volumes`` or ``/dbfs``, gcsfuse,
        blobfuse) often has no ``link()``: the log would fail at its first
        record, or worse, fall back to something that is not atomic.
        """
        fd, probe = tempfile.mkstemp(prefix=".tmp-probe-", dir=directory)
        os.close(fd)
        linked = probe + ".link"
        try:
            os.link(probe, linked)
        except FileExistsError:
            pass
        except OSError as exc:
            raise ConfigurationError(
                f"the directory {directory} cannot hold the coordinator log: its file system "
                f"does not support hard links ({exc.strerror or exc}), which the log's atomic "
                "create-if-absent needs. A mounted cloud path (Databricks /Volumes or /dbfs, "
                "gcsfuse, blobfuse) is such a file system: give the checkpoint as the cloud "
                "URI itself (s3://, gs://, abfss://...), or run the query from a classic "
                "foreachBatch driver; see docs/storage.md",
                setting="checkpoint_location",
            ) from None
        finally:
            for path in (probe, linked):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
        self._links_checked = True

    @property
    def location(self) -> str:
        """Return the root directory."""
        return self.root

    def _path(self, name: str) -> str:
        return os.path.join(self.root, *name.split("/"))

    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Write ``data`` to ``name`` atomically (see :class:`LogStore`)."""
        path = self._path(name)
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        if not overwrite and not self._links_checked:
            self._check_links(directory)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                if self.fsync:
                    os.fsync(fh.fileno())
            if overwrite:
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)  # atomic create-if-absent
                except FileExistsError:
                    return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        if self.fsync:
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return True

    def read(self, name: str) -> bytes | None:
        """Read ``name``, or None (see :class:`LogStore`)."""
        try:
            with open(self._path(name), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def list_directories(self, directory: str) -> list[str]:
        """List the sub-directory names of ``directory``; [] if it does not exist."""
        try:
            with os.scandir(self._path(directory)) as entries:
                return sorted(e.name for e in entries if e.is_dir() and e.name[0] != ".")
        except (FileNotFoundError, NotADirectoryError):
            return []

    def list(self, directory: str) -> list[str]:
        """List file names in ``directory`` (see :class:`LogStore`)."""
        try:
            return [n for n in os.listdir(self._path(directory)) if not n.startswith(".")]
        except FileNotFoundError:
            return []

    def delete(self, name: str) -> None:
        """Delete ``name`` if present (see :class:`LogStore`)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(name))

    def delete_tree(self, directory: str) -> None:
        """Delete ``directory`` recursively if present (see :class:`LogStore`)."""
        shutil.rmtree(self._path(directory), ignore_errors=True)

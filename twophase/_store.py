"""Where the coordinator log's files live: a local directory, or Spark's checkpoint file system.

Both stores write every file atomically (a file is either absent or complete) and
can create a file only if it does not exist yet, which the log's commit decision
and epoch claims rely on. :class:`LocalFileStore` uses plain files with fsync and
rename (tests, local checkpoints); :class:`HadoopFileStore` uses Spark's
``CheckpointFileManager`` through the driver's JVM, so the log is as durable as
Spark's own offset log on every file system Spark can checkpoint to.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from typing import Any, Protocol

from .errors import CoordinatorLogError

__all__ = ["HadoopFileStore", "LocalFileStore", "LogStore", "PyArrowFileStore"]


class LogStore(Protocol):
    """Where the coordinator log's files live. Paths are relative, ``/``-separated."""

    @property
    def location(self) -> str:
        """Return the root of the store, for messages."""
        ...

    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Write a file atomically; return False if it exists and overwrite is False."""
        ...

    def read(self, name: str) -> bytes | None:
        """Read a whole file, or None if it does not exist."""
        ...

    def list(self, directory: str) -> list[str]:
        """List the file names (not paths) in a directory; [] if it does not exist."""
        ...

    def delete(self, name: str) -> None:
        """Delete a file if it exists."""
        ...


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


# Spark moved CheckpointFileManager between releases; try the newest first.
_CFM_CLASSES = (
    "org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager",
    "org.apache.spark.sql.execution.streaming.CheckpointFileManager",
)


class HadoopFileStore:
    """A :class:`LogStore` through Spark's ``CheckpointFileManager`` on the driver.

    Uses the same atomic-create machinery as Spark's own ``offsets/`` and
    ``commits/`` logs, on any Hadoop-compatible file system.

    Parameters
    ----------
    spark
        The driver's SparkSession (its JVM and Hadoop configuration are used).
    root
        Directory of the log, as a Hadoop path string.
    """

    def __init__(self, spark: Any, root: str) -> None:
        self._root = root.rstrip("/")
        jvm = spark.sparkContext._jvm
        self._jvm = jvm
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        manager_cls = None
        for name in _CFM_CLASSES:
            try:
                candidate = jvm.java.lang.Class.forName(
                    name, True, jvm.Thread.currentThread().getContextClassLoader()
                )
            except Exception:
                continue
            if candidate is not None:
                manager_cls = name
                break
        if manager_cls is None:
            raise CoordinatorLogError(
                "Spark's CheckpointFileManager was not found in this Spark version "
                f"(tried {', '.join(_CFM_CLASSES)}); pass a local checkpoint and "
                "report the Spark version"
            )
        companion = jvm
        for part in manager_cls.split("."):
            companion = getattr(companion, part)
        self._manager = companion.create(jvm.org.apache.hadoop.fs.Path(self._root), conf)
        self.manager_class = manager_cls

    @property
    def location(self) -> str:
        """Return the root path."""
        return self._root

    def _path(self, name: str) -> Any:
        return self._jvm.org.apache.hadoop.fs.Path(f"{self._root}/{name}")

    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Write ``data`` to ``name`` atomically (see :class:`LogStore`)."""
        path = self._path(name)
        if not overwrite and self._manager.exists(path):
            return False
        self._manager.mkdirs(path.getParent())
        out = self._manager.createAtomic(path, overwrite)
        try:
            out.write(bytearray(data))
        except Exception:
            out.cancel()
            raise
        try:
            out.close()
        except Exception as exc:
            if not overwrite and "FileAlreadyExists" in str(exc):
                return False
            raise
        return True

    def read(self, name: str) -> bytes | None:
        """Read ``name``, or None (see :class:`LogStore`)."""
        path = self._path(name)
        if not self._manager.exists(path):
            return None
        stream = self._manager.open(path)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data)

    def list(self, directory: str) -> list[str]:
        """List file names in ``directory`` (see :class:`LogStore`)."""
        path = self._path(directory)
        if not self._manager.exists(path):
            return []
        names = [status.getPath().getName() for status in self._manager.list(path)]
        return [n for n in names if not n.startswith(".") and not n.endswith(".crc")]

    def delete(self, name: str) -> None:
        """Delete ``name`` if present (see :class:`LogStore`)."""
        self._manager.delete(self._path(name))


class PyArrowFileStore:
    """A :class:`LogStore` through ``pyarrow.fs``, for tools that run without Spark.

    Any URI ``pyarrow.fs.FileSystem.from_uri`` understands (``s3://``,
    ``gs://``, ``hdfs://``, ``file://``). A file is written under a temporary
    name and moved into place: atomic on local and HDFS file systems; on object
    stores a move is a copy, but an object appears whole or not at all.

    Parameters
    ----------
    uri
        Directory of the log.
    """

    def __init__(self, uri: str) -> None:
        import pyarrow.fs as pafs

        self._pafs = pafs
        self._fs, root = pafs.FileSystem.from_uri(uri)
        self._root = root.rstrip("/")
        self._uri = uri.rstrip("/")

    @property
    def location(self) -> str:
        """Return the URI of the root."""
        return self._uri

    def _path(self, name: str) -> str:
        return f"{self._root}/{name}"

    def _exists(self, path: str) -> bool:
        return bool(self._fs.get_file_info(path).type != self._pafs.FileType.NotFound)

    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Write ``data`` to ``name`` (see :class:`LogStore`)."""
        path = self._path(name)
        if not overwrite and self._exists(path):
            return False
        self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        tmp = f"{path.rsplit('/', 1)[0]}/.tmp-{os.getpid()}-{path.rsplit('/', 1)[1]}"
        with self._fs.open_output_stream(tmp) as out:
            out.write(data)
        self._fs.move(tmp, path)
        return True

    def list_directories(self, directory: str) -> list[str]:
        """List the sub-directory names of ``directory``; [] if it does not exist."""
        selector = self._pafs.FileSelector(self._path(directory), allow_not_found=True)
        return sorted(
            info.base_name
            for info in self._fs.get_file_info(selector)
            if info.type == self._pafs.FileType.Directory
        )

    def read(self, name: str) -> bytes | None:
        """Read ``name``, or None (see :class:`LogStore`)."""
        path = self._path(name)
        if not self._exists(path):
            return None
        with self._fs.open_input_stream(path) as stream:
            return bytes(stream.read())

    def list(self, directory: str) -> list[str]:
        """List file names in ``directory`` (see :class:`LogStore`)."""
        selector = self._pafs.FileSelector(self._path(directory), allow_not_found=True)
        names = [info.base_name for info in self._fs.get_file_info(selector)]
        return [n for n in names if not n.startswith(".") and not n.endswith(".crc")]

    def delete(self, name: str) -> None:
        """Delete ``name`` if present (see :class:`LogStore`)."""
        path = self._path(name)
        if self._exists(path):
            self._fs.delete_file(path)

"""The coordinator log through Spark's ``CheckpointFileManager``, on the classic path's driver."""

from __future__ import annotations

from typing import Any

from ..errors import CoordinatorLogError

__all__ = ["HadoopFileStore"]

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
        self._conf = conf
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

    def delete_tree(self, directory: str) -> None:
        """Delete ``directory`` recursively if present (see :class:`LogStore`)."""
        path = self._path(directory)
        path.getFileSystem(self._conf).delete(path, True)

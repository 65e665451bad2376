"""Where the coordinator log's files live: local disk, an object store, or Spark's file system.

Every store writes each file atomically (a file is either absent or complete)
and can create a file only if it does not exist yet, which the log's commit
decision and epoch claims rely on. :class:`LocalFileStore` uses plain files
with fsync, rename and link (tests, local checkpoints); the object stores use
their service's conditional writes: :class:`S3FileStore` (``_stores/_s3.py``),
:class:`GCSFileStore` (``_stores/_gcs.py``) and :class:`AzureBlobFileStore`
(``_stores/_azure.py``). :class:`HadoopFileStore` (``_stores/_hadoop.py``) uses Spark's
``CheckpointFileManager`` through the driver's JVM, on every other file system
Spark can checkpoint to.

:func:`open_store` is the one rule that picks a location's store: without the
JVM it refuses the file systems where no atomic create-if-absent is proven
(``docs/storage.md``); the classic path passes Spark's file system into it for
those. :class:`PyArrowFileStore` only reads, for the ``twophase`` command on the
other file systems.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeAlias, overload

from ..errors import ConfigurationError
from ._azure import AZURE_SCHEMES, AzureBlobFileStore
from ._gcs import GCS_SCHEMES, GCSFileStore
from ._hadoop import HadoopFileStore
from ._local import LocalFileStore
from ._object import ObjectStore
from ._s3 import S3_SCHEMES, S3FileStore

__all__ = [
    "OBJECT_STORES",
    "AzureBlobFileStore",
    "CheckpointStore",
    "GCSFileStore",
    "HadoopFileStore",
    "LocalFileStore",
    "LogStore",
    "ObjectStoreKind",
    "PyArrowFileStore",
    "S3FileStore",
    "conditional_store_installed",
    "open_store",
]


@dataclass(frozen=True)
class ObjectStoreKind:
    """An object store twophase writes the log to through its conditional writes.

    The one map of schemes to stores: :func:`open_store` and
    :func:`conditional_store_installed` read it, and the documentation's table of
    schemes is rendered from it.
    """

    #: The service, as people call it.
    service: str
    #: The URI schemes it serves, lower case.
    schemes: tuple[str, ...]
    #: The store's class.
    store: Callable[[str], ObjectStore]
    #: The modules its client needs (all of them, or the store is not installed).
    modules: tuple[str, ...]
    #: The extra of the package that installs them.
    extra: str


#: Every object store, in the order the documentation lists them.
OBJECT_STORES = (
    ObjectStoreKind("S3", S3_SCHEMES, S3FileStore, ("boto3",), "s3"),
    ObjectStoreKind("GCS", GCS_SCHEMES, GCSFileStore, ("google.auth", "requests"), "gcs"),
    ObjectStoreKind(
        "Azure Blob Storage",
        AZURE_SCHEMES,
        AzureBlobFileStore,
        ("azure.storage.blob", "azure.identity"),
        "azure",
    ),
)

_OBJECT_STORES = {scheme: kind for kind in OBJECT_STORES for scheme in kind.schemes}

# A URI has a scheme of two or more characters followed by ":/" (hdfs:/a, file:///a, s3a://b/a);
# anything else is a local path (C:/a too).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/")


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

    def delete_tree(self, directory: str) -> None:
        """Delete a directory and everything below it, if it exists."""
        ...


def _object_stores_named() -> str:
    """``S3 (s3://, s3a://), GCS (gs://) or Azure Blob Storage (abfss://, ...)``."""
    named = [f"{k.service} ({', '.join(s + '://' for s in k.schemes)})" for k in OBJECT_STORES]
    return ", ".join(named[:-1]) + " or " + named[-1]


def _refusal(uri: str, scheme: str) -> ConfigurationError:
    return ConfigurationError(
        f"the coordinator log cannot live at {uri} without the JVM: twophase has no proven "
        f"atomic create-if-absent on {scheme}:// of its own, and the log's commit decision and "
        "epoch fencing rely on one (two runs racing must not both create the same record). "
        "Without the JVM the log lives on local disk (a path or file:), or on an object store "
        f"through its conditional writes: {_object_stores_named()}. "
        f"The classic foreachBatch path supports {scheme}:// "
        "wherever Spark itself can checkpoint there: its log goes through Spark's "
        "CheckpointFileManager in the driver's JVM, like Spark's own offset log. See "
        "docs/storage.md",
        setting="checkpoint_location",
    )


def _local_path(uri: str) -> str:
    """Return the local path of ``file:/a``, ``file:///a`` or ``file://localhost/a``."""
    rest = uri[len("file:") :]
    if rest.startswith("//"):
        host, slash, path = rest[2:].partition("/")
        if host not in ("", "localhost"):
            raise ConfigurationError(
                f"{uri!r} names the host {host!r}: a file: URI of the coordinator log must be "
                "local (file:/path or file:///path)",
                setting="checkpoint_location",
            )
        rest = slash + path
    return rest


def _scheme(uri: str) -> str | None:
    match = _SCHEME.match(uri)
    return match.group(1).lower() if match else None


def conditional_store_installed(uri: str) -> bool:
    """Whether ``uri`` is on an object store whose client libraries are installed.

    :func:`open_store` then keeps a log there through the store's conditional
    writes, even on the classic path, rather than in Spark's
    ``CheckpointFileManager`` (whose create on object stores checks, then
    writes: two racing drivers are not told apart by the store).

    Parameters
    ----------
    uri
        The log's directory.

    Returns
    -------
    bool
        True for ``s3``/``s3a`` with boto3, ``gs`` with google-auth and
        requests, ``abfss``/``abfs``/``wasbs``/``wasb`` with azure-storage-blob
        and azure-identity: each extra whole (``s3``, ``gcs``, ``azure``).
    """
    entry = _OBJECT_STORES.get(_scheme(uri) or "")
    if entry is None:
        return False
    try:
        return all(importlib.util.find_spec(module) is not None for module in entry.modules)
    except ImportError:  # a parent package is missing (find_spec imports it)
        return False


@overload
def open_store(
    uri: str,
    *,
    spark_fs: None = None,
    spark_fs_always: bool = False,
    read_only_elsewhere: bool = False,
    fsync: bool = True,
) -> CheckpointStore: ...


@overload
def open_store(
    uri: str,
    *,
    spark_fs: Callable[[str], LogStore],
    spark_fs_always: bool = False,
    read_only_elsewhere: bool = False,
    fsync: bool = True,
) -> LogStore: ...


def open_store(
    uri: str,
    *,
    spark_fs: Callable[[str], LogStore] | None = None,
    spark_fs_always: bool = False,
    read_only_elsewhere: bool = False,
    fsync: bool = True,
) -> LogStore:
    """Return the store of ``uri``: the one rule that picks a location's store.

    A local path (a path, ``file:/path``, ``file:///path``) gets plain files
    written with fsync and an atomic rename or link. An object store (S3,
    GCS, Azure Blob Storage) gets its conditional writes when its client
    libraries are installed. Every other file system has no proven atomic
    create-if-absent without the JVM: the classic ``foreachBatch`` path passes
    ``spark_fs`` (Spark's ``CheckpointFileManager``, like Spark's own offset
    log), which then also serves an object store whose client is missing, and
    every non-local location when ``spark_fs_always``; without it the location
    is refused, or, with ``read_only_elsewhere``, read through ``pyarrow.fs``
    (the ``twophase`` command's ``status``).

    Parameters
    ----------
    uri
        The directory: a local path, ``file:/path``, ``file:///path``,
        ``s3://bucket/prefix``, ``s3a://bucket/prefix``, ``gs://bucket/prefix``,
        ``abfss://container@account.dfs.core.windows.net/prefix``,
        ``wasbs://container@account.blob.core.windows.net/prefix``; with
        ``spark_fs`` or ``read_only_elsewhere``, any URI those reach.
    spark_fs
        Opens a store through Spark's file system (the classic path's driver).
    spark_fs_always
        Use ``spark_fs`` for every location that is not local
        (``spark.twophase.logStore=hadoop``).
    read_only_elsewhere
        Where twophase cannot write, return a :class:`PyArrowFileStore` that reads.
    fsync
        Whether a local store fsyncs (the test kit may skip it).

    Returns
    -------
    LogStore
        A :class:`LocalFileStore`, :class:`S3FileStore`, :class:`GCSFileStore`,
        :class:`AzureBlobFileStore`, what ``spark_fs`` returns, or a
        :class:`PyArrowFileStore`.

    Raises
    ------
    ConfigurationError
        Without ``spark_fs`` or ``read_only_elsewhere``: any other scheme
        (``hdfs``, ``dbfs``...), naming it and why; or the store's client
        libraries are not installed, naming the extra.
    """
    try:
        scheme = _scheme(uri)
        if scheme is None:
            return LocalFileStore(uri, fsync=fsync)
        if scheme == "file":
            return LocalFileStore(_local_path(uri), fsync=fsync)
        entry = _OBJECT_STORES.get(scheme)
        if spark_fs is not None and (spark_fs_always or not conditional_store_installed(uri)):
            return spark_fs(uri)
        if entry is not None:
            return entry.store(uri)
        raise _refusal(uri, scheme)
    except ConfigurationError:
        if not read_only_elsewhere:
            raise  # no proven create-if-absent there: the message says why and what to do
        return PyArrowFileStore(uri)  # hdfs://, gs:// without the extra...: it reads, never writes


class PyArrowFileStore:
    """A read-only view of a checkpoint through ``pyarrow.fs``, for the ``twophase`` command.

    Reads any URI ``pyarrow.fs.FileSystem.from_uri`` understands (``gs://``,
    ``hdfs://``, ...), so that ``twophase status`` works on checkpoints that
    :func:`open_store` refuses. It never writes: pyarrow offers no atomic
    create-if-absent there, so :meth:`write` and :meth:`delete` refuse.

    Parameters
    ----------
    uri
        Directory to read.
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
        return f"{self._root}/{name}" if name else self._root

    def _read_only(self) -> ConfigurationError:
        scheme = _scheme(self._uri) or "this file system"
        if scheme in _OBJECT_STORES:
            try:  # twophase has a store there: opening it says what is missing (the extra)
                open_store(self._uri)
            except ConfigurationError as exc:
                return exc
        return _refusal(self._uri, scheme)

    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Refuse: this store only reads (:func:`open_store` says where the log can be written).

        Raises
        ------
        ConfigurationError
            Always.
        """
        raise self._read_only()

    def delete(self, name: str) -> None:
        """Refuse, like :meth:`write`.

        Raises
        ------
        ConfigurationError
            Always.
        """
        raise self._read_only()

    def delete_tree(self, directory: str) -> None:
        """Refuse, like :meth:`write`.

        Raises
        ------
        ConfigurationError
            Always.
        """
        raise self._read_only()

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
        if self._fs.get_file_info(path).type == self._pafs.FileType.NotFound:
            return None
        with self._fs.open_input_stream(path) as stream:
            return bytes(stream.read())

    def list(self, directory: str) -> list[str]:
        """List file names in ``directory`` (see :class:`LogStore`)."""
        selector = self._pafs.FileSelector(self._path(directory), allow_not_found=True)
        names = [info.base_name for info in self._fs.get_file_info(selector)]
        return [n for n in names if not n.startswith(".") and not n.endswith(".crc")]


#: What :func:`open_store` returns without ``spark_fs``: a store that also lists directories.
CheckpointStore: TypeAlias = LocalFileStore | ObjectStore | PyArrowFileStore

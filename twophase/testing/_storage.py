"""Storage under the fake target: a tiny key-value store with atomic rename.

Keys are ``dir/name``. :class:`MemoryStorage` serves one process;
:class:`DirectoryStorage` keeps every key in a file, so that Spark's executor
processes share the target, and renames atomically on the file system.
"""

from __future__ import annotations

import os
import threading
import uuid

__all__ = ["DirectoryStorage", "MemoryStorage", "Storage"]


class Storage:
    """Tiny key-value storage with atomic rename; keys are ``dir/name``."""

    def put(self, key: str, data: bytes) -> None:
        raise NotImplementedError

    def get(self, key: str) -> bytes | None:
        raise NotImplementedError

    def rename(self, src: str, dst: str) -> bool:
        raise NotImplementedError

    def create_exclusive(self, key: str) -> bool:
        raise NotImplementedError

    def list(self, directory: str) -> list[str]:
        raise NotImplementedError

    def delete(self, key: str) -> bool:
        raise NotImplementedError


class MemoryStorage(Storage):
    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self._data[key] = data

    def get(self, key: str) -> bytes | None:
        return self._data.get(key)

    def rename(self, src: str, dst: str) -> bool:
        with self._lock:
            if src not in self._data:
                return False
            self._data[dst] = self._data.pop(src)
            return True

    def create_exclusive(self, key: str) -> bool:
        with self._lock:
            if key in self._data:
                return False
            self._data[key] = b""
            return True

    def list(self, directory: str) -> list[str]:
        prefix = directory + "/"
        return sorted(k[len(prefix) :] for k in list(self._data) if k.startswith(prefix))

    def delete(self, key: str) -> bool:
        with self._lock:
            return self._data.pop(key, None) is not None


class DirectoryStorage(Storage):
    def __init__(self, root: str, directories: tuple[str, ...]) -> None:
        self.root = root
        for name in directories:
            os.makedirs(os.path.join(root, name), exist_ok=True)

    def _p(self, key: str) -> str:
        return os.path.join(self.root, *key.split("/"))

    def put(self, key: str, data: bytes) -> None:
        path = self._p(key)
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)

    def get(self, key: str) -> bytes | None:
        try:
            with open(self._p(key), "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def rename(self, src: str, dst: str) -> bool:
        try:
            os.rename(self._p(src), self._p(dst))
        except FileNotFoundError:
            return False
        return True

    def create_exclusive(self, key: str) -> bool:
        try:
            fd = os.open(self._p(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True

    def list(self, directory: str) -> list[str]:
        try:
            names = os.listdir(self._p(directory))
        except FileNotFoundError:
            return []
        return sorted(n for n in names if not n.endswith(".tmp"))

    def delete(self, key: str) -> bool:
        try:
            os.unlink(self._p(key))
        except FileNotFoundError:
            return False
        return True

"""What the coordinator log needs of an object store, written once for S3, GCS and Azure.

An object appears whole or not at all, so every record is atomic; the
create-if-absent the log's commit decision and epoch claims rely on is the
service's conditional write (S3 and Azure ``If-None-Match: *``, GCS
``ifGenerationMatch=0``), decided by the service itself between racing
writers. :class:`ObjectStore` holds what does not depend on the service: the
key layout, the probe that refuses an endpoint ignoring the condition, the
file names a listing yields, and the retry rule that recognises a lost reply
(a retried create that finds its own bytes is still this writer's). Each
service's module supplies the few calls that talk to it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import TypeVar

from ..errors import ConfigurationError, RetriableError

__all__ = ["CONNECT_TIMEOUT", "READ_TIMEOUT", "ObjectStore", "split_uri"]

T = TypeVar("T")

#: Seconds a client waits to connect, and for each read of a reply.
CONNECT_TIMEOUT = 10
READ_TIMEOUT = 20
#: Retries of a call whose reply was lost (the first attempt included: three in all), so that a
#: silent network fails the call, clearly, within about 1.5 minutes.
_RETRIES = 2
_BACKOFF = 0.5


def split_uri(uri: str, schemes: tuple[str, ...], example: str) -> tuple[str, str, str]:
    """Split ``scheme://authority/prefix`` into its scheme, authority and key prefix.

    Parameters
    ----------
    uri
        The URI of the log's directory.
    schemes
        The schemes accepted, in lower case.
    example
        The expected form, for the message.

    Returns
    -------
    tuple of str
        The scheme (lower case), the authority, and the prefix (no leading or trailing ``/``).

    Raises
    ------
    ConfigurationError
        Another scheme, or no authority.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in schemes:
        names = ", ".join(f"{s}://" for s in schemes)
        raise ConfigurationError(
            f"{uri!r} is not a URI this store reads (expected {names})",
            setting="checkpoint_location",
        )
    authority, _, prefix = rest.partition("/")
    if not authority:
        raise ConfigurationError(
            f"{uri!r} names no bucket or container (expected {example})",
            setting="checkpoint_location",
        )
    return scheme.lower(), authority, prefix.strip("/")


class ObjectStore:
    """A :class:`~twophase._stores._store.LogStore` on an object store: the service-free part.

    Subclasses implement :meth:`_create`, :meth:`_put`, :meth:`_get`,
    :meth:`_keys` and :meth:`_delete_keys`, and name the service and its
    condition.

    Parameters
    ----------
    uri
        The URI of the log's directory.
    prefix
        The key prefix of the log's directory in its bucket or container.
    verify_conditional_writes
        Check once, before the first conditional create, that the endpoint enforces it.
    """

    #: The service's name, for messages ("S3", "GCS", "Azure Blob Storage").
    service = "object store"
    #: How a create is made conditional, for messages.
    condition = "a precondition"
    #: Where the client looks for credentials, for messages.
    credentials = "the client's usual credentials"

    def __init__(self, uri: str, prefix: str, *, verify_conditional_writes: bool) -> None:
        self._uri = uri.rstrip("/")
        self.prefix = prefix
        self._verified = not verify_conditional_writes

    # --------------------------------------------------------- the service's calls
    @property
    def endpoint(self) -> str:
        """Return the endpoint the store talks to, for messages."""
        raise NotImplementedError

    def _create(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if absent; False if it exists (the service's verdict)."""
        raise NotImplementedError

    def _put(self, key: str, data: bytes) -> None:
        """Write ``key`` whether or not it exists."""
        raise NotImplementedError

    def _get(self, key: str) -> bytes | None:
        """Read ``key``, or None if absent."""
        raise NotImplementedError

    def _keys(self, prefix: str, *, delimited: bool) -> tuple[list[str], list[str]]:
        """List the keys below ``prefix``, and if ``delimited`` the prefixes one level down."""
        raise NotImplementedError

    def _delete_keys(self, keys: list[str]) -> None:
        """Delete ``keys``; a key already gone is not an error."""
        raise NotImplementedError

    def _unsupported(self, exc: BaseException) -> str | None:
        """Say how ``exc`` shows the endpoint rejects conditional writes, or None if it does not."""
        return None

    # ------------------------------------------------------------------- helpers
    @property
    def location(self) -> str:
        """Return the URI of the root."""
        return self._uri

    def _key(self, name: str) -> str:
        name = name.strip("/")
        if not self.prefix:
            return name
        return f"{self.prefix}/{name}" if name else self.prefix

    def _unreachable(self, operation: str, exc: BaseException) -> RetriableError:
        return RetriableError(
            f"coordinator log {self._uri}: {operation} on {self.endpoint} failed: the store "
            f"did not answer ({type(exc).__name__}; connect within {CONNECT_TIMEOUT} s, each "
            f"reply within {READ_TIMEOUT} s, {_RETRIES + 1} attempts). Restart the query once "
            "the store is reachable: the log's records are written whole or not at all"
        )

    def _no_access(self, operation: str, detail: str) -> ConfigurationError:
        """Return the error of a call refused for lack of credentials or rights (no secret)."""
        return ConfigurationError(
            f"coordinator log {self._uri}: {operation} on {self.endpoint} was refused for lack "
            f"of credentials or rights ({detail}). The driver needs {self.credentials}, with "
            "the rights to read, write, list and delete below the log's directory. On the "
            "classic foreachBatch path, the Spark setting spark.twophase.logStore=hadoop keeps "
            "the log in Spark's own file system instead (docs/storage.md)",
            setting="checkpoint_location",
        )

    def _retrying(
        self, operation: str, call: Callable[[], T], transient: Callable[[BaseException], bool]
    ) -> tuple[T, int]:
        """Run ``call``, again after a transient failure; return its result and the retries made.

        Raises
        ------
        RetriableError
            Every attempt failed transiently (the network or the service did not answer).
        """
        attempt = 0
        while True:
            try:
                return call(), attempt
            except Exception as exc:
                if not transient(exc):
                    raise
                if attempt == _RETRIES:
                    raise self._unreachable(operation, exc) from exc
                time.sleep(_BACKOFF * 2**attempt)
                attempt += 1

    def _create_retrying(
        self,
        key: str,
        data: bytes,
        once: Callable[[], bool],
        transient: Callable[[BaseException], bool],
    ) -> bool:
        """Run the conditional create ``once``, retried after a transient failure.

        A reply lost in transit leaves the writer not knowing whether its create
        happened; the retry then finds the object. If it holds this writer's
        bytes, the first attempt created it: that is still this writer's create.
        """
        created, retries = self._retrying("a conditional create", once, transient)
        return created or self._ours_after_retry(key, data, retries)

    def _ours_after_retry(self, key: str, data: bytes, retries: int) -> bool:
        """Whether a create refused after ``retries`` retries was this writer's first attempt."""
        return retries > 0 and self._get(key) == data

    # -------------------------------------------------------------- the probe
    def _verify_conditional_writes(self) -> None:
        probe = self._key(f".twophase-probe-{uuid.uuid4().hex}")
        try:
            first = self._create(probe, b"1")
            second = self._create(probe, b"2")
        except Exception as exc:
            why = self._unsupported(exc)
            if why is None:
                raise
            raise self._refusal(f"it rejected a conditional write ({why})") from exc
        finally:
            self._delete_keys([probe])
        if second:
            raise self._refusal(
                f"it accepted a second create with {self.condition} of an existing object"
            )
        if not first:
            raise self._refusal(f"it refused a create with {self.condition} of a new object")
        self._verified = True

    def _refusal(self, what: str) -> ConfigurationError:
        return ConfigurationError(
            f"the {self.service} endpoint {self.endpoint} cannot hold the coordinator log "
            f"{self._uri}: {what}. The log's commit decision and epoch fencing need an atomic "
            f"create-if-absent, which twophase gets on {self.service} from conditional writes "
            f"({self.condition}); use a store or a version that enforces them",
            setting="checkpoint_location",
        )

    # ------------------------------------------------------------ the LogStore
    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Write ``data`` to ``name`` atomically (see :class:`~twophase._stores._store.LogStore`).

        Parameters
        ----------
        name
            The file, relative to the root.
        data
            Its whole content.
        overwrite
            Replace an existing file; if False, a conditional create.

        Returns
        -------
        bool
            False if ``overwrite`` is False and another writer created ``name`` first.

        Raises
        ------
        ConfigurationError
            The bucket or container does not exist, or the endpoint ignores the condition.
        RetriableError
            The store did not answer.
        """
        key = self._key(name)
        if overwrite:
            self._put(key, data)
            return True
        if not self._verified:
            self._verify_conditional_writes()
        return self._create(key, data)

    def read(self, name: str) -> bytes | None:
        """Read ``name``, or None (see :class:`~twophase._stores._store.LogStore`)."""
        return self._get(self._key(name))

    def _below(self, directory: str) -> str:
        key = self._key(directory)
        return f"{key}/" if key else ""

    def list_directories(self, directory: str) -> list[str]:
        """List the sub-directory names of ``directory``; [] if it does not exist."""
        prefix = self._below(directory)
        _, prefixes = self._keys(prefix, delimited=True)
        return sorted(p[len(prefix) :].rstrip("/") for p in prefixes)

    def list(self, directory: str) -> list[str]:
        """List file names in ``directory`` (see :class:`~twophase._stores._store.LogStore`)."""
        prefix = self._below(directory)
        keys, _ = self._keys(prefix, delimited=True)
        names = [key[len(prefix) :] for key in keys]
        return [n for n in names if n and not n.startswith(".") and not n.endswith(".crc")]

    def delete(self, name: str) -> None:
        """Delete ``name`` if present (see :class:`~twophase._stores._store.LogStore`)."""
        self._delete_keys([self._key(name)])

    def delete_tree(self, directory: str) -> None:
        """Delete every object below ``directory`` (see :meth:`LogStore.delete_tree`)."""
        keys, _ = self._keys(self._below(directory), delimited=False)
        if keys:
            self._delete_keys(keys)

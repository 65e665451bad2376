"""The coordinator log on Google Cloud Storage, without the JVM.

Every file is one object, written by a single media upload: atomic, and
durable once GCS acknowledges it. The create-if-absent is the upload with
``ifGenerationMatch=0``, which GCS grants only if no live object has the name,
and decides between racing writers (one wins; the others get ``412``).

The store speaks GCS's JSON API through ``google-auth``'s authorized
``requests`` session rather than ``google-cloud-storage``: the five calls the
log makes take a few lines each, the precondition is one query parameter, and
the retries stay in twophase's hands, so that a retried create can be told
from a lost race. ``google-auth`` and ``requests`` are small, and present
wherever a Google client library is. Credentials come from Application
Default Credentials (``GOOGLE_APPLICATION_CREDENTIALS``, ``gcloud auth
application-default login``, the metadata server of GCE, GKE or Dataproc);
``STORAGE_EMULATOR_HOST`` points the store at an emulator, without
credentials, as it does Google's own clients.
"""

from __future__ import annotations

import importlib
import os
import urllib.parse
from typing import Any

from ..errors import ConfigurationError
from ._object import CONNECT_TIMEOUT, READ_TIMEOUT, ObjectStore, split_uri

__all__ = ["GCS_SCHEMES", "GCSError", "GCSFileStore"]

GCS_SCHEMES = ("gs",)
_API = "https://storage.googleapis.com"
_SCOPE = "https://www.googleapis.com/auth/devstorage.read_write"
#: Replies that say "try again": throttling and the service's own hiccups.
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class GCSError(OSError):
    """GCS refused a call; ``status`` is the HTTP status of its reply."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class _TransientReplyError(Exception):
    """A reply that asks for the same call again (throttled, or a server error)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")


def _session() -> tuple[Any, str]:
    """Return an HTTP session for GCS and its endpoint, from the usual Google settings."""
    try:
        requests: Any = importlib.import_module("requests")
        google_auth: Any = importlib.import_module("google.auth")
        transport: Any = importlib.import_module("google.auth.transport.requests")
    except ImportError as exc:
        raise ConfigurationError(
            "a coordinator log on GCS (gs://) needs google-auth and requests: "
            "pip install 'twophase[gcs]'",
            setting="checkpoint_location",
        ) from exc
    emulator = os.environ.get("STORAGE_EMULATOR_HOST", "").strip().rstrip("/")
    if emulator:
        endpoint = emulator if "://" in emulator else f"http://{emulator}"
        return requests.Session(), endpoint
    try:
        credentials, _ = google_auth.default(scopes=[_SCOPE])
    except google_auth.exceptions.DefaultCredentialsError as exc:
        raise ConfigurationError(
            "a coordinator log on GCS (gs://) needs Google credentials on the driver, and "
            "Application Default Credentials found none (GOOGLE_APPLICATION_CREDENTIALS, "
            "gcloud auth application-default login, or the metadata server of GCE, GKE or "
            "Dataproc)",
            setting="checkpoint_location",
        ) from exc
    return transport.AuthorizedSession(credentials), _API


class GCSFileStore(ObjectStore):
    """A :class:`~twophase._stores._store.LogStore` on Google Cloud Storage.

    ``write(..., overwrite=False)`` is an upload with ``ifGenerationMatch=0``.
    Before its first such write the store checks that the endpoint enforces
    the condition, and refuses the endpoint otherwise. GCS's reads and
    listings are strongly consistent, as the log needs.

    Parameters
    ----------
    uri
        Directory of the log: ``gs://bucket/prefix``.
    session
        A ready ``requests`` session (authorized for GCS) and its endpoint;
        default: from Application Default Credentials, or ``STORAGE_EMULATOR_HOST``.
    verify_conditional_writes
        Check once that the endpoint enforces ``ifGenerationMatch=0`` (on by default).

    Raises
    ------
    ConfigurationError
        A malformed URI, google-auth is not installed, or no credentials were found.
    """

    service = "GCS"
    condition = "ifGenerationMatch=0"
    credentials = "Application Default Credentials"

    def __init__(
        self,
        uri: str,
        *,
        session: tuple[Any, str] | None = None,
        verify_conditional_writes: bool = True,
    ) -> None:
        _, self.bucket, prefix = split_uri(uri, GCS_SCHEMES, "gs://bucket/prefix")
        super().__init__(uri, prefix, verify_conditional_writes=verify_conditional_writes)
        self._session, self._endpoint = session if session is not None else _session()
        self._requests: Any = importlib.import_module("requests")
        self._bucket_seen = False

    @property
    def endpoint(self) -> str:
        """Return the endpoint the store talks to, for messages."""
        return str(self._endpoint)

    # ------------------------------------------------------------------ calls
    def _transient(self, exc: BaseException) -> bool:
        lost = (self._requests.exceptions.ConnectionError, self._requests.exceptions.Timeout)
        return isinstance(exc, (_TransientReplyError, *lost))

    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        """Send one request; a transient reply raises :class:`_TransientReplyError`."""
        url = f"{self._endpoint}{path}"
        reply = self._session.request(
            method, url, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), **kwargs
        )
        if reply.status_code in _TRANSIENT_STATUS:
            raise _TransientReplyError(reply.status_code)
        if reply.status_code in (401, 403):
            raise self._no_access(f"{method} {path.split('?')[0]}", f"HTTP {reply.status_code}")
        if reply.status_code == 404 and not self._bucket_seen:
            self._refuse_a_missing_bucket()
        elif reply.ok:
            self._bucket_seen = True
        return reply

    def _refuse_a_missing_bucket(self) -> None:
        """After a 404: refuse the bucket if it is the bucket that is missing, not an object."""
        reply = self._session.request(
            "GET",
            f"{self._endpoint}/storage/v1/b/{self.bucket}",
            timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
        )
        if reply.status_code == 404:
            raise ConfigurationError(
                f"the bucket {self.bucket!r} of the coordinator log {self._uri} does not exist "
                "(or the endpoint is not the one that holds it)",
                setting="checkpoint_location",
            )
        self._bucket_seen = reply.ok  # 403: no right to read its metadata; ask again later

    def _call(self, operation: str, method: str, path: str, **kwargs: Any) -> Any:
        reply, _ = self._retrying(
            operation, lambda: self._request(method, path, **kwargs), self._transient
        )
        return reply

    def _failed(self, operation: str, reply: Any) -> GCSError:
        return GCSError(
            f"coordinator log {self._uri}: {operation} on {self._endpoint} failed with HTTP "
            f"{reply.status_code}: {reply.text[:300]}",
            reply.status_code,
        )

    def _object_path(self, key: str) -> str:
        name = urllib.parse.quote(key, safe="")
        return f"/storage/v1/b/{self.bucket}/o/{name}"

    def _upload(self, key: str, data: bytes, **condition: int) -> Any:
        return self._request(
            "POST",
            f"/upload/storage/v1/b/{self.bucket}/o",
            params={"uploadType": "media", "name": key, **condition},
            data=data,
            headers={"Content-Type": "application/octet-stream"},
        )

    def _create(self, key: str, data: bytes) -> bool:
        def once() -> bool:
            reply = self._upload(key, data, ifGenerationMatch=0)
            if reply.status_code == 412:
                return False
            if not reply.ok:
                raise self._failed("a conditional create", reply)
            return True

        return self._create_retrying(key, data, once, self._transient)

    def _unsupported(self, exc: BaseException) -> str | None:
        if isinstance(exc, GCSError) and exc.status in (400, 501):
            return f"HTTP {exc.status}"
        return None

    def _put(self, key: str, data: bytes) -> None:
        reply, _ = self._retrying("an upload", lambda: self._upload(key, data), self._transient)
        if not reply.ok:
            raise self._failed("an upload", reply)

    def _get(self, key: str) -> bytes | None:
        reply = self._call("a read", "GET", self._object_path(key), params={"alt": "media"})
        if reply.status_code == 404:
            return None
        if not reply.ok:
            raise self._failed("a read", reply)
        return bytes(reply.content)

    def _keys(self, prefix: str, *, delimited: bool) -> tuple[list[str], list[str]]:
        keys: list[str] = []
        prefixes: list[str] = []
        params: dict[str, str] = {"prefix": prefix, "fields": "items(name),prefixes,nextPageToken"}
        if delimited:
            params["delimiter"] = "/"
        while True:
            reply = self._call("a listing", "GET", f"/storage/v1/b/{self.bucket}/o", params=params)
            if not reply.ok:
                raise self._failed("a listing", reply)
            page = reply.json()
            keys += [item["name"] for item in page.get("items", [])]
            # GCS gives each prefix once; some emulators repeat them on every page.
            prefixes += [p for p in page.get("prefixes", []) if p not in prefixes]
            if not page.get("nextPageToken"):
                return keys, prefixes
            params["pageToken"] = page["nextPageToken"]

    def _delete_keys(self, keys: list[str]) -> None:
        for key in keys:
            reply = self._call("a delete", "DELETE", self._object_path(key))
            if not reply.ok and reply.status_code != 404:
                raise self._failed("a delete", reply)

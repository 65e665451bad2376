"""The coordinator log on S3 and S3-compatible object stores, without the JVM.

An object appears whole or not at all, so every record is atomic. The
create-if-absent the log's commit decision and epoch claims rely on is S3's
conditional write: ``PutObject`` with ``If-None-Match: *`` succeeds only if no
object has the key, and the store arbitrates between concurrent writers (one
wins; the others get ``412 Precondition Failed``, or ``409
ConditionalRequestConflict`` while the winner's request is still in flight).

boto3 is imported lazily (``pip install 'twophase[s3]'``) and stays behind an
``Any`` boundary: it ships no type information.
"""

from __future__ import annotations

import importlib
import time
import uuid
from typing import Any

from .errors import ConfigurationError, RetriableError

__all__ = ["S3FileStore", "parse_s3_uri"]

S3_SCHEMES = ("s3", "s3a")
# 409 ConditionalRequestConflict: another conditional write of the key is in flight; retrying
# resolves it into a success or a 412 (AWS: "you can retry the request").
_CONFLICT_RETRIES = 5
#: Seconds botocore waits to connect, and for each read of a reply.
_CONNECT_TIMEOUT = 10
_READ_TIMEOUT = 20
#: botocore's exceptions for a network that does not answer (by name: botocore is optional).
_NETWORK_ERRORS = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError"}
)
_CONFLICT_BACKOFF = 0.05
# What a store that does not implement conditional writes answers one with.
_UNSUPPORTED = ("NotImplemented", "InvalidRequest", "InvalidArgument")


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """Split ``s3://bucket/prefix`` (or ``s3a://``) into the bucket and the key prefix.

    Parameters
    ----------
    uri
        The URI of the log's directory.

    Returns
    -------
    tuple of str
        The bucket and the prefix (no leading or trailing ``/``; empty for the bucket's root).

    Raises
    ------
    ConfigurationError
        Not an ``s3://`` or ``s3a://`` URI, or no bucket.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep or scheme.lower() not in S3_SCHEMES:
        raise ConfigurationError(f"{uri!r} is not an s3:// or s3a:// URI")
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigurationError(f"{uri!r} names no bucket (expected s3://bucket/prefix)")
    return bucket, prefix.strip("/")


def _error(exc: BaseException) -> tuple[str, int | None, int]:
    """Return the error code, HTTP status and retry count of a botocore ``ClientError``."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return "", None, 0
    meta = response.get("ResponseMetadata") or {}
    status = meta.get("HTTPStatusCode")
    code = str((response.get("Error") or {}).get("Code", ""))
    return code, status if isinstance(status, int) else None, int(meta.get("RetryAttempts") or 0)


def _new_client(endpoint_url: str | None) -> Any:
    try:
        boto3: Any = importlib.import_module("boto3")  # no type information: Any from here
    except ImportError as exc:
        raise ConfigurationError(
            "a coordinator log on S3 (s3:// or s3a://) needs boto3: pip install 'twophase[s3]'"
        ) from exc
    botocore_config: Any = importlib.import_module("botocore.config")
    # botocore waits 60 s to connect and 60 s for each read by default, in up to 5 attempts: ten
    # minutes on a silent network. These bounds keep a partition under two minutes (the
    # retries stay botocore's, so a lost reply is still retried).
    config = botocore_config.Config(
        connect_timeout=_CONNECT_TIMEOUT, read_timeout=_READ_TIMEOUT, tcp_keepalive=True
    )
    return boto3.client("s3", endpoint_url=endpoint_url, config=config)


def _is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` is botocore's word for an unreachable or silent endpoint."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _NETWORK_ERRORS)


class S3FileStore:
    """A :class:`~twophase._store.LogStore` on S3 or an S3-compatible store, through boto3.

    Every file is one object, written by a single ``PutObject``: atomic, and
    durable once the store acknowledges it. ``write(..., overwrite=False)`` is
    a conditional write (``If-None-Match: *``). Before its first such write the
    store checks that the endpoint enforces the condition (a store that ignored
    it would silently overwrite a commit decision) and refuses the endpoint
    otherwise. The log also needs the store's strong read-after-write and list
    consistency (Amazon S3 has it).

    Parameters
    ----------
    uri
        Directory of the log: ``s3://bucket/prefix`` or ``s3a://bucket/prefix``.
    endpoint_url
        Endpoint of an S3-compatible store. Default: boto3's own resolution
        (``AWS_ENDPOINT_URL_S3``, ``AWS_ENDPOINT_URL``, the AWS config file),
        like the credentials (``AWS_ACCESS_KEY_ID``, profiles, instance roles).
    client
        A ready boto3 S3 client (then ``endpoint_url`` is ignored).
    verify_conditional_writes
        Check once that the endpoint enforces ``If-None-Match`` (on by default).

    Raises
    ------
    ConfigurationError
        A malformed URI, or boto3 is not installed.
    """

    def __init__(
        self,
        uri: str,
        *,
        endpoint_url: str | None = None,
        client: Any = None,
        verify_conditional_writes: bool = True,
    ) -> None:
        self.bucket, self.prefix = parse_s3_uri(uri)
        self._uri = uri.rstrip("/")
        self._client = client if client is not None else _new_client(endpoint_url)
        self._verified = not verify_conditional_writes

    @property
    def location(self) -> str:
        """Return the URI of the root."""
        return self._uri

    def _key(self, name: str) -> str:
        name = name.strip("/")
        if not self.prefix:
            return name
        return f"{self.prefix}/{name}" if name else self.prefix

    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._client, operation)(Bucket=self.bucket, **kwargs)
        except Exception as exc:
            if _error(exc)[0] == "NoSuchBucket":
                raise ConfigurationError(
                    f"the bucket {self.bucket!r} of the coordinator log {self._uri} does not "
                    "exist (or the endpoint is not the one that holds it)",
                    setting="checkpoint_location",
                ) from exc
            if _is_network_error(exc):
                endpoint = getattr(getattr(self._client, "meta", None), "endpoint_url", "?")
                raise RetriableError(
                    f"coordinator log {self._uri}: {operation} on {endpoint} failed: the store "
                    f"did not answer ({type(exc).__name__}; connect within {_CONNECT_TIMEOUT} s, "
                    f"each reply within {_READ_TIMEOUT} s, botocore's retries). Restart the "
                    "query once the store is reachable: the log's records are written whole or "
                    "not at all"
                ) from exc
            raise

    # -------------------------------------------------------------- writing
    def _put_if_absent(self, key: str, data: bytes) -> bool:
        conflicts = 0
        while True:
            try:
                self._call("put_object", Key=key, Body=data, IfNoneMatch="*")
                return True
            except Exception as exc:
                code, status, retries = _error(exc)
                if code == "PreconditionFailed" or status == 412:
                    # A reply lost in transit and retried by botocore finds the object its
                    # own first attempt created: that is still this writer's create.
                    return retries > 0 and self._read_key(key) == data
                if code != "ConditionalRequestConflict" and status != 409:
                    raise
                if conflicts == _CONFLICT_RETRIES:
                    return False  # another writer of the name is still at it: it is taken
                time.sleep(_CONFLICT_BACKOFF * 2**conflicts)
                conflicts += 1

    def _verify_conditional_writes(self) -> None:
        probe = self._key(f".twophase-probe-{uuid.uuid4().hex}")
        try:
            first = self._put_if_absent(probe, b"1")
            second = self._put_if_absent(probe, b"2")
        except Exception as exc:
            code, status, _ = _error(exc)
            if code not in _UNSUPPORTED and status not in (400, 501):
                raise
            raise self._refusal(f"it rejected a conditional write ({code or status})") from exc
        finally:
            self._call("delete_object", Key=probe)
        if second:
            raise self._refusal(
                "it accepted a second PutObject with If-None-Match: * on an existing key"
            )
        if not first:
            raise self._refusal("it refused a PutObject with If-None-Match: * on a new key")
        self._verified = True

    def _refusal(self, what: str) -> ConfigurationError:
        endpoint = getattr(getattr(self._client, "meta", None), "endpoint_url", "?")
        return ConfigurationError(
            f"the S3 endpoint {endpoint} cannot hold the coordinator log {self._uri}: {what}. "
            "The log's commit decision and epoch fencing need an atomic create-if-absent, which "
            "twophase gets on S3 from conditional writes (If-None-Match: *); use a store or a "
            "version that supports them, or the classic foreachBatch path",
            setting="checkpoint_location",
        )

    def write(self, name: str, data: bytes, *, overwrite: bool) -> bool:
        """Write ``data`` to ``name`` atomically (see :class:`~twophase._store.LogStore`).

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
            The bucket does not exist, or the endpoint ignores conditional writes.
        """
        key = self._key(name)
        if overwrite:
            self._call("put_object", Key=key, Body=data)
            return True
        if not self._verified:
            self._verify_conditional_writes()
        return self._put_if_absent(key, data)

    # -------------------------------------------------------------- reading
    def _read_key(self, key: str) -> bytes | None:
        try:
            response = self._call("get_object", Key=key)
        except Exception as exc:
            if _error(exc)[0] == "NoSuchKey":
                return None
            raise
        return bytes(response["Body"].read())

    def read(self, name: str) -> bytes | None:
        """Read ``name``, or None (see :class:`~twophase._store.LogStore`)."""
        return self._read_key(self._key(name))

    def _listing(self, directory: str) -> tuple[str, list[dict[str, Any]], list[dict[str, Any]]]:
        key = self._key(directory)
        prefix = f"{key}/" if key else ""
        contents: list[dict[str, Any]] = []
        prefixes: list[dict[str, Any]] = []
        token: dict[str, str] = {}
        while True:
            page = self._call("list_objects_v2", Prefix=prefix, Delimiter="/", **token)
            contents += page.get("Contents", [])
            prefixes += page.get("CommonPrefixes", [])
            if not page.get("IsTruncated"):
                return prefix, contents, prefixes
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def list_directories(self, directory: str) -> list[str]:
        """List the sub-directory names of ``directory``; [] if it does not exist."""
        prefix, _, prefixes = self._listing(directory)
        return sorted(item["Prefix"][len(prefix) :].rstrip("/") for item in prefixes)

    def list(self, directory: str) -> list[str]:
        """List file names in ``directory`` (see :class:`~twophase._store.LogStore`)."""
        prefix, contents, _ = self._listing(directory)
        names = [item["Key"][len(prefix) :] for item in contents]
        return [n for n in names if n and not n.startswith(".") and not n.endswith(".crc")]

    def delete(self, name: str) -> None:
        """Delete ``name`` if present (see :class:`~twophase._store.LogStore`)."""
        self._call("delete_object", Key=self._key(name))

    def delete_tree(self, directory: str) -> None:
        """Delete every object below ``directory`` (see :class:`~twophase._store.LogStore`)."""
        key = self._key(directory)
        prefix = f"{key}/" if key else ""
        token: dict[str, str] = {}
        while True:
            page = self._call("list_objects_v2", Prefix=prefix, **token)
            keys = [{"Key": item["Key"]} for item in page.get("Contents", [])]
            if keys:  # a page holds at most 1000 keys, as many as one DeleteObjects takes
                result = self._call("delete_objects", Delete={"Objects": keys, "Quiet": True})
                if result.get("Errors"):
                    raise OSError(f"could not delete {result['Errors'][:3]} in {self._uri}")
            if not page.get("IsTruncated"):
                return
            token = {"ContinuationToken": page["NextContinuationToken"]}

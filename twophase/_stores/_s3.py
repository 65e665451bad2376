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
from typing import Any

from ..errors import ConfigurationError
from ._object import CONNECT_TIMEOUT, READ_TIMEOUT, ObjectStore, split_uri

__all__ = ["S3FileStore", "parse_s3_uri"]

S3_SCHEMES = ("s3", "s3a")
# 409 ConditionalRequestConflict: another conditional write of the key is in flight; retrying
# resolves it into a success or a 412 (AWS: "you can retry the request").
_CONFLICT_RETRIES = 5
#: botocore's exceptions for a network that does not answer (by name: botocore is optional).
_NETWORK_ERRORS = frozenset(
    {"EndpointConnectionError", "ConnectTimeoutError", "ReadTimeoutError", "ConnectionClosedError"}
)
_CONFLICT_BACKOFF = 0.05
#: botocore's exceptions, and S3's error codes, for a caller without credentials or rights.
_NO_CREDENTIALS = frozenset({"NoCredentialsError", "PartialCredentialsError"})
_DENIED = frozenset({"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"})
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
    _, bucket, prefix = split_uri(uri, S3_SCHEMES, "s3://bucket/prefix")
    return bucket, prefix


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
        connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT, tcp_keepalive=True
    )
    return boto3.client("s3", endpoint_url=endpoint_url, config=config)


def _is_network_error(exc: BaseException) -> bool:
    """Whether ``exc`` is botocore's word for an unreachable or silent endpoint."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    return bool(names & _NETWORK_ERRORS)


class S3FileStore(ObjectStore):
    """A :class:`~twophase._stores._store.LogStore` on S3 or an S3-compatible store, through boto3.

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

    service = "S3"
    condition = "If-None-Match: *"
    credentials = (
        "AWS credentials that boto3 finds (AWS_ACCESS_KEY_ID, a profile, an instance or pod role)"
    )

    def __init__(
        self,
        uri: str,
        *,
        endpoint_url: str | None = None,
        client: Any = None,
        verify_conditional_writes: bool = True,
    ) -> None:
        self.bucket, prefix = parse_s3_uri(uri)
        super().__init__(uri, prefix, verify_conditional_writes=verify_conditional_writes)
        self._client = client if client is not None else _new_client(endpoint_url)

    @property
    def endpoint(self) -> str:
        """Return the endpoint the client talks to, for messages."""
        return str(getattr(getattr(self._client, "meta", None), "endpoint_url", "?"))

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
            if _is_network_error(exc):  # botocore retried already
                raise self._unreachable(operation, exc) from exc
            code, status, _ = _error(exc)
            if type(exc).__name__ in _NO_CREDENTIALS or code in _DENIED or status == 403:
                raise self._no_access(operation, code or type(exc).__name__) from exc
            raise

    def _create(self, key: str, data: bytes) -> bool:
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
                    return self._ours_after_retry(key, data, retries)
                if code != "ConditionalRequestConflict" and status != 409:
                    raise
                if conflicts == _CONFLICT_RETRIES:
                    return False  # another writer of the name is still at it: it is taken
                time.sleep(_CONFLICT_BACKOFF * 2**conflicts)
                conflicts += 1

    def _unsupported(self, exc: BaseException) -> str | None:
        code, status, _ = _error(exc)
        if code in _UNSUPPORTED or status in (400, 501):
            return str(code or status)
        return None

    def _put(self, key: str, data: bytes) -> None:
        self._call("put_object", Key=key, Body=data)

    def _get(self, key: str) -> bytes | None:
        try:
            response = self._call("get_object", Key=key)
        except Exception as exc:
            if _error(exc)[0] == "NoSuchKey":
                return None
            raise
        return bytes(response["Body"].read())

    def _keys(self, prefix: str, *, delimited: bool) -> tuple[list[str], list[str]]:
        keys: list[str] = []
        prefixes: list[str] = []
        token: dict[str, str] = {}
        delimiter = {"Delimiter": "/"} if delimited else {}
        while True:
            page = self._call("list_objects_v2", Prefix=prefix, **delimiter, **token)
            keys += [item["Key"] for item in page.get("Contents", [])]
            prefixes += [item["Prefix"] for item in page.get("CommonPrefixes", [])]
            if not page.get("IsTruncated"):
                return keys, prefixes
            token = {"ContinuationToken": page["NextContinuationToken"]}

    def _delete_keys(self, keys: list[str]) -> None:
        if len(keys) == 1:
            self._call("delete_object", Key=keys[0])
            return
        for start in range(0, len(keys), 1000):  # one DeleteObjects takes at most 1000 keys
            objects = [{"Key": key} for key in keys[start : start + 1000]]
            result = self._call("delete_objects", Delete={"Objects": objects, "Quiet": True})
            if result.get("Errors"):
                raise OSError(f"could not delete {result['Errors'][:3]} in {self._uri}")

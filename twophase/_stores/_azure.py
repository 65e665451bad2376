"""The coordinator log on Azure Blob Storage and ADLS Gen2, without the JVM.

Every file is one block blob, written by a single ``Put Blob``: atomic, and
durable once Azure acknowledges it. The create-if-absent is ``Put Blob`` with
``If-None-Match: *``, which the service grants only if no blob has the name,
and decides between racing writers (one wins; the others get ``409
BlobAlreadyExists``). ``abfss://`` (ADLS Gen2, hierarchical namespace) and
``wasbs://`` URIs both name a container of an account, and the store reaches
both through the Blob endpoint, which serves hierarchical accounts too.

The client is ``azure-storage-blob``, Azure's own: it signs requests for
every credential kind, and its upload without ``overwrite`` is the
conditional ``Put Blob`` itself. Its retries are turned off so that twophase's
own can tell a retried create from a lost race. Credentials: the connection
string in ``AZURE_STORAGE_CONNECTION_STRING`` when it names the URI's account
(an account key, a SAS, or an emulator's endpoint), else ``azure-identity``'s
``DefaultAzureCredential`` (environment service principal, workload or managed
identity, the Azure CLI's login).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

from ..errors import ConfigurationError
from ._object import CONNECT_TIMEOUT, READ_TIMEOUT, ObjectStore, split_uri

__all__ = ["AZURE_SCHEMES", "AzureBlobFileStore", "parse_azure_uri"]

AZURE_SCHEMES = ("abfss", "abfs", "wasbs", "wasb")
_EXTRA = "pip install 'twophase[azure]'"
#: Replies that say "try again": throttling and the service's own hiccups.
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
T = TypeVar("T")


def parse_azure_uri(uri: str) -> tuple[str, str, str, str]:
    """Split an ``abfss://`` or ``wasbs://`` URI into account, Blob endpoint, container, prefix.

    Parameters
    ----------
    uri
        ``abfss://container@account.dfs.core.windows.net/prefix`` or
        ``wasbs://container@account.blob.core.windows.net/prefix`` (also ``abfs``, ``wasb``).

    Returns
    -------
    tuple of str
        The account, its Blob endpoint (``https://account.blob.<suffix>``), the
        container and the prefix (no leading or trailing ``/``).

    Raises
    ------
    ConfigurationError
        Another scheme, or no ``container@account.<service>.<suffix>`` authority.
    """
    example = "abfss://container@account.dfs.core.windows.net/prefix"
    _, authority, prefix = split_uri(uri, AZURE_SCHEMES, example)
    container, at, host = authority.partition("@")
    account, _, rest = host.partition(".")
    service, _, suffix = rest.partition(".")
    if not (at and container and account and service in ("dfs", "blob") and suffix):
        raise ConfigurationError(
            f"{uri!r} does not name a container of an account (expected {example})",
            setting="checkpoint_location",
        )
    return account, f"https://{account}.blob.{suffix}", container, prefix


def _connection_string_account(connection_string: str) -> str:
    for part in connection_string.split(";"):
        key, _, value = part.partition("=")
        if key.strip().lower() == "accountname":
            return value.strip()
    return ""


def _container_client(account: str, account_url: str, container: str) -> Any:
    """Return a container client from the usual Azure settings, with bounded waits, no retries."""
    try:
        blob: Any = importlib.import_module("azure.storage.blob")
    except ImportError as exc:
        raise ConfigurationError(
            f"a coordinator log on Azure (abfss://, wasbs://) needs azure-storage-blob: {_EXTRA}",
            setting="checkpoint_location",
        ) from exc
    options = {
        "connection_timeout": CONNECT_TIMEOUT,
        "read_timeout": READ_TIMEOUT,
        "retry_total": 0,  # twophase retries (ObjectStore._retrying)
    }
    connection_string = os.environ.get("AZURE_STORAGE_CONNECTION_STRING", "")
    if connection_string and _connection_string_account(connection_string) == account:
        service = blob.BlobServiceClient.from_connection_string(connection_string, **options)
    else:
        try:
            identity: Any = importlib.import_module("azure.identity")
        except ImportError as exc:
            raise ConfigurationError(
                f"a coordinator log on Azure account {account!r} needs credentials: "
                "AZURE_STORAGE_CONNECTION_STRING naming that account, or azure-identity's "
                f"DefaultAzureCredential ({_EXTRA})",
                setting="checkpoint_location",
            ) from exc
        credential = identity.DefaultAzureCredential()
        service = blob.BlobServiceClient(account_url, credential=credential, **options)
    return service.get_container_client(container)


class AzureBlobFileStore(ObjectStore):
    """A :class:`~twophase._stores._store.LogStore` on Azure Blob Storage or ADLS Gen2.

    ``write(..., overwrite=False)`` is ``Put Blob`` with ``If-None-Match: *``.
    Before its first such write the store checks that the endpoint enforces
    the condition, and refuses the endpoint otherwise. Blob Storage's reads and
    listings are strongly consistent, as the log needs.

    Parameters
    ----------
    uri
        Directory of the log: ``abfss://container@account.dfs.core.windows.net/prefix``
        or ``wasbs://container@account.blob.core.windows.net/prefix``.
    container_client
        A ready ``azure.storage.blob.ContainerClient`` of the URI's container
        (its retries off); default: from the usual Azure settings.
    verify_conditional_writes
        Check once that the endpoint enforces ``If-None-Match: *`` (on by default).

    Raises
    ------
    ConfigurationError
        A malformed URI, the client libraries are missing, or no credentials.
    """

    service = "Azure Blob Storage"
    condition = "If-None-Match: *"
    credentials = (
        "AZURE_STORAGE_CONNECTION_STRING naming the account, or a credential "
        "DefaultAzureCredential finds (AZURE_CLIENT_ID and its secret, a managed identity, the "
        "Azure CLI's login)"
    )

    def __init__(
        self,
        uri: str,
        *,
        container_client: Any = None,
        verify_conditional_writes: bool = True,
    ) -> None:
        self.account, account_url, self.container, prefix = parse_azure_uri(uri)
        super().__init__(uri, prefix, verify_conditional_writes=verify_conditional_writes)
        self._client = (
            container_client
            if container_client is not None
            else _container_client(self.account, account_url, self.container)
        )
        self._errors: Any = importlib.import_module("azure.core.exceptions")

    @property
    def endpoint(self) -> str:
        """Return the endpoint the store talks to (no credentials in it), for messages."""
        return str(getattr(self._client, "primary_endpoint", None) or self._client.url)

    # ------------------------------------------------------------------ calls
    def _transient(self, exc: BaseException) -> bool:
        errors = self._errors
        if isinstance(exc, (errors.ServiceRequestError, errors.ServiceResponseError)):
            return True
        return isinstance(exc, errors.HttpResponseError) and exc.status_code in _TRANSIENT_STATUS

    def _code(self, exc: BaseException) -> str:
        return str(getattr(exc, "error_code", None) or "")

    def _in_container(self, call: Callable[[], T]) -> T:
        """Run ``call``; a missing container, or missing rights, are refused by name."""
        try:
            return call()
        except self._errors.ClientAuthenticationError as exc:
            raise self._no_access("a call", self._code(exc) or type(exc).__name__) from exc
        except self._errors.ResourceNotFoundError as exc:
            if self._code(exc) == "ContainerNotFound":
                raise ConfigurationError(
                    f"the container {self.container!r} of the coordinator log {self._uri} does "
                    "not exist (or the endpoint is not the account that holds it)",
                    setting="checkpoint_location",
                ) from exc
            raise

    def _call(self, operation: str, call: Callable[[], T]) -> T:
        """Run ``call``, retried after a transient failure, in the container."""
        return self._in_container(lambda: self._retrying(operation, call, self._transient)[0])

    def _create(self, key: str, data: bytes) -> bool:
        def once() -> bool:
            try:
                self._client.upload_blob(key, data, overwrite=False)  # If-None-Match: *
            except self._errors.ResourceExistsError:
                return False
            return True

        return self._in_container(lambda: self._create_retrying(key, data, once, self._transient))

    def _unsupported(self, exc: BaseException) -> str | None:
        status = getattr(exc, "status_code", None)
        if isinstance(exc, self._errors.HttpResponseError) and status in (400, 501):
            return self._code(exc) or f"HTTP {status}"
        return None

    def _put(self, key: str, data: bytes) -> None:
        self._call("an upload", lambda: self._client.upload_blob(key, data, overwrite=True))

    def _get(self, key: str) -> bytes | None:
        try:
            return bytes(self._call("a read", lambda: self._client.download_blob(key).readall()))
        except self._errors.ResourceNotFoundError:
            return None

    def _keys(self, prefix: str, *, delimited: bool) -> tuple[list[str], list[str]]:
        def listing() -> tuple[list[str], list[str]]:
            if delimited:
                items = self._client.walk_blobs(
                    name_starts_with=prefix, delimiter="/", include=["metadata"]
                )
            else:
                items = self._client.list_blobs(name_starts_with=prefix, include=["metadata"])
            keys: list[str] = []
            prefixes: list[str] = []
            folders: list[str] = []
            for item in items:
                if str(item.name).endswith("/"):
                    prefixes.append(str(item.name))  # a BlobPrefix
                elif (item.metadata or {}).get("hdi_isfolder") == "true":
                    folders.append(str(item.name))  # a directory of a hierarchical account
                else:
                    keys.append(str(item.name))
            if not delimited:  # directories after what they hold, deepest first
                keys += sorted(folders, key=lambda name: -name.count("/"))
            return keys, prefixes

        return self._call("a listing", listing)

    def _delete_keys(self, keys: list[str]) -> None:
        def delete(key: str) -> None:
            try:
                self._client.delete_blob(key)
            except self._errors.ResourceNotFoundError as exc:
                if self._code(exc) == "ContainerNotFound":
                    raise

        for key in keys:
            self._call("a delete", lambda: delete(key))  # noqa: B023 (called at once)

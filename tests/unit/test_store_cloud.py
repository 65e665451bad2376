"""The GCS and Azure stores on answers the emulators do not give, and the choice of a store.

Lost replies, endpoints that ignore the condition, silent networks and missing libraries are
scripted here; what the services really do (racing creates, epochs, listings) is tested on
fake-gcs-server and Azurite in ``tests/unit/test_log.py``.
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
import requests
from azure.core.exceptions import ResourceExistsError, ResourceNotFoundError, ServiceResponseError

from twophase import ConfigurationError
from twophase._spark._classic import log_store
from twophase._stores._azure import parse_azure_uri
from twophase._stores._store import (
    AzureBlobFileStore,
    GCSFileStore,
    PyArrowFileStore,
    S3FileStore,
    conditional_store_installed,
    open_store,
)
from twophase.errors import RetriableError

pytestmark = pytest.mark.unit

AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
DEV_ACCOUNT = "devstoreaccount1"


@pytest.fixture(autouse=True)
def _no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("twophase._stores._object._BACKOFF", 0.0)


def _connection_string(endpoint: str, account: str = DEV_ACCOUNT) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={account};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint}/{account};"
    )


# ------------------------------------------------------------------- URIs
@pytest.mark.parametrize(
    ("uri", "parts"),
    [
        (
            "abfss://logs@acct.dfs.core.windows.net/chk/q",
            ("acct", "https://acct.blob.core.windows.net", "logs", "chk/q"),
        ),
        (
            "wasbs://logs@acct.blob.core.windows.net/",
            ("acct", "https://acct.blob.core.windows.net", "logs", ""),
        ),
        (
            "abfs://logs@acct.dfs.core.chinacloudapi.cn/chk",
            ("acct", "https://acct.blob.core.chinacloudapi.cn", "logs", "chk"),
        ),
    ],
)
def test_azure_uris_name_an_account_a_container_and_a_prefix(
    uri: str, parts: tuple[str, str, str, str]
) -> None:
    assert parse_azure_uri(uri) == parts


@pytest.mark.parametrize(
    "uri",
    [
        "abfss://acct.dfs.core.windows.net/chk",  # no container
        "abfss://logs@acct/chk",  # no service host
        "abfss://logs@acct.file.core.windows.net/chk",  # Azure Files is not Blob Storage
        "s3://bucket/chk",
    ],
)
def test_malformed_azure_uris_are_refused_with_the_expected_form(uri: str) -> None:
    with pytest.raises(ConfigurationError, match="abfss://"):
        parse_azure_uri(uri)


def test_a_gcs_uri_without_a_bucket_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    with pytest.raises(ConfigurationError, match="gs://bucket/prefix"):
        open_store("gs:///chk")


# ------------------------------------------------------- which store, which path
def test_open_store_opens_each_object_store_by_scheme(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9")
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", _connection_string("http://127.0.0.1:9"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    gcs = open_store("gs://b/chk/q")
    assert isinstance(gcs, GCSFileStore)
    assert (gcs.bucket, gcs.prefix, gcs.endpoint) == ("b", "chk/q", "http://127.0.0.1:9")
    azure = open_store(f"abfss://c@{DEV_ACCOUNT}.dfs.core.windows.net/chk")
    assert isinstance(azure, AzureBlobFileStore)
    assert (azure.container, azure.prefix) == ("c", "chk")
    assert azure.endpoint.startswith("http://127.0.0.1:9/")
    assert isinstance(
        open_store("wasbs://c@devstoreaccount1.blob.core.windows.net/"), AzureBlobFileStore
    )
    assert isinstance(open_store("s3a://b/chk"), S3FileStore)


@pytest.mark.parametrize(
    ("uri", "installed"),
    [
        ("s3a://b/chk", True),
        ("gs://b/chk", True),
        ("abfss://c@a.dfs.core.windows.net/chk", True),
        ("wasbs://c@a.blob.core.windows.net/chk", True),
        ("hdfs://nn/chk", False),
        ("dbfs:/chk", False),
        ("/local/chk", False),
    ],
)
def test_conditional_store_installed_names_the_object_stores(uri: str, installed: bool) -> None:
    assert conditional_store_installed(uri) is installed


@pytest.mark.parametrize(
    ("uri", "module", "extra"),
    [
        ("gs://b/chk", "google.auth", "twophase[gcs]"),
        ("abfss://c@a.dfs.core.windows.net/chk", "azure.storage.blob", "twophase[azure]"),
        ("abfss://c@a.dfs.core.windows.net/chk", "azure.identity", "twophase[azure]"),
    ],
)
def test_without_its_client_a_store_is_not_chosen_and_opening_it_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, uri: str, module: str, extra: str
) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # an import of it fails
    assert not conditional_store_installed(uri)
    with pytest.raises(ConfigurationError, match=extra.replace("[", r"\[")):
        open_store(uri)


class _Conf:
    def __init__(self, **values: str) -> None:
        self.values = values

    def get(self, key: str, default: str) -> str:
        return self.values.get(key, default)


class _Session:
    def __init__(self, **conf: str) -> None:
        self.conf = _Conf(**conf)


def test_the_classic_path_keeps_an_object_store_log_in_its_conditional_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:9")
    chosen: list[str] = []
    monkeypatch.setattr(
        "twophase._spark._classic.HadoopFileStore", lambda spark, loc: chosen.append(loc)
    )
    assert isinstance(log_store(_Session(), "gs://b/chk/twophase/s/q"), GCSFileStore)
    assert chosen == []
    log_store(_Session(), "hdfs://nn/chk/twophase/s/q")
    log_store(_Session(**{"spark.twophase.logStore": "HADOOP"}), "gs://b/chk/twophase/s/q")
    assert chosen == ["hdfs://nn/chk/twophase/s/q", "gs://b/chk/twophase/s/q"]
    with pytest.raises(ConfigurationError, match=r"spark\.twophase\.logStore='jvm'") as info:
        log_store(_Session(**{"spark.twophase.logStore": "jvm"}), "gs://b/chk")
    assert info.value.setting == "spark.twophase.logStore"


# ------------------------------------------------------------- GCS, scripted
class _Reply:
    def __init__(self, status: int, content: bytes = b"", payload: Any = None) -> None:
        self.status_code = status
        self.ok = status < 400
        self.content = content
        self.text = content.decode() if content else ""
        self._payload = payload

    def json(self) -> Any:
        return self._payload


class ScriptedGCS:
    """GCS's JSON API in memory; ``lose`` replies of conditional creates are lost."""

    def __init__(self, *, honour_condition: bool = True, lose: int = 0) -> None:
        self.objects: dict[str, bytes] = {}
        self.honour_condition = honour_condition
        self.lose = lose
        self.creates = 0

    def request(self, method: str, url: str, **kw: Any) -> _Reply:
        path = urllib.parse.urlparse(url).path
        params = kw.get("params") or {}
        if method == "POST":
            name = params["name"]
            conditional = "ifGenerationMatch" in params
            if conditional and self.honour_condition and name in self.objects:
                return _Reply(412)
            self.objects[name] = kw["data"]
            if conditional and not name.rsplit("/", 1)[-1].startswith(".twophase-probe"):
                self.creates += 1
                if self.lose:
                    self.lose -= 1
                    raise requests.exceptions.ConnectionError("reply lost")
            return _Reply(200, payload={})
        name = urllib.parse.unquote(path.rsplit("/o/", 1)[-1])
        if method == "DELETE":
            return _Reply(204 if self.objects.pop(name, None) is not None else 404)
        if path.endswith("/o"):
            names = sorted(k for k in self.objects if k.startswith(params["prefix"]))
            return _Reply(200, payload={"items": [{"name": n} for n in names]})
        if name in self.objects:
            return _Reply(200, self.objects[name])
        return _Reply(404, b"No such object")


def _gcs(service: ScriptedGCS) -> GCSFileStore:
    return GCSFileStore("gs://b/log", session=(service, "http://gcs.test"))


def test_a_gcs_create_retried_after_a_lost_reply_is_still_ours() -> None:
    service = ScriptedGCS(lose=1)
    assert _gcs(service).write("epochs/1.json", b"mine", overwrite=False)
    assert service.creates == 1, "the first attempt wrote; the retry found it"
    assert not _gcs(service).write("epochs/1.json", b"theirs", overwrite=False)


def test_a_gcs_create_that_finds_another_writers_bytes_after_a_lost_reply_lost() -> None:
    service = ScriptedGCS()
    service.objects["log/epochs/1.json"] = b"theirs"
    assert not _gcs(service).write("epochs/1.json", b"mine", overwrite=False)
    service.lose = 1
    assert _gcs(service).write("epochs/2.json", b"mine", overwrite=False)
    assert service.objects["log/epochs/2.json"] == b"mine"


def test_a_gcs_endpoint_that_ignores_if_generation_match_is_refused() -> None:
    service = ScriptedGCS(honour_condition=False)
    store = _gcs(service)
    assert store.write("state.json", b"{}", overwrite=True), "plain writes need no check"
    with pytest.raises(
        ConfigurationError, match="accepted a second create with ifGenerationMatch=0"
    ):
        store.write("epochs/1.json", b"1", overwrite=False)
    assert sorted(service.objects) == ["log/state.json"], "the probe is deleted"


# ----------------------------------------------------------- Azure, scripted
class _Blob:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def readall(self) -> bytes:
        return self.data


class ScriptedContainer:
    """A ContainerClient in memory; ``lose`` replies of conditional creates are lost."""

    url = "http://azure.test/acct/c"

    def __init__(self, *, honour_condition: bool = True, lose: int = 0) -> None:
        self.blobs: dict[str, bytes] = {}
        self.honour_condition = honour_condition
        self.lose = lose

    def upload_blob(self, name: str, data: bytes, *, overwrite: bool) -> None:
        if not overwrite and self.honour_condition and name in self.blobs:
            raise ResourceExistsError("BlobAlreadyExists")
        self.blobs[name] = data
        if not overwrite and self.lose:
            self.lose -= 1
            raise ServiceResponseError("connection reset before the reply")

    def download_blob(self, name: str) -> _Blob:
        if name not in self.blobs:
            raise ResourceNotFoundError("BlobNotFound")
        return _Blob(self.blobs[name])

    def delete_blob(self, name: str) -> None:
        if self.blobs.pop(name, None) is None:
            raise ResourceNotFoundError("BlobNotFound")


def _azure(container: ScriptedContainer) -> AzureBlobFileStore:
    return AzureBlobFileStore("abfss://c@acct.dfs.core.windows.net/log", container_client=container)


def test_an_azure_create_retried_after_a_lost_reply_is_still_ours() -> None:
    container = ScriptedContainer(lose=1)
    assert _azure(container).write("epochs/1.json", b"mine", overwrite=False)
    assert container.blobs["log/epochs/1.json"] == b"mine"
    assert not _azure(container).write("epochs/1.json", b"theirs", overwrite=False)


def test_an_azure_endpoint_that_ignores_if_none_match_is_refused() -> None:
    container = ScriptedContainer(honour_condition=False)
    with pytest.raises(ConfigurationError, match="accepted a second create with If-None-Match"):
        _azure(container).write("epochs/1.json", b"1", overwrite=False)
    assert container.blobs == {}, "the probe is deleted, nothing else was written"


# ------------------------------------------------------- a network that is silent
@pytest.fixture
def silent_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An endpoint that accepts connections (the kernel does) and never answers."""
    monkeypatch.setattr("twophase._stores._gcs.READ_TIMEOUT", 0.3)
    monkeypatch.setattr("twophase._stores._azure.READ_TIMEOUT", 0.3)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        yield f"http://127.0.0.1:{silent.getsockname()[1]}"


def test_a_gcs_endpoint_that_never_answers_is_a_bounded_retriable_error(
    silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", silent_endpoint)
    started = time.monotonic()
    with pytest.raises(RetriableError) as caught:
        open_store("gs://b/log").read("state.json")
    assert time.monotonic() - started < 10
    assert caught.value.restartable
    assert silent_endpoint in str(caught.value)
    assert "3 attempts" in str(caught.value)


def test_an_azure_endpoint_that_never_answers_is_a_bounded_error_without_the_key(
    silent_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AZURE_STORAGE_CONNECTION_STRING", _connection_string(silent_endpoint))
    started = time.monotonic()
    with pytest.raises(RetriableError) as caught:
        open_store(f"abfss://c@{DEV_ACCOUNT}.dfs.core.windows.net/log").read("state.json")
    assert time.monotonic() - started < 10
    assert silent_endpoint in str(caught.value)
    assert AZURITE_KEY not in str(caught.value)
    assert AZURITE_KEY[:12] not in str(caught.value)


def test_gcs_without_credentials_says_where_they_are_looked_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ConfigurationError, match="Application Default Credentials") as info:
        open_store("gs://b/log")
    assert info.value.setting == "checkpoint_location"


def test_the_read_only_view_of_an_object_store_names_the_missing_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "google.auth", None)
    view = PyArrowFileStore.__new__(PyArrowFileStore)  # no file system needed to refuse
    view._uri = "gs://b/chk"
    with pytest.raises(ConfigurationError, match=r"twophase\[gcs\]"):
        view.write("epochs/1.json", b"{}", overwrite=False)

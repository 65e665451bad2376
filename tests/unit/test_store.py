"""Where the log can live without the JVM: ``open_store``, and the S3 store's edge cases.

The S3 store's behaviour on answers moto does not give (409 conflicts, a retried create, an
endpoint that ignores If-None-Match) is tested with a scripted client; the rest on moto's server.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from tests.unit.test_cli import Stuck
from twophase import ConfigurationError
from twophase._cli._commands import main
from twophase._stores._s3 import parse_s3_uri
from twophase._stores._store import LocalFileStore, PyArrowFileStore, S3FileStore, open_store


# ------------------------------------------------------------------ open_store
@pytest.mark.unit
@pytest.mark.parametrize(
    "uri",
    [
        "hdfs://namenode:8020/chk/q",
        "hdfs:/chk/q",
        "dbfs:/chk/q",
        "adl://account.azuredatalakestore.net/chk",
        "viewfs://cluster/chk",
    ],
)
def test_open_store_refuses_file_systems_without_a_proven_atomic_create(uri: str) -> None:
    scheme = uri.split(":", 1)[0]
    with pytest.raises(ConfigurationError) as info:
        open_store(uri)
    message = str(info.value)
    assert f"{scheme}://" in message
    assert "without the JVM" in message
    assert "create-if-absent" in message
    assert "classic foreachBatch path supports" in message
    assert "CheckpointFileManager" in message
    assert info.value.setting == "checkpoint_location"


@pytest.mark.unit
@pytest.mark.parametrize(
    ("uri", "root"),
    [
        ("/data/chk", "/data/chk"),
        ("relative/chk", "relative/chk"),
        ("file:/data/chk", "/data/chk"),
        ("file:///data/chk", "/data/chk"),
        ("file://localhost/data/chk", "/data/chk"),
        ("C:/chk", "C:/chk"),
    ],
)
def test_open_store_opens_local_paths_and_file_uris(uri: str, root: str) -> None:
    store = open_store(uri)
    assert isinstance(store, LocalFileStore)
    assert store.root == root


@pytest.mark.unit
def test_open_store_refuses_a_file_uri_of_another_host() -> None:
    with pytest.raises(ConfigurationError, match="names the host 'nas'"):
        open_store("file://nas/chk")


@pytest.mark.unit
@pytest.mark.parametrize(
    ("uri", "bucket", "prefix"),
    [
        ("s3://b/chk/q", "b", "chk/q"),
        ("s3a://b/chk/q/", "b", "chk/q"),
        ("S3A://b", "b", ""),
        ("s3://b/", "b", ""),
    ],
)
def test_s3_uris_name_a_bucket_and_a_prefix(uri: str, bucket: str, prefix: str) -> None:
    assert parse_s3_uri(uri) == (bucket, prefix)


@pytest.mark.unit
@pytest.mark.parametrize("uri", ["s3:///chk", "s3a://", "gs://b/chk", "b/chk"])
def test_malformed_s3_uris_are_refused(uri: str) -> None:
    with pytest.raises(ConfigurationError):
        parse_s3_uri(uri)


@pytest.mark.unit
def test_the_s3_store_without_boto3_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 raises ImportError
    with pytest.raises(ConfigurationError, match=r"pip install 'twophase\[s3\]'"):
        open_store("s3a://bucket/chk")


@pytest.mark.unit
def test_a_local_file_system_without_hard_links_is_refused_by_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A FUSE mount of cloud storage (/Volumes, /dbfs, gcsfuse) often has no link(): faked here.
    import errno
    import os

    def no_links(src: str, dst: str) -> None:
        raise OSError(errno.EPERM, "Operation not permitted", dst)

    monkeypatch.setattr(os, "link", no_links)
    store = LocalFileStore(tmp_path / "log", fsync=False)
    assert store.write("state.json", b"{}", overwrite=True)  # overwrites need no link
    with pytest.raises(ConfigurationError) as info:
        store.write("epochs/1", b"claim", overwrite=False)
    text = str(info.value)
    assert info.value.setting == "checkpoint_location"
    assert str(tmp_path / "log" / "epochs") in text
    assert "does not support hard links (Operation not permitted)" in text
    assert "s3://" in text
    assert store.read("epochs/1") is None  # nothing written, no probe left behind
    assert sorted(p.name for p in (tmp_path / "log" / "epochs").iterdir()) == []
    monkeypatch.undo()
    assert store.write("epochs/1", b"claim", overwrite=False)  # a real file system passes
    assert not store.write("epochs/1", b"again", overwrite=False)


@pytest.mark.unit
def test_the_read_only_pyarrow_view_refuses_to_write(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.json").write_bytes(b"1")
    view = PyArrowFileStore(f"file://{tmp_path}")
    assert view.read("a/x.json") == b"1"
    assert view.list("a") == ["x.json"]
    assert view.list_directories("") == ["a"]
    for change in (
        lambda: view.write("a/y.json", b"2", overwrite=False),
        lambda: view.delete("a/x.json"),
        lambda: view.delete_tree("a"),
    ):
        with pytest.raises(ConfigurationError, match="file:// of its own"):
            change()
    assert (tmp_path / "a" / "x.json").read_bytes() == b"1"


# ------------------------------------------------------- S3, a scripted client
def _error(code: str, status: int, retries: int = 0) -> ClientError:
    meta = {"HTTPStatusCode": status, "RetryAttempts": retries}
    return ClientError({"Error": {"Code": code}, "ResponseMetadata": meta}, "PutObject")


class _Body:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def read(self) -> bytes:
        return self._data


class ScriptedClient:
    """An S3 client whose conditional puts answer from a script (then behave like S3)."""

    def __init__(self, *answers: ClientError | None, honour_condition: bool = True) -> None:
        self.answers = list(answers)
        self.objects: dict[str, bytes] = {}
        self.honour_condition = honour_condition
        self.puts = 0

    def put_object(self, *, Bucket: str, Key: str, Body: bytes, **kw: Any) -> dict[str, Any]:  # noqa: N803
        self.puts += 1
        probe = Key.rsplit("/", 1)[-1].startswith(".twophase-probe")
        if "IfNoneMatch" in kw and not probe and self.answers:
            answer = self.answers.pop(0)
            if answer is not None:
                raise answer
        if "IfNoneMatch" in kw and self.honour_condition and Key in self.objects:
            raise _error("PreconditionFailed", 412)
        self.objects[Key] = Body
        return {}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        if Key not in self.objects:
            raise _error("NoSuchKey", 404)
        return {"Body": _Body(self.objects[Key])}

    def delete_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803
        self.objects.pop(Key, None)
        return {}

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:  # noqa: N803
        for item in Delete["Objects"]:
            self.objects.pop(item["Key"], None)
        return {}

    def list_objects_v2(self, *, Bucket: str, Prefix: str, **kw: Any) -> dict[str, Any]:  # noqa: N803
        # Two keys a page, so that every listing pages; the token is the last key, as on S3.
        after = kw.get("ContinuationToken", "")
        keys = sorted(k for k in self.objects if k.startswith(Prefix) and k > after)
        page, more = keys[:2], len(keys) > 2
        return {
            "Contents": [{"Key": k} for k in page],
            "IsTruncated": more,
            **({"NextContinuationToken": page[-1]} if more else {}),
        }


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("twophase._stores._s3._CONFLICT_BACKOFF", 0.0)


@pytest.mark.unit
@pytest.mark.usefixtures("no_backoff")
def test_a_conflicting_create_is_retried_until_s3_decides() -> None:
    client = ScriptedClient(_error("ConditionalRequestConflict", 409))
    assert S3FileStore("s3://b/log", client=client).write("x", b"1", overwrite=False)
    assert client.objects["log/x"] == b"1"
    client.objects["log/y"] = b"theirs"
    client.answers = [_error("ConditionalRequestConflict", 409)] * 2
    assert not S3FileStore("s3://b/log", client=client).write("y", b"mine", overwrite=False)
    assert client.objects["log/y"] == b"theirs"


@pytest.mark.unit
@pytest.mark.usefixtures("no_backoff")
def test_a_create_that_keeps_conflicting_counts_as_taken() -> None:
    client = ScriptedClient(*[_error("ConditionalRequestConflict", 409)] * 10)
    assert not S3FileStore("s3://b/log", client=client).write("x", b"1", overwrite=False)
    assert "log/x" not in client.objects


@pytest.mark.unit
def test_a_create_retried_by_botocore_after_a_lost_reply_is_still_ours() -> None:
    client = ScriptedClient(None)
    client.objects["log/mine"] = b"1"  # the first attempt landed; its reply was lost
    client.answers = [_error("PreconditionFailed", 412, retries=1)]
    assert S3FileStore("s3://b/log", client=client).write("mine", b"1", overwrite=False)
    client.objects["log/theirs"] = b"2"
    client.answers = [_error("PreconditionFailed", 412, retries=1)]
    assert not S3FileStore("s3://b/log", client=client).write("theirs", b"1", overwrite=False)


@pytest.mark.unit
def test_an_endpoint_that_ignores_if_none_match_is_refused() -> None:
    client = ScriptedClient(honour_condition=False)
    store = S3FileStore("s3://b/log", client=client)
    assert store.write("state.json", b"{}", overwrite=True), "plain writes need no check"
    with pytest.raises(ConfigurationError, match="accepted a second create with If-None-Match"):
        store.write("epochs/1.json", b"{}", overwrite=False)
    assert set(client.objects) == {"log/state.json"}, "the probe is removed"


@pytest.mark.unit
def test_an_endpoint_that_rejects_conditional_writes_is_refused() -> None:
    class NoConditions(ScriptedClient):
        def put_object(self, **kw: Any) -> dict[str, Any]:
            if "IfNoneMatch" in kw:
                raise _error("NotImplemented", 501)
            return super().put_object(**kw)

    with pytest.raises(ConfigurationError, match=r"rejected a conditional write \(NotImplemented"):
        S3FileStore("s3://b/log", client=NoConditions()).write("x", b"1", overwrite=False)


@pytest.mark.unit
def test_listings_follow_every_page() -> None:
    client = ScriptedClient()
    store = S3FileStore("s3://b/log", client=client, verify_conditional_writes=False)
    names = [f"{i:02d}.json" for i in range(7)]
    for name in names:
        store.write(f"batches/{name}", b"", overwrite=True)
    store.write("batches/.hidden", b"", overwrite=True)
    store.write("batches/x.json.crc", b"", overwrite=True)
    assert store.list("batches") == names
    store.delete_tree("batches")
    assert client.objects == {}


@pytest.mark.unit
def test_a_missing_bucket_is_a_configuration_error() -> None:
    class NoBucket(ScriptedClient):
        def get_object(self, **kw: Any) -> dict[str, Any]:
            raise _error("NoSuchBucket", 404)

    with pytest.raises(ConfigurationError, match="the bucket 'b' of the coordinator log"):
        S3FileStore("s3://b/log", client=NoBucket()).read("state.json")


# ---------------------------------------------------------------- S3, on moto
@pytest.fixture
def s3_environment(s3_endpoint: Any, monkeypatch: pytest.MonkeyPatch) -> str:
    """A fresh bucket, reachable through boto3's standard resolution (``AWS_*`` variables)."""
    for name, value in s3_endpoint.environment().items():
        monkeypatch.setenv(name, value)
    return s3_endpoint.new_bucket()


@pytest.mark.s3
def test_open_store_reaches_s3a_through_the_standard_aws_settings(s3_environment: str) -> None:
    store = open_store(f"s3a://{s3_environment}/chk/twophase/s/q")
    assert isinstance(store, S3FileStore)
    assert (store.bucket, store.prefix) == (s3_environment, "chk/twophase/s/q")
    assert store.write("epochs/1.json", b"one", overwrite=False)
    assert not store.write("epochs/1.json", b"two", overwrite=False)
    assert open_store(f"s3://{s3_environment}/chk/twophase/s/q").read("epochs/1.json") == b"one"
    root = open_store(f"s3://{s3_environment}")
    assert root.list_directories("") == ["chk"]
    assert root.list_directories("chk/twophase/s") == ["q"]
    assert root.list("chk/twophase/s/q/epochs") == ["1.json"]


@pytest.mark.s3
def test_the_conditional_write_probe_leaves_nothing_behind(s3_endpoint: Any) -> None:
    bucket = s3_endpoint.new_bucket()
    client = s3_endpoint.client()
    store = S3FileStore(f"s3://{bucket}/log", client=client)
    assert store.write("a.json", b"1", overwrite=False)
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert keys == ["log/a.json"]


@pytest.fixture(
    params=[
        pytest.param("s3", marks=pytest.mark.s3),
        pytest.param("gcs", marks=pytest.mark.gcs),
        pytest.param("azure", marks=pytest.mark.azure),
    ]
)
def object_root(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The URI of a fresh bucket or container, reachable through its client's usual settings."""
    endpoint: Any = request.getfixturevalue(f"{request.param}_endpoint")
    for name, value in endpoint.environment().items():
        monkeypatch.setenv(name, value)
    if request.param == "s3":
        return f"s3a://{endpoint.new_bucket()}"
    if request.param == "gcs":
        return f"gs://{endpoint.new_bucket()}"
    return f"abfss://{endpoint.new_container()}@devstoreaccount1.dfs.core.windows.net"


def test_the_command_reads_and_resolves_a_checkpoint_on_an_object_store(
    tmp_path: Path, object_root: str, capsys: pytest.CaptureFixture[str]
) -> None:
    stuck = Stuck(tmp_path)
    bucket = open_store(object_root)
    local = Path(stuck.checkpoint)
    for path in local.rglob("*"):
        if path.is_file():
            name = f"chk/{path.relative_to(local).as_posix()}"
            bucket.write(name, path.read_bytes(), overwrite=True)
    shutil.rmtree(local)
    checkpoint = f"{object_root}/chk"
    assert bucket.list_directories("") == ["chk"]

    assert main(["status", checkpoint, "--json", *stuck.target_args()]) == 0
    (sink,) = json.loads(capsys.readouterr().out)["sinks"]
    assert sink["log"].startswith(f"{checkpoint}/twophase/events/")
    assert [(u["batch"], u["protocol"], len(u["markers"])) for u in sink["unfinished"]] == [
        (1, "markers", 2)
    ]
    args = ["resolve", checkpoint, "--sink", "events", "--batch", "1", "--mark-committed"]
    assert main([*args, "--yes", "--reason", "on an object store"]) == 0
    assert main(["status", checkpoint]) == 0
    out = capsys.readouterr().out
    assert "unfinished        none" in out
    assert "committed         through batch 1" in out


def test_delete_tree_on_an_object_store_removes_a_directory_and_nothing_else(
    object_root: str,
) -> None:
    store = open_store(f"{object_root}/log")
    for name in ("staged/3/part-0.parquet", "staged/3/_SUCCESS", "staged/30/x", "state.json"):
        store.write(name, b"x", overwrite=True)
    store.delete_tree("staged/3")
    assert store.list("staged/3") == []
    assert store.list_directories("staged") == ["30"]
    assert store.list("staged/30") == ["x"]
    assert store.read("state.json") == b"x"


def test_a_missing_bucket_or_container_is_a_configuration_error(object_root: str) -> None:
    scheme, _, rest = object_root.partition("://")
    _, at, account = rest.partition("@")  # Azure: container@account; the others: the bucket
    store = open_store(f"{scheme}://twophase-no-such-one{at}{account}/log")
    with pytest.raises(ConfigurationError, match="does not exist") as info:
        store.list("batches")
    assert info.value.setting == "checkpoint_location"


@pytest.mark.unit
def test_an_s3_endpoint_that_never_answers_is_a_bounded_retriable_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket
    import time

    from twophase.errors import RetriableError

    monkeypatch.setattr("twophase._stores._s3.READ_TIMEOUT", 0.3)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    with socket.socket() as silent:  # accepts connections (the kernel does), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
        store = S3FileStore("s3://b/log", endpoint_url=endpoint, verify_conditional_writes=False)
        started = time.monotonic()
        with pytest.raises(RetriableError) as caught:
            store.read("state.json")
        took = time.monotonic() - started
    assert caught.value.restartable
    assert "get_object" in str(caught.value)
    assert endpoint in str(caught.value)
    assert "ReadTimeoutError" in str(caught.value)
    assert took < 10, f"botocore's own defaults would have waited minutes; took {took:.1f} s"

"""pipeline.storage on both backends: local files and a real moto_server over HTTP."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeline.storage import (
    LocalStore,
    ObjectStore,
    S3Store,
    StorageError,
    file_url_to_path,
    join,
    store_for,
)
from pipeline.storage import s3 as storage
from tests.s3_fixtures import TEST_SECRET_ACCESS_KEY, SilentServer, set_aws_env


@pytest.fixture(params=["file", "s3"])
def base_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return (tmp_path / "objects").as_uri()
    s3 = request.getfixturevalue("moto_server")
    return f"{s3.url}/prefix"


def test_store_for_picks_backend_by_scheme(tmp_path: Path) -> None:
    assert isinstance(store_for(tmp_path.as_uri()), LocalStore)
    assert isinstance(store_for("s3://bucket/a"), S3Store)
    assert isinstance(store_for("s3://bucket/a"), ObjectStore)
    for bad in ("http://x/y", "/abs/path", "gs://b/k"):
        with pytest.raises(ValueError, match="unsupported storage URL"):
            store_for(bad)
    with pytest.raises(ValueError, match="not absolute|names a host"):
        store_for("file://relative/dir")


def test_s3_url_with_embedded_credentials_is_refused_without_echoing_them() -> None:
    with pytest.raises(ValueError, match="must not embed credentials") as info:
        store_for("s3://AKIAXX:topsecret123@bucket/prefix")
    assert "topsecret123" not in str(info.value)


def test_join_keeps_urls_as_strings() -> None:
    assert join("s3://b/runs/", "r1", "/step-5/") == "s3://b/runs/r1/step-5"
    assert join("file:///tmp/x", "a") == "file:///tmp/x/a"


def test_file_urls_must_be_absolute_and_local() -> None:
    assert file_url_to_path("file:///a/b%20c") == Path("/a/b c")
    with pytest.raises(ValueError, match="names a host"):
        file_url_to_path("file://otherhost/a")
    with pytest.raises(ValueError, match="not a file"):
        file_url_to_path("s3://b/k")


def test_put_get_list_delete_round_trip(base_url: str, tmp_path: Path) -> None:
    store = store_for(base_url)
    src = tmp_path / "src.bin"
    payload = os.urandom(300_000)
    src.write_bytes(payload)

    store.put_file(src, join(base_url, "run1", "step-1", "state.pt"))
    store.write_bytes(join(base_url, "run1", "latest"), b'{"step": 1}')
    # "run10" shares the prefix "run1" as a string, never as a directory.
    store.write_bytes(join(base_url, "run10", "latest"), b"other")

    assert store.list(join(base_url, "run1")) == [
        join(base_url, "run1", "latest"),
        join(base_url, "run1", "step-1", "state.pt"),
    ]
    assert store.exists(join(base_url, "run1", "step-1", "state.pt"))
    assert not store.exists(join(base_url, "run1", "step-2", "state.pt"))
    assert store.read_bytes(join(base_url, "run1", "latest")) == b'{"step": 1}'

    dest = tmp_path / "out" / "copy.bin"
    store.get_file(join(base_url, "run1", "step-1", "state.pt"), dest)
    assert dest.read_bytes() == payload

    store.delete(join(base_url, "run1", "latest"))
    store.delete(join(base_url, "run1", "never-there"))  # not an error
    assert store.list(join(base_url, "run1")) == [join(base_url, "run1", "step-1", "state.pt")]
    assert store.delete_prefix(join(base_url, "run1")) == 1
    assert store.list(join(base_url, "run1")) == []
    assert store.list(join(base_url, "run10")) == [join(base_url, "run10", "latest")]
    assert store.list(join(base_url, "nothing-here")) == []


def test_missing_objects_raise_file_not_found(base_url: str, tmp_path: Path) -> None:
    store = store_for(base_url)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        store.read_bytes(join(base_url, "missing.json"))
    dest = tmp_path / "dest.bin"
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        store.get_file(join(base_url, "missing.pt"), dest)
    assert not dest.exists()
    assert list(tmp_path.glob(".dest.bin*")) == []  # no temp file left behind


def test_write_bytes_overwrites_whole(base_url: str) -> None:
    store = store_for(base_url)
    url = join(base_url, "pointer")
    store.write_bytes(url, b"first version, long")
    store.write_bytes(url, b"second")
    assert store.read_bytes(url) == b"second"
    assert store.list(base_url) == [url]  # no temp objects visible


def test_local_write_failure_keeps_old_object_and_leaves_no_temp(tmp_path: Path) -> None:
    base = (tmp_path / "objects").as_uri()
    store = LocalStore()
    url = join(base, "latest")
    store.write_bytes(url, b"old")
    with pytest.raises(TypeError):
        store.write_bytes(url, "not bytes")  # type: ignore[arg-type]
    assert store.read_bytes(url) == b"old"
    assert sorted(p.name for p in (tmp_path / "objects").iterdir()) == ["latest"]


def test_local_list_ignores_in_flight_temp_files(tmp_path: Path) -> None:
    root = tmp_path / "objects"
    (root / "run").mkdir(parents=True)
    (root / "run" / ".state.pt.abc123.tmp").write_bytes(b"half")
    (root / "run" / ".tmp-state.pt.123.abcd").write_bytes(b"half")
    (root / "run" / "done").write_bytes(b"x")
    assert LocalStore().list(root.as_uri() + "/run") == [root.as_uri() + "/run/done"]


def test_s3_multipart_transfer_round_trip(
    moto_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Shrink the part size to S3's minimum so a small file takes the multipart path both ways.
    monkeypatch.setattr(storage, "S3_PART_BYTES", 5 * 1024 * 1024)
    src = tmp_path / "big.bin"
    payload = os.urandom(11 * 1024 * 1024 + 123)
    src.write_bytes(payload)
    store = S3Store()
    url = f"{moto_server.url}/big/big.bin"
    store.put_file(src, url)
    head = moto_server.client.head_object(Bucket=moto_server.bucket, Key="big/big.bin")
    assert "-" in head["ETag"], "expected a multipart upload (its ETag is not an MD5)"
    dest = tmp_path / "back.bin"
    store.get_file(url, dest)
    assert dest.read_bytes() == payload


def test_s3_endpoint_comes_from_boto3_env(
    moto_server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = S3Store()
    store.write_bytes(f"{moto_server.url}/k", b"v")
    assert moto_server.keys() == ["k"]
    # Point AWS_ENDPOINT_URL at a closed port: a fresh store must follow it (and fail).
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(StorageError, match=r"s3://.*/k"):
        S3Store().read_bytes(f"{moto_server.url}/k")


def test_s3_missing_bucket_is_a_storage_error_naming_the_url(moto_server) -> None:
    store = S3Store()
    with pytest.raises(StorageError, match="NoSuchBucket") as info:
        store.write_bytes("s3://lt-no-such-bucket-xyz/run/latest", b"x")
    assert "s3://lt-no-such-bucket-xyz/run/latest" in str(info.value)


def test_credentials_never_reach_logs_or_output(
    moto_server, tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # every logger, boto3/botocore included
    store = S3Store()
    src = tmp_path / "f.bin"
    src.write_bytes(b"abc" * 1000)
    store.put_file(src, f"{moto_server.url}/x/f.bin")
    store.get_file(f"{moto_server.url}/x/f.bin", tmp_path / "g.bin")
    store.list(f"{moto_server.url}/x")
    with pytest.raises(StorageError) as info:
        store.read_bytes("s3://lt-no-such-bucket-xyz/k")
    out = capsys.readouterr()
    assert caplog.records, "expected boto3 debug logging to be captured"
    for text in (caplog.text, out.out, out.err, str(info.value), repr(info.value)):
        assert TEST_SECRET_ACCESS_KEY not in text


@pytest.fixture
def silent_endpoint(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[SilentServer]:
    server = SilentServer()
    set_aws_env(monkeypatch, server.endpoint, tmp_path)
    monkeypatch.setenv("LAKETRAIN_S3_CONNECT_TIMEOUT", "0.5")
    monkeypatch.setenv("LAKETRAIN_S3_READ_TIMEOUT", "0.5")
    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "2")
    yield server
    server.close()


def _in_thread(fn: Any, limit_s: float = 120) -> BaseException | None:
    """Run ``fn`` in a thread and return what it raised; fail if it is still running after a
    generous limit (the point is that it ends at all: boto3's defaults would hang for minutes)."""
    import threading

    raised: list[BaseException] = []

    def target() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(limit_s)
    assert not thread.is_alive(), f"the S3 call was still hanging after {limit_s:.0f}s"
    return raised[0] if raised else None


@pytest.mark.parametrize("call", ["read_bytes", "list", "put_file"])
def test_a_hung_s3_endpoint_fails_with_the_url_after_bounded_logged_retries(
    silent_endpoint: SilentServer, call: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="pipeline.storage")
    store = S3Store()
    url = "s3://bucket/runs/r1/latest"
    src = tmp_path / "f.bin"
    src.write_bytes(b"x")
    calls = {
        "read_bytes": lambda: store.read_bytes(url),
        "list": lambda: store.list(url),
        "put_file": lambda: store.put_file(src, url),
    }
    exc = _in_thread(calls[call])
    assert isinstance(exc, StorageError), exc
    assert url in str(exc) and "after 2 attempts" in str(exc)
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    assert retries == [retries[0]] and retries[0].startswith(f"retrying {url} (attempt 2/2): ")
    assert "timeout" in retries[0].lower()
    assert len(silent_endpoint.connections) == 2  # one per attempt: botocore's own retries are off


def test_bad_s3_limits_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAKETRAIN_S3_READ_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="LAKETRAIN_S3_READ_TIMEOUT='soon'"):
        store_for("s3://bucket/x")
    monkeypatch.setenv("LAKETRAIN_S3_READ_TIMEOUT", "1")
    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "0")
    with pytest.raises(ValueError, match="LAKETRAIN_S3_ATTEMPTS='0'"):
        store_for("s3://bucket/x")

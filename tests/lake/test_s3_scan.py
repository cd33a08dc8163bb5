"""The ledger scan of a lake in S3 (LAKE_DIR=s3://bucket/prefix), on a real moto_server over
HTTP, every request recorded by a proxy in front of it (tests/s3_recording.py)."""

from __future__ import annotations

import hashlib
import re
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.s3_fixtures import MotoS3
from tests.s3_recording import RecordingProxy

READ_OPS = {"ListObjectsV2", "ListObjectVersions", "GetBucketVersioning", "GetObject", "HeadObject"}


@dataclass
class S3Lake:
    s3: MotoS3
    proxy: RecordingProxy
    prefix: str = "lake"

    @property
    def url(self) -> str:
        return f"s3://{self.s3.bucket}/{self.prefix}"

    def put(self, rel: str, data: bytes) -> None:
        self.s3.client.put_object(Bucket=self.s3.bucket, Key=f"{self.prefix}/{rel}", Body=data)

    def delete(self, rel: str) -> None:
        self.s3.client.delete_object(Bucket=self.s3.bucket, Key=f"{self.prefix}/{rel}")

    def etags(self) -> dict[str, str]:
        pages = self.s3.client.get_paginator("list_objects_v2").paginate(Bucket=self.s3.bucket)
        return {o["Key"]: o["ETag"] for p in pages for o in p.get("Contents", [])}


def lake_on(s3: MotoS3, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Lake]:
    from pipeline.settings import get_settings

    _ = s3.client  # the test's own client talks to moto directly, unrecorded
    proxy = RecordingProxy(s3.endpoint)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)  # laketrain's clients: recorded
    lake = S3Lake(s3, proxy)
    monkeypatch.setenv("LAKE_DIR", lake.url)
    get_settings.cache_clear()
    try:
        yield lake
    finally:
        proxy.close()
        get_settings.cache_clear()


@pytest.fixture
def s3_lake(moto_server: MotoS3, lt_env: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Lake]:
    yield from lake_on(moto_server, monkeypatch)


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_scan_records_new_objects_and_a_no_change_rescan_only_lists(s3_lake, store):
    from pipeline.lake.scan import scan

    files = {f"digits/{d}/{i}.png": bytes([d, i]) * 50 for d in range(3) for i in range(4)}
    files["photos/cat/a.jpg"] = b"cat" * 100
    for rel, data in files.items():
        s3_lake.put(rel, data)

    first = scan(store=store)
    assert {c.path: c.md5 for c in first.new} == {p: md5(d) for p, d in files.items()}
    assert first.changed_datasets == ["digits", "photos"]
    assert s3_lake.proxy.ops().count("GetObject") == len(files)

    s3_lake.proxy.clear()
    again = scan(store=store)
    assert again.unchanged == len(files)
    assert not again.has_content_changes and not again.touched
    ops = s3_lake.proxy.ops()
    assert "GetObject" not in ops
    assert set(ops) <= {"ListObjectsV2", "GetBucketVersioning"}
    assert ops.count("ListObjectsV2") == 3  # the top level, then one listing per dataset

    # One dataset only: its prefix is listed, nothing else.
    s3_lake.proxy.clear()
    assert scan(dataset="photos", store=store).unchanged == 1
    assert s3_lake.proxy.ops().count("ListObjectsV2") == 1


def test_same_size_new_content_is_hashed_again_and_the_etag_is_never_the_md5(s3_lake, store):
    from pipeline.lake.scan import scan
    from pipeline.metadata.ledger import LedgerFile

    s3_lake.put("digits/0/a.png", b"A" * 64)
    scan(store=store)
    s3_lake.put("digits/0/a.png", b"B" * 64)  # same size: only the ETag and LastModified moved
    result = scan(store=store)
    assert [(c.path, c.md5, c.previous_md5) for c in result.changed] == [
        ("digits/0/a.png", md5(b"B" * 64), md5(b"A" * 64))
    ]

    # A multipart upload: its ETag is not the MD5 of its bytes, the ledger's md5 is.
    client, bucket = s3_lake.s3.client, s3_lake.s3.bucket
    parts = [b"x" * (5 << 20), b"y" * 1000]
    up = client.create_multipart_upload(Bucket=bucket, Key="lake/digits/0/big.png")
    done = []
    for n, body in enumerate(parts, 1):
        r = client.upload_part(
            Bucket=bucket,
            Key="lake/digits/0/big.png",
            UploadId=up["UploadId"],
            PartNumber=n,
            Body=body,
        )
        done.append({"ETag": r["ETag"], "PartNumber": n})
    client.complete_multipart_upload(
        Bucket=bucket,
        Key="lake/digits/0/big.png",
        UploadId=up["UploadId"],
        MultipartUpload={"Parts": done},
    )
    result = scan(store=store)
    whole = md5(b"".join(parts))
    assert [(c.path, c.md5) for c in result.new] == [("digits/0/big.png", whole)]
    with store.session() as session:
        row = session.query(LedgerFile).filter_by(path="digits/0/big.png").one()
        assert row.etag.strip('"') != whole and row.etag.endswith('-2"')
        assert (row.size, row.ctime_ns, row.inode) == (sum(map(len, parts)), None, None)


def test_deleted_and_renamed_keys_are_handled_as_files_are(s3_lake, store):
    from pipeline.lake.scan import scan

    s3_lake.put("digits/0/a.png", b"aaaa")
    s3_lake.put("digits/0/b.png", b"bbbb")
    scan(store=store)
    client, bucket = s3_lake.s3.client, s3_lake.s3.bucket
    client.copy_object(
        Bucket=bucket,
        Key="lake/digits/1/a.png",
        CopySource={"Bucket": bucket, "Key": "lake/digits/0/a.png"},
    )
    s3_lake.delete("digits/0/a.png")
    s3_lake.delete("digits/0/b.png")
    result = scan(store=store)
    assert [(c.path, c.renamed_from) for c in result.renamed] == [
        ("digits/1/a.png", "digits/0/a.png")
    ]
    assert [c.path for c in result.deleted] == ["digits/0/b.png"]
    assert not result.new

    s3_lake.put("digits/0/b.png", b"bbbb")  # back again: new, not unchanged
    assert [c.path for c in scan(store=store).new] == ["digits/0/b.png"]


def test_keys_that_are_not_file_names_are_refused_and_ignore_rules_apply(s3_lake, store):
    from pipeline.lake.scan import scan
    from pipeline.metadata.ledger import LedgerFile

    good = {"digits/0/ok.png": b"ok"}
    bad = {
        "digits//empty.png": "empty path segment",
        "digits/a\x01b.png": "control character",
        "digits/3": "also a folder of other keys",
        "top.png": "not inside a dataset folder",
        f"digits/{'n' * 256}.png": "longer than 255 bytes",
    }
    ignored = [
        "digits/.hidden.png",
        "digits/x.tmp",
        "digits/y.part",
        "digits/_cache/z.png",
        "digits/.git/c.png",
        "_staging/a.png",
        ".trash/b.png",
        "digits/folder/",  # a console's folder marker (zero bytes)
    ]
    for rel, data in good.items():
        s3_lake.put(rel, data)
    for rel in bad:
        s3_lake.put(rel, b"bad")
    s3_lake.put("digits/3/c.png", b"c")
    for rel in ignored:
        s3_lake.put(rel, b"" if rel.endswith("/") else b"ignored")

    result = scan(store=store)
    refused = dict(result.refused)
    shown = {rel.replace("\x01", "\\x01"): why for rel, why in bad.items()}
    assert set(refused) == set(shown)
    for rel, why in shown.items():
        assert why in refused[rel], (rel, refused[rel])
    assert sorted(c.path for c in result.new) == ["digits/0/ok.png", "digits/3/c.png"]
    with store.session() as session:
        rows = {r.path: r for r in session.query(LedgerFile)}
    assert set(rows) == set(shown) | {"digits/0/ok.png", "digits/3/c.png"}
    assert all(rows[p].status == "refused" and rows[p].error for p in shown)

    # The bad key renamed to a good one: taken; the refused row is then gone from the lake.
    client, bucket = s3_lake.s3.client, s3_lake.s3.bucket
    client.copy_object(
        Bucket=bucket,
        Key="lake/digits/empty.png",
        CopySource={"Bucket": bucket, "Key": "lake/digits//empty.png"},
    )
    client.delete_object(Bucket=bucket, Key="lake/digits//empty.png")
    result = scan(store=store)
    assert [c.path for c in result.new] == ["digits/empty.png"]
    assert "digits//empty.png" not in dict(result.refused)


def test_a_dot_dot_segment_is_refused(s3_lake, store, db_url):
    """A key with '..' (boto3 sends it percent-encoded, so the server keeps it as is)."""
    from pipeline.lake.scan import scan

    if not db_url.startswith("sqlite"):
        pytest.skip("the refusal logic is backend-independent; once is enough")
    s3_lake.put("digits/../up.png", b"up")
    s3_lake.put("digits/0/ok.png", b"ok")
    keys = s3_lake.s3.keys()
    if "lake/digits/../up.png" not in keys:
        pytest.skip(f"this server normalised the key: {keys}")
    refused = dict(scan(store=store).refused)
    assert "'..' segment" in refused["digits/../up.png"]


def test_a_versioned_bucket_puts_the_version_id_in_the_key(s3_lake, store):
    from pipeline.lake.scan import scan
    from pipeline.metadata.ledger import LedgerFile

    s3_lake.s3.client.put_bucket_versioning(
        Bucket=s3_lake.s3.bucket, VersioningConfiguration={"Status": "Enabled"}
    )
    s3_lake.put("digits/0/a.png", b"one")
    s3_lake.put("digits/0/b.png", b"two")
    assert len(scan(store=store).new) == 2
    with store.session() as session:
        row = session.query(LedgerFile).filter_by(path="digits/0/a.png").one()
        first_version = row.version_id
    assert first_version and first_version != "null"

    s3_lake.proxy.clear()
    assert scan(store=store).unchanged == 2
    assert "GetObject" not in s3_lake.proxy.ops()
    assert "ListObjectVersions" in s3_lake.proxy.ops()

    s3_lake.put("digits/0/a.png", b"ONE")
    s3_lake.delete("digits/0/b.png")  # a delete marker: the key is gone
    result = scan(store=store)
    assert [c.path for c in result.changed] == ["digits/0/a.png"]
    assert [c.path for c in result.deleted] == ["digits/0/b.png"]
    with store.session() as session:
        row = session.query(LedgerFile).filter_by(path="digits/0/a.png").one()
        assert row.version_id not in (None, first_version)


def test_the_scan_leaves_the_lake_bucket_unchanged(s3_lake, store):
    from pipeline.lake.scan import scan

    for i in range(5):
        s3_lake.put(f"digits/{i % 2}/{i}.png", bytes([i]) * 10)
    s3_lake.put("digits//bad.png", b"bad")
    before = s3_lake.etags()
    scan(store=store)
    scan(store=store)
    assert s3_lake.etags() == before
    assert set(s3_lake.proxy.ops()) <= READ_OPS


def test_a_local_lake_row_is_not_taken_for_an_s3_key_and_back(s3_lake, store, lt_env, monkeypatch):
    """Moving the lake between a folder and a bucket re-hashes, never trusts the other key."""
    from pipeline.lake.scan import scan

    folder = lt_env / "lake" / "digits" / "0"
    folder.mkdir(parents=True)
    (folder / "a.png").write_bytes(b"same")
    scan(lt_env / "lake", store=store)
    s3_lake.put("digits/0/a.png", b"same")
    s3_lake.proxy.clear()
    result = scan(store=store)
    assert [c.path for c in result.touched] == ["digits/0/a.png"]  # hashed again, same bytes
    assert s3_lake.proxy.ops().count("GetObject") == 1
    result = scan(lt_env / "lake", store=store)
    assert [c.path for c in result.touched] == ["digits/0/a.png"]


def test_a_collapsed_url_is_refused_with_a_clear_message(lt_env):
    from pipeline.lake.scan import scan

    with pytest.raises(ValueError, match="s3://bucket/prefix string"):
        scan(Path("s3://bucket/lake"))


def test_server_killed_mid_scan_retries_then_fails_naming_the_url_and_records_nothing(
    private_moto_server, lt_env, monkeypatch, caplog, tmp_path
):
    from pipeline.lake.scan import scan
    from pipeline.metadata.ledger import LedgerFile, Scan
    from pipeline.metadata.store import MetadataStore
    from pipeline.storage.errors import StorageError

    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "3")
    monkeypatch.setenv("LAKETRAIN_S3_CONNECT_TIMEOUT", "2")
    store = MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}")
    lakes = lake_on(private_moto_server, monkeypatch)
    lake = next(lakes)
    try:
        for i in range(20):
            lake.put(f"digits/0/{i}.png", bytes([i]) * 100)
        gets = []

        def kill_on_third_get(req):
            if req.op == "GetObject":
                gets.append(req.key)
                if len(gets) == 3:
                    private_moto_server.process.stop(signal.SIGKILL)

        lake.proxy.on_request = kill_on_third_get
        caplog.set_level("WARNING", logger="pipeline.storage")
        with pytest.raises(StorageError) as err:
            scan(store=store)
        message = str(err.value)
        assert f"s3://{lake.s3.bucket}/lake/digits/0/" in message
        assert "after 3 attempts" in message
        assert any("retrying s3://" in r.getMessage() for r in caplog.records)
        with store.session() as session:
            assert session.query(LedgerFile).count() == 0
            assert session.query(Scan).count() == 0
    finally:
        lakes.close()
        store.dispose()


def test_server_killed_before_a_dataset_listing_fails_the_scan(
    private_moto_server, lt_env, monkeypatch, tmp_path
):
    from pipeline.lake.scan import scan
    from pipeline.metadata.ledger import LedgerFile
    from pipeline.metadata.store import MetadataStore
    from pipeline.storage.errors import StorageError

    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "2")
    store = MetadataStore(f"sqlite:///{tmp_path / 'meta.db'}")
    lakes = lake_on(private_moto_server, monkeypatch)
    lake = next(lakes)
    try:
        lake.put("digits/0/a.png", b"a")
        lake.put("photos/0/b.png", b"b")
        scan(store=store)
        lake.put("photos/0/c.png", b"c")
        listings = []

        def kill_on_dataset_listing(req):
            if req.op == "ListObjectsV2" and req.query.get("prefix") == ["lake/photos/"]:
                listings.append(req)
                private_moto_server.process.stop(signal.SIGKILL)

        lake.proxy.on_request = kill_on_dataset_listing
        with pytest.raises(StorageError) as err:
            scan(store=store)
        # The datasets are listed in parallel: either listing may be the one reported.
        assert re.search(
            rf"S3 list of s3://{lake.s3.bucket}/lake/(digits|photos) failed", str(err.value)
        )
        assert "after 2 attempts" in str(err.value)
        with store.session() as session:  # the first scan's rows, untouched
            rows = {r.path: r.deleted_at for r in session.query(LedgerFile)}
        assert rows == {"digits/0/a.png": None, "photos/0/b.png": None}
    finally:
        lakes.close()
        store.dispose()

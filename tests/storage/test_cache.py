"""The local object cache (pipeline/storage/cache.py) against a real moto_server: checked
downloads, refetch of a damaged copy, one download for two processes, the size bound, pins."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.storage import S3Store
from pipeline.storage.cache import CacheError, CacheItem, ObjectCache, sha256_file

ROOT = Path(__file__).resolve().parents[2]


def _put(s3, key: str, data: bytes) -> str:
    s3.client.put_object(Bucket=s3.bucket, Key=key, Body=data)
    return f"{s3.url}/{key}"


def _item(cache: ObjectCache, url: str, data: bytes) -> CacheItem:
    sha = hashlib.sha256(data).hexdigest()
    return CacheItem(cache.path_of(url), ((url, ""),), len(data), lambda p: sha256_file(p) == sha)


def test_fetch_downloads_once_then_reads_the_checked_copy(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 10_000, S3Store())
    data = os.urandom(1000)
    url = _put(moto_server, "p/obj/a.bin", data)
    item = _item(cache, url, data)
    pins = cache.fetch([item])
    assert cache.path_of(url).read_bytes() == data and cache.downloaded == 1
    pins.close()
    cache.fetch([item]).close()
    assert cache.downloaded == 1  # warm: nothing downloaded, nothing hashed
    assert cache.used_bytes() == 1000


def test_a_corrupted_cached_object_is_detected_by_its_checksum_and_fetched_again(
    moto_server, tmp_path
):
    cache = ObjectCache(tmp_path / "c", 10_000, S3Store())
    data = os.urandom(1000)
    url = _put(moto_server, "p/obj/a.bin", data)
    item = _item(cache, url, data)
    cache.fetch([item]).close()
    path = cache.path_of(url)
    damaged = bytearray(data)
    damaged[500] ^= 0xFF
    path.write_bytes(bytes(damaged))  # same size: only the checksum can tell
    cache.fetch([item]).close()
    assert path.read_bytes() == data
    assert cache.downloaded == 2


def test_a_damaged_object_on_the_server_is_an_error_naming_its_url(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 10_000, S3Store())
    url = _put(moto_server, "p/obj/bad.bin", b"not what the version lists")
    item = _item(cache, url, b"what the version lists")
    with pytest.raises(CacheError, match=r"p/obj/bad\.bin.*do not match the checksum"):
        cache.fetch([item])
    assert not cache.path_of(url).exists()  # nothing unchecked is left where readers look
    assert cache.used_bytes() == 0


def test_the_size_bound_evicts_least_recently_used_unpinned_items(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 2500, S3Store())
    blobs = {name: os.urandom(1000) for name in "abc"}
    items = {n: _item(cache, _put(moto_server, f"p/{n}.bin", d), d) for n, d in blobs.items()}
    cache.fetch([items["a"]]).close()
    time.sleep(0.02)
    cache.fetch([items["b"]]).close()
    time.sleep(0.02)
    cache.fetch([items["a"]]).close()  # a is now more recent than b
    time.sleep(0.02)
    cache.fetch([items["c"]]).close()
    assert cache.used_bytes() <= 2500
    assert items["a"].path.exists() and items["c"].path.exists()
    assert not items["b"].path.exists()  # the least recently used went


def test_a_pinned_item_is_never_evicted_and_a_full_cache_says_so(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 1500, S3Store())
    blobs = {name: os.urandom(1000) for name in "ab"}
    items = {n: _item(cache, _put(moto_server, f"p/{n}.bin", d), d) for n, d in blobs.items()}
    pins = cache.fetch([items["a"]])  # an open reader
    with pytest.raises(CacheError, match=r"in use by open readers.*LAKETRAIN_CACHE_MB"):
        cache.fetch([items["b"]])
    assert items["a"].path.read_bytes() == blobs["a"]
    pins.close()
    cache.fetch([items["b"]]).close()  # unpinned now: a goes, b fits
    assert not items["a"].path.exists() and items["b"].path.exists()
    assert cache.used_bytes() <= 1500


def test_a_request_larger_than_the_bound_is_refused_before_any_download(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 500, S3Store())
    data = os.urandom(1000)
    item = _item(cache, _put(moto_server, "p/big.bin", data), data)
    with pytest.raises(CacheError, match=r"more than the cache holds"):
        cache.fetch([item])
    assert cache.downloaded == 0


_FETCHER = """
import hashlib, os, sys, time
from pathlib import Path
from pipeline.storage import S3Store
from pipeline.storage.cache import CacheItem, ObjectCache, sha256_file
root, go, *specs = sys.argv[1:]
cache = ObjectCache(Path(root), 10**8, S3Store())
items = []
for spec in specs:
    url, sha, size = spec.split("|")
    items.append(CacheItem(cache.path_of(url), ((url, ""),), int(size),
                           lambda p, sha=sha: sha256_file(p) == sha))
while not os.path.exists(go):
    time.sleep(0.005)
pins = cache.fetch(items)
print("DOWNLOADED", cache.downloaded, flush=True)
"""


def test_two_processes_fetching_the_same_objects_at_once_download_them_once(moto_server, tmp_path):
    specs = []
    for i in range(6):
        data = os.urandom(200_000)
        url = _put(moto_server, f"p/seg/{i}.bin", data)
        specs.append(f"{url}|{hashlib.sha256(data).hexdigest()}|{len(data)}")
    go = tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _FETCHER, str(tmp_path / "c"), str(go), *specs],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    time.sleep(1.0)  # both started and waiting: they fetch at the same moment
    go.touch()
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    counts = sorted(int(out.split()[-1]) for out, _ in outs)
    assert sum(counts) == 6, counts  # each object downloaded exactly once, by one of them

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


def _ops(store: S3Store) -> list[str]:
    """Every S3 operation ``store``'s client sends from now on."""
    seen: list[str] = []
    store.client.meta.events.register(
        "before-call.s3", lambda event_name, **_kw: seen.append(event_name.rsplit(".", 1)[-1])
    )
    return seen


def test_a_streamed_item_takes_one_get_and_is_checked_as_it_arrives(moto_server, tmp_path):
    store = S3Store()
    cache = ObjectCache(tmp_path / "c", 10**7, store)
    data = os.urandom(3 * 2**20 + 17)  # several stream chunks
    url = _put(moto_server, "p/obj/big.bin", data)

    def never(_path):
        raise AssertionError("a streamed item must not be read back to be checked")

    item = CacheItem(
        cache.path_of(url), ((url, ""),), len(data), never, hashlib.sha256(data).hexdigest()
    )
    ops = _ops(store)
    cache.fetch([item]).close()
    assert ops == ["GetObject"]  # no HEAD first, no ranged parts
    assert cache.path_of(url).read_bytes() == data
    # A wrong sha256 is caught from the stream itself: an error, nothing left in place.
    bad = CacheItem(cache.path_of(f"{url}2"), ((url, ""),), len(data), never, "0" * 64)
    with pytest.raises(CacheError, match=r"do not match the checksum"):
        cache.fetch([bad])
    assert not bad.path.exists()


def test_a_folder_item_streams_its_files_under_one_digest_of_names_and_bytes(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 10**6, S3Store())
    files = {"a.npy": os.urandom(5000), "sub/b.bin": os.urandom(7000)}
    urls = {name: _put(moto_server, f"p/seg/{name}", body) for name, body in files.items()}
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(name.encode() + b"\0" + files[name])
    folder = cache.path_of(f"{moto_server.url}/p/seg")
    item = CacheItem(
        folder,
        tuple((urls[n], n) for n in sorted(files)),
        12000,
        lambda p: False,  # never asked: the stream's digest decides
        digest.hexdigest(),
    )
    cache.fetch([item]).close()
    assert {n: (folder / n).read_bytes() for n in files} == files
    assert cache.downloaded == 2 and cache.used_bytes() == 12000


def test_items_that_an_item_names_join_the_same_fetch_and_are_pinned_with_it(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 2500, S3Store())
    blobs = {name: os.urandom(1000) for name in "abc"}
    items = {n: _item(cache, _put(moto_server, f"p/{n}.bin", d), d) for n, d in blobs.items()}
    named = []

    def then(item):
        named.append(item.path.name)
        return [items["b"]] if item is items["a"] else []

    pins = cache.fetch([items["a"]], then=then)
    assert len(pins) == 2 and sorted(named) == ["a.bin", "b.bin"]
    assert items["b"].path.read_bytes() == blobs["b"]
    # Both are pinned: c does not fit beside them, and neither is evicted for it.
    with pytest.raises(CacheError, match=r"in use by open readers"):
        cache.fetch([items["c"]])
    pins.close()
    # Warm: the same pass, nothing downloaded, `then` still names b.
    cache.fetch([items["a"]], then=then).close()
    assert cache.downloaded == 2


def test_a_torn_state_is_checked_again_not_downloaded_again(moto_server, tmp_path):
    cache = ObjectCache(tmp_path / "c", 10_000, S3Store())
    data = os.urandom(1000)
    url = _put(moto_server, "p/obj/a.bin", data)
    checks = []
    sha = hashlib.sha256(data).hexdigest()
    item = CacheItem(
        cache.path_of(url), ((url, ""),), 1000, lambda p: checks.append(p) or sha256_file(p) == sha
    )
    cache.fetch([item]).close()
    assert checks  # not streamed (no sha256 given): checked once written
    (lock,) = (tmp_path / "c" / "locks").glob("*.lock")
    lock.write_bytes(b'{"format": 2, "pa')  # a crash mid-write of the state
    checks.clear()
    cache.fetch([item]).close()
    assert checks and cache.downloaded == 1  # read and hashed again, right: kept
    assert cache.used_bytes() == 1000  # and counted again


def test_a_cache_of_the_older_format_is_emptied_once(moto_server, tmp_path):
    root = tmp_path / "c"
    (root / "state").mkdir(parents=True)
    (root / "state" / "x.json").write_text("{}")
    old = root / "objects" / "bucket" / "p" / "old.bin"
    old.parent.mkdir(parents=True)
    old.write_bytes(b"x" * 100)  # outside the new format's bound: it must go
    cache = ObjectCache(root, 10_000, S3Store())
    assert not old.exists() and not (root / "state").exists()
    assert cache.used_bytes() == 0


_PIN_MANY = """
import json, os, resource, sys
from pathlib import Path
from pipeline.storage import S3Store
from pipeline.storage.cache import CacheError, CacheItem, ObjectCache, sha256_file

specs, hard_too = json.loads(sys.argv[2]), sys.argv[3] == "hard"
cache = ObjectCache(Path(sys.argv[1]), 10**9, S3Store())
items = [
    CacheItem(cache.path_of(u), ((u, ""),), n, lambda p, s=s: sha256_file(p) == s, s)
    for u, s, n in specs
]
low = len(os.listdir("/proc/self/fd")) + 100  # room for 8 downloads, not for every pin
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (low, low if hard_too else hard))
try:
    pins = cache.fetch(items)
except CacheError as exc:
    print("ERROR", exc, flush=True)
    sys.exit(3)
print("PINNED", len(pins), "LIMIT", low, resource.getrlimit(resource.RLIMIT_NOFILE)[0], flush=True)
"""


@pytest.mark.parametrize("hard_too", [False, True], ids=["soft-limit", "hard-limit"])
def test_more_pins_than_the_soft_open_file_limit(moto_server, tmp_path, hard_too):
    """A reader pins every cached object with an open lock file (a million-sample version has
    ~8,000 leaves): past a low soft limit it raises the limit; at the hard limit it fails with
    an error that says what to raise, not an EMFILE from wherever the next open happens."""
    import json

    specs = []
    for i in range(240):
        data = f"object {i}".encode()
        specs.append(
            (
                _put(moto_server, f"p/many/{i}.bin", data),
                hashlib.sha256(data).hexdigest(),
                len(data),
            )
        )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            _PIN_MANY,
            str(tmp_path / "c"),
            json.dumps(specs),
            "hard" if hard_too else "soft",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if hard_too:
        assert out.returncode == 3, out.stderr
        assert "open-file limit" in out.stdout and "ulimit -n" in out.stdout, out.stdout
    else:
        assert out.returncode == 0, out.stderr
        _, pinned, _, low, now = out.stdout.split()
        assert int(pinned) == 240 and int(now) > int(low)

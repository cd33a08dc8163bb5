"""process decodes a local lake file without hashing it again only while the file still has
the stat key the scan recorded with the shard's md5 (the ledger's own rule); any other file is
hashed, and decoded only when its bytes still have that md5."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from tests.datasets.conftest import image_lake, write_jpeg


def _scan_and_plan(home: Path, store):
    from pipeline.datasets.build import plan
    from pipeline.lake.scan import scan

    scan(home / "lake", dataset="pets", store=store)
    (shard,) = plan("pets", store=store)
    return shard


def _segment_md5s(home: Path, ref) -> set[str]:
    import json

    info = json.loads((home / "data" / ref.path / "segment.json").read_text())
    return {e["md5"] for e in info["entries"]}


def test_the_stat_key_rule_matches_every_field(tmp_path: Path) -> None:
    from pipeline.datasets.build.processing import _unchanged_since_scan

    f = tmp_path / "a.jpg"
    f.write_bytes(b"x" * 10)
    st = os.stat(f)
    key = ("m" * 32, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    assert _unchanged_since_scan(str(f), key, "m" * 32)
    assert not _unchanged_since_scan(str(f), key, "n" * 32)  # the ledger holds another md5
    assert not _unchanged_since_scan(str(f), None, "m" * 32)  # no ledger row
    for i in range(1, 5):  # size, mtime, ctime, inode: each one differing is a change
        other = list(key)
        other[i] += 1
        assert not _unchanged_since_scan(str(f), tuple(other), "m" * 32), i
    assert not _unchanged_since_scan(str(tmp_path / "gone.jpg"), key, "m" * 32)


def test_a_rewrite_that_restores_size_and_mtime_is_not_decoded(sqlite_store, home):
    """Same size, mtime put back with utime: only ctime tells; the file is hashed and left out."""
    from pipeline.datasets.build import process

    image_lake(home, per_class=3)
    target = home / "lake" / "pets" / "cat" / "001.jpg"
    shard = _scan_and_plan(home, sqlite_store)
    st = target.stat()
    data = bytearray(target.read_bytes())
    data[-3] ^= 0xFF  # inside the entropy-coded data: still a JPEG of the same size
    target.write_bytes(bytes(data))
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert target.stat().st_size == st.st_size and target.stat().st_mtime_ns == st.st_mtime_ns
    ref = process(shard, store=sqlite_store)
    planned = {f.path: f.md5 for f in shard.files}
    assert ref.decoded == 5
    assert planned["pets/cat/001.jpg"] not in _segment_md5s(home, ref)


def test_a_touched_file_is_hashed_and_still_decoded(sqlite_store, home):
    from pipeline.datasets.build import process

    image_lake(home, per_class=3)
    shard = _scan_and_plan(home, sqlite_store)
    target = home / "lake" / "pets" / "dog" / "002.jpg"
    os.utime(target, ns=(target.stat().st_atime_ns, target.stat().st_mtime_ns + 10**9))
    ref = process(shard, store=sqlite_store)
    assert ref.decoded == 6 and ref.segment_id == shard.segment_id


def test_a_file_rescanned_with_new_content_is_not_taken_for_the_planned_md5(store, home):
    """After the plan, the file is rewritten and a rescan records its new md5 with its new
    key: the stat key now matches the ledger, but for another md5 than the shard's."""
    from pipeline.datasets.build import process
    from pipeline.lake.scan import scan

    image_lake(home, per_class=3)
    shard = _scan_and_plan(home, store)
    write_jpeg(home / "lake" / "pets" / "cat" / "000.jpg", seed=777)
    scan(home / "lake", dataset="pets", store=store)
    ref = process(shard, store=store)
    assert ref.decoded == 5 and ref.segment_id != shard.segment_id


def test_trusted_and_hashed_decodes_write_the_same_segment(sqlite_store, home, tmp_path):
    """A file decoded on its stat key gives the bytes the md5-checked path gives: the same
    segment files, byte for byte, as process on a lake whose every key changed (touched)."""
    from pipeline.datasets.build import process

    image_lake(home, per_class=4)
    shard = _scan_and_plan(home, sqlite_store)
    trusted = process(shard, store=sqlite_store, data_root=tmp_path / "trusted")
    for p in (home / "lake" / "pets").rglob("*.jpg"):
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    hashed = process(shard, store=sqlite_store, data_root=tmp_path / "hashed")
    assert trusted.decoded == hashed.decoded == 8 and trusted.segment_id == hashed.segment_id
    a, b = tmp_path / "trusted" / trusted.path, tmp_path / "hashed" / hashed.path
    for name in ("x.npy", "y.npy", "segment.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert np.load(a / "x.npy").shape == (8, 3, 16, 16)

"""Change detection, skip rules and safety of the ledger scan, on SQLite and PostgreSQL."""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import select

from pipeline.lake.scan import ScanBusyError, scan
from pipeline.metadata.ledger import LedgerFile, Scan
from tests.lake.conftest import backdate, tree_fingerprint, write


def rows(store) -> dict[str, LedgerFile]:
    with store.session() as s:
        return {r.path: r for r in s.scalars(select(LedgerFile))}


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def test_new_file_is_hashed_and_recorded(store, lake):
    write(lake / "ds" / "a.bin", b"alpha")
    result = scan(lake, store=store, workers=1)
    assert [c.path for c in result.new] == ["ds/a.bin"]
    assert result.new[0].md5 == md5(b"alpha")
    row = rows(store)["ds/a.bin"]
    assert (row.dataset, row.md5, row.status, row.size) == ("ds", md5(b"alpha"), "ok", 5)
    assert result.bytes_hashed == 5


_opened: list[str] = []
_listed: list[str] = []


def _audit(event: str, args: tuple) -> None:
    # ("open", (path, mode, flags)): a folder opened to be listed (O_DIRECTORY, read-only) is
    # not a file read; it is kept apart so that the test can check it is nothing more.
    if event == "open" and isinstance(args[0], str):
        flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
        if flags & os.O_DIRECTORY and flags & (os.O_WRONLY | os.O_RDWR) == 0:
            _listed.append(args[0])
        else:
            _opened.append(args[0])


sys.addaudithook(_audit)


def test_unchanged_files_are_not_opened(store, lake):
    for i in range(5):
        write(lake / "ds" / f"{i}.bin", f"file {i}")
    scan(lake, store=store, workers=1)
    _opened.clear()
    _listed.clear()
    result = scan(lake, store=store, workers=1)
    assert result.unchanged == 5 and not result.has_content_changes and result.bytes_hashed == 0
    assert not [p for p in _opened if p.startswith(str(lake))]
    # Only the dataset folder was opened, to be listed: none of its files.
    root = os.path.realpath(lake)
    assert [p for p in _listed if p.startswith(root)] == [os.path.join(root, "ds")]


def test_same_size_modification_is_a_change(store, lake):
    f = write(lake / "ds" / "a.bin", b"aaaa")
    scan(lake, store=store, workers=1)
    f.write_bytes(b"bbbb")
    backdate(f, 10)
    result = scan(lake, store=store, workers=1)
    assert [(c.path, c.previous_md5, c.md5) for c in result.changed] == [
        ("ds/a.bin", md5(b"aaaa"), md5(b"bbbb"))
    ]


def test_rewrite_with_restored_mtime_is_caught_by_ctime(store, lake):
    f = write(lake / "ds" / "a.bin", b"aaaa")
    before = f.stat()
    scan(lake, store=store, workers=1)
    time.sleep(0.01)
    f.write_bytes(b"cccc")
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert f.stat().st_mtime_ns == before.st_mtime_ns and f.stat().st_size == before.st_size
    result = scan(lake, store=store, workers=1)
    assert [c.md5 for c in result.changed] == [md5(b"cccc")]


def test_deleted_file_is_marked_and_its_row_kept(store, lake):
    f = write(lake / "ds" / "a.bin", b"aaaa")
    write(lake / "ds" / "b.bin", b"bbbb")
    scan(lake, store=store, workers=1)
    f.unlink()
    result = scan(lake, store=store, workers=1)
    assert [c.path for c in result.deleted] == ["ds/a.bin"]
    row = rows(store)["ds/a.bin"]
    assert row.deleted_at is not None and row.md5 == md5(b"aaaa")
    again = scan(lake, store=store, workers=1)
    assert not again.deleted, "a deleted file is reported once"


def test_rename_is_recognised_by_md5(store, lake):
    f = write(lake / "ds" / "old name.bin", b"same bytes")
    scan(lake, store=store, workers=1)
    f.rename(lake / "ds" / "new name.bin")
    result = scan(lake, store=store, workers=1)
    assert [(c.path, c.renamed_from) for c in result.renamed] == [
        ("ds/new name.bin", "ds/old name.bin")
    ]
    assert not result.new and not result.deleted
    assert rows(store)["ds/old name.bin"].deleted_at is not None


def test_touch_rehashes_but_records_no_content_change(store, lake):
    f = write(lake / "ds" / "a.bin", b"aaaa")
    scan(lake, store=store, workers=1)
    changed_at = rows(store)["ds/a.bin"].content_changed_at
    backdate(f, 5)  # a new mtime, same bytes
    result = scan(lake, store=store, workers=1)
    assert [c.path for c in result.touched] == ["ds/a.bin"]
    assert result.bytes_hashed == 4 and not result.has_content_changes
    assert rows(store)["ds/a.bin"].content_changed_at == changed_at


def test_files_within_the_settle_window_wait_for_a_later_scan(store, lake):
    f = lake / "ds" / "fresh.bin"
    f.parent.mkdir(parents=True)
    f.write_bytes(b"still copying")
    result = scan(lake, store=store, settle_seconds=60, workers=1)
    assert result.settling == 1 and "ds/fresh.bin" not in rows(store)
    backdate(f, 120)
    result = scan(lake, store=store, settle_seconds=60, workers=1)
    assert [c.path for c in result.new] == ["ds/fresh.bin"]


def test_a_known_file_being_rewritten_is_not_taken_for_deleted(store, lake):
    f = write(lake / "ds" / "a.bin", b"v1")
    scan(lake, store=store, settle_seconds=60, workers=1)
    f.write_bytes(b"v2 in progress")
    result = scan(lake, store=store, settle_seconds=60, workers=1)
    assert result.settling == 1 and not result.deleted and not result.changed
    assert rows(store)["ds/a.bin"].deleted_at is None


def test_ignore_rules(store, lake):
    write(lake / "ds" / "keep.bin", b"k")
    write(lake / "ds" / ".hidden", b"h")
    write(lake / "ds" / "upload.tmp", b"t")
    write(lake / "ds" / "upload.part", b"p")
    write(lake / "ds" / "_staging" / "x.bin", b"x")
    write(lake / "ds" / ".git" / "config", b"c")
    write(lake / ".hiddends" / "y.bin", b"y")
    result = scan(lake, store=store, workers=1)
    assert set(rows(store)) == {"ds/keep.bin"}
    assert [c.path for c in result.new] == ["ds/keep.bin"]


def test_symlink_escaping_the_lake_is_refused_and_inside_links_followed(store, lake, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("outside")
    write(lake / "ds" / "real.bin", b"real")
    (lake / "ds" / "escape.bin").symlink_to(outside)
    (lake / "ds" / "alias.bin").symlink_to(lake / "ds" / "real.bin")
    result = scan(lake, store=store, workers=1)
    assert result.refused == [("ds/escape.bin", "symlink target lies outside the lake")]
    got = rows(store)
    assert got["ds/escape.bin"].status == "refused" and got["ds/escape.bin"].md5 is None
    assert got["ds/alias.bin"].md5 == md5(b"real")


def test_special_files_are_refused(store, lake):
    (lake / "ds").mkdir()
    os.mkfifo(lake / "ds" / "pipe")
    result = scan(lake, store=store, workers=1)
    assert result.refused == [("ds/pipe", "special file (fifo), not a regular file")]
    assert rows(store)["ds/pipe"].status == "refused"


def test_a_file_deleted_during_the_scan_is_recorded_and_does_not_stop_it(store, lake):
    doomed = write(lake / "ds" / "doomed.bin", b"d")
    write(lake / "ds" / "fine.bin", b"f")
    # on_total runs after the walk and before hashing: the file vanishes in between.
    result = scan(lake, store=store, workers=1, on_total=lambda n: doomed.unlink())
    assert result.unreadable == [("ds/doomed.bin", "vanished during the scan")]
    assert [c.path for c in result.new] == ["ds/fine.bin"]
    assert rows(store)["ds/doomed.bin"].status == "unreadable"
    again = scan(lake, store=store, workers=1)
    assert [c.path for c in again.deleted] == ["ds/doomed.bin"]


UNREADABLE_SCRIPT = """
import glob, os, sys, json
from pathlib import Path
from pipeline.lake.scan import scan
from pipeline.metadata.store import MetadataStore
from pipeline.settings import get_settings
get_settings()
store = MetadataStore(sys.argv[2])  # migrated (and every import done) while still root
for f in glob.glob(sys.argv[3] + "*"):
    os.chmod(f, 0o666)
os.setgid(65534); os.setuid(65534)
r = scan(Path(sys.argv[1]), store=store, workers=1)
print(json.dumps({"unreadable": r.unreadable, "new": [c.path for c in r.new]}))
"""


def test_an_unreadable_file_is_recorded_and_does_not_stop_the_scan(tmp_path):
    """Permissions are real: as root the scan runs in a child that drops to 'nobody'."""
    import json
    import subprocess

    root = Path(os.environ.get("TMPDIR", "/tmp")) / f"lt-perm-{os.getpid()}-{time.time_ns()}"
    lake = root / "lake"
    write(lake / "ds" / "locked.bin", b"no entry")
    write(lake / "ds" / "open.bin", b"welcome")
    (lake / "ds" / "locked.bin").chmod(0o000)
    for d in (root, lake, lake / "ds"):
        d.chmod(0o777)
    (lake / "ds" / "open.bin").chmod(0o644)
    url = f"sqlite:///{root / 'meta.db'}"
    env = {
        **os.environ,
        "SETTLE_SECONDS": "0",
        "LAKETRAIN_HOME": str(root),
        "PYTHONPATH": os.getcwd(),
    }
    try:
        if os.geteuid() != 0:
            pytest.skip("needs root to drop privileges")
        out = subprocess.run(
            [sys.executable, "-c", UNREADABLE_SCRIPT, str(lake), url, str(root / "meta.db")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=root,
        )
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout.strip().splitlines()[-1])
        assert data["new"] == ["ds/open.bin"]
        assert data["unreadable"][0][0] == "ds/locked.bin"
        assert "PermissionError" in data["unreadable"][0][1]
    finally:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


def test_unicode_names_spaces_and_nested_folders(store, lake):
    names = [
        "ds/über café/naïve 1.bin",
        "ds/a/b/c/d/deep.bin",
        "ds/日本語/ファイル.bin",
        "ds/with space .bin",
    ]
    for i, name in enumerate(names):
        write(lake / name, f"payload {i}")
    result = scan(lake, store=store, workers=1)
    assert sorted(c.path for c in result.new) == sorted(names)
    assert scan(lake, store=store, workers=1).unchanged == len(names)


def test_the_process_pool_hashes_like_a_plain_loop(store, lake):
    payloads = {f"ds/{i:03d}.bin": os.urandom(1000 + i) for i in range(150)}
    for name, data in payloads.items():
        write(lake / name, data)
    result = scan(lake, store=store, workers=2)
    assert {c.path: c.md5 for c in result.new} == {k: md5(v) for k, v in payloads.items()}


def test_scan_of_one_dataset_leaves_the_others_alone(store, lake):
    write(lake / "a" / "1.bin", b"1")
    write(lake / "b" / "2.bin", b"2")
    scan(lake, store=store, workers=1)
    (lake / "b" / "2.bin").unlink()
    write(lake / "a" / "3.bin", b"3")
    result = scan(lake, dataset="a", store=store, workers=1)
    assert [c.path for c in result.new] == ["a/3.bin"] and not result.deleted
    assert rows(store)["b/2.bin"].deleted_at is None


def test_the_lake_is_never_modified(store, lake, tmp_path):
    write(lake / "ds" / "a.bin", b"a")
    write(lake / "ds" / "b.tmp", b"b")
    (lake / "ds" / "link").symlink_to(tmp_path)
    os.mkfifo(lake / "ds" / "fifo")
    before = tree_fingerprint(lake)
    scan(lake, store=store, workers=2)
    scan(lake, store=store, workers=2)
    assert tree_fingerprint(lake) == before


def test_a_second_concurrent_scan_waits_or_refuses(store, lake):
    for i in range(3):
        write(lake / "ds" / f"{i}.bin", f"{i}")
    inside, release = threading.Event(), threading.Event()
    first: dict[str, object] = {}

    def slow_scan() -> None:
        def hold(n: int) -> None:
            inside.set()
            release.wait(30)

        first["result"] = scan(lake, store=store, workers=1, on_total=hold)

    t = threading.Thread(target=slow_scan)
    t.start()
    assert inside.wait(30)
    with pytest.raises(ScanBusyError, match="another scan"):
        scan(lake, store=store, workers=1, wait=False)

    second: dict[str, object] = {}
    waiter = threading.Thread(
        target=lambda: second.setdefault("result", scan(lake, store=store, workers=1))
    )
    waiter.start()
    time.sleep(0.5)
    assert waiter.is_alive(), "the waiting scan must block while the first holds the lock"
    release.set()
    t.join(30)
    waiter.join(30)
    assert len(first["result"].new) == 3
    assert second["result"].unchanged == 3 and not second["result"].new, (
        "it sees the first scan's result"
    )
    with store.session() as s:
        assert s.scalar(select(Scan).where(Scan.id == first["result"].scan_id)).new == 3


def test_scan_records_a_summary_row(store, lake):
    write(lake / "ds" / "a.bin", b"a")
    result = scan(lake, store=store, workers=1)
    with store.session() as s:
        row = s.get(Scan, result.scan_id)
        assert (row.new, row.unchanged, row.bytes_hashed) == (1, 0, 1)
        assert row.finished_at is not None

"""A large lake's walk split over processes (pipeline.lake.walk_split) says what the single walk
says: on the random trees of the walk's equivalence test, with ledger rows in every share's
range and in none, and through a whole scan on both backends, including a share's process
killed for real."""

from __future__ import annotations

import hashlib
import os
import signal

import pytest
from sqlalchemy import select

from pipeline.lake import ledger_keys, walk, walk_split
from pipeline.lake.scan import scan
from pipeline.lake.walk import FastPath, walk_lake
from pipeline.metadata.ledger import LedgerFile
from tests.lake.conftest import write
from tests.lake.test_walk_equivalence import SETTLE_S, _fields, make_tree


@pytest.fixture
def always_split(monkeypatch):
    """Split every walk with a ledger, however small; count the share processes forked."""
    monkeypatch.setattr(walk, "SPLIT_MIN_KNOWN", 1)
    forked: list[int] = []
    fork = walk_split._fork

    def counting_fork(*args, **kwargs):
        child = fork(*args, **kwargs)
        forked.append(child.pid)
        return child

    monkeypatch.setattr(walk_split, "_fork", counting_fork)
    return forked


def _tree(base, seed):
    """The equivalence test's random tree, with at least three subfolders to share out."""
    lake, known = make_tree(base, seed)
    for extra in ("ds/m1/f.png", "ds/m2/g.png", "ds/m2/h.png"):
        write(lake / extra, extra)
    st = (lake / "ds/m2/g.png").stat()
    known["ds/m2/g.png"] = ("ds/m2/g.png", st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, 0)
    return lake, known


def _walk(lake, known, shares):
    fast = FastPath(dict(known))
    entries = list(walk_lake(lake, settle_seconds=SETTLE_S, fast=fast, shares=shares))
    return {
        "entries": sorted([type(e).__name__, *map(str, _fields(e))] for e in entries),
        "unchanged": fast.unchanged,
        "stale": sorted(fast.stale.items()),
        "left": sorted(fast.known.items()),
        "escapable": sorted(fast.matched_escapable),
    }


# Ledger rows of no folder the walk meets: before, between and after the shares' ranges, under
# a vanished folder and a vanished dataset, and beside a subfolder's name ("ds/sub.png" sorts
# before "ds/sub/...").
GONE = ["aaa/x.png", "cats/zz_gone/y.png", "ds/gone/z.png", "ds/sub.png", "ds/sub0/q.png"]
GONE += ["ds/subz/w.png", "zzz_gone/a.png", "ds/\\xfe/b.png"]


@pytest.mark.parametrize("shares", [2, 3])
@pytest.mark.parametrize("seed", range(12))
def test_the_split_walk_says_what_the_single_walk_says(tmp_path, always_split, seed, shares):
    lake, known = _tree(tmp_path, seed)
    for path in GONE:
        known[path] = (path, 1, 1, 1, 1, 0)
    single = _walk(lake, known, 1)
    assert not always_split
    split = _walk(lake, known, shares)
    assert split == single
    assert always_split, "no share was walked in a process of its own"
    assert {p for p, _ in split["left"]} >= set(GONE)


def test_a_small_ledger_is_walked_in_one_process(tmp_path, monkeypatch):
    lake, known = _tree(tmp_path, 3)
    monkeypatch.setattr(walk, "SPLIT_MIN_KNOWN", len(known) + 1)
    monkeypatch.setattr(walk_split, "walk_split", None)  # would fail if called
    assert _walk(lake, known, 2)["entries"]


def _md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


def _lake(lake):
    for c in range(6):
        for i in range(5):
            write(lake / "ds" / f"c{c}" / f"{i}.bin", f"class {c} file {i}")
    write(lake / "ds" / "root.bin", b"at the dataset's root")
    write(lake / "other" / "k" / "o.bin", b"another dataset")


def _ledger(store) -> dict[str, tuple]:
    with store.session() as s:
        return {
            r.path: (r.md5, r.status, r.deleted_at is None) for r in s.scalars(select(LedgerFile))
        }


def test_a_split_scan_records_every_kind_of_change(store, lake, always_split):
    _lake(lake)
    first = scan(lake, store=store, workers=2)
    assert len(first.new) == 32 and always_split == []  # an empty ledger: one process
    write(lake / "ds" / "c0" / "new.bin", b"new in share 0")
    write(lake / "ds" / "c5" / "new.bin", b"new in the last share")
    write(lake / "ds" / "c1" / "0.bin", b"changed")
    (lake / "ds" / "c4" / "1.bin").unlink()
    for i in range(5):
        (lake / "ds" / "c3" / f"{i}.bin").unlink()
    (lake / "ds" / "c3").rmdir()  # a whole folder gone
    os.rename(lake / "ds" / "c2" / "2.bin", lake / "ds" / "c5" / "moved.bin")  # across shares
    write(lake / "ds" / "c5" / "4.bin", "class 5 file 4")  # same bytes, new stat key
    write(lake / "ds" / "c5" / "bad.tmp", b"ignored")

    result = scan(lake, store=store, workers=2)

    assert len(always_split) == 1  # two shares: one child, share 0 walked here
    assert sorted(c.path for c in result.new) == ["ds/c0/new.bin", "ds/c5/new.bin"]
    assert [(c.path, c.previous_md5) for c in result.changed] == [
        ("ds/c1/0.bin", _md5(b"class 1 file 0"))
    ]
    assert [(c.path, c.renamed_from) for c in result.renamed] == [
        ("ds/c5/moved.bin", "ds/c2/2.bin")
    ]
    assert sorted(c.path for c in result.deleted) == ["ds/c3/0.bin", "ds/c3/1.bin"] + [
        "ds/c3/2.bin",
        "ds/c3/3.bin",
        "ds/c3/4.bin",
        "ds/c4/1.bin",
    ]
    assert [c.path for c in result.touched] == ["ds/c5/4.bin"]
    assert result.unchanged == 32 - 1 - 1 - 5 - 1 - 1  # changed, deleted, c3, moved, touched
    ledger = _ledger(store)
    assert ledger["ds/c3/0.bin"][2] is False and ledger["ds/c2/2.bin"][2] is False
    assert ledger["ds/c5/moved.bin"] == (_md5(b"class 2 file 2"), "ok", True)

    again = scan(lake, store=store, workers=2)
    assert not again.has_content_changes and again.unchanged == 28 and not again.touched


def test_a_split_scan_of_one_dataset_leaves_the_others_alone(store, lake, always_split):
    _lake(lake)
    scan(lake, store=store, workers=2)
    write(lake / "ds" / "c4" / "new.bin", b"new in ds")
    write(lake / "other" / "k" / "new.bin", b"new in other")
    (lake / "ds" / "c0" / "0.bin").unlink()

    result = scan(lake, dataset="ds", store=store, workers=2)

    assert len(always_split) == 1
    assert [c.path for c in result.new] == ["ds/c4/new.bin"]
    assert [c.path for c in result.deleted] == ["ds/c0/0.bin"]
    assert result.unchanged == 31 - 1  # ds: 30 class files and its root file, one gone
    assert "other/k/new.bin" not in _ledger(store)


def test_no_more_walking_processes_than_cores(tmp_path, always_split, monkeypatch):
    lake, known = _tree(tmp_path, 2)
    for i in range(6):
        write(lake / "ds" / f"extra{i}" / "f.png", b"x")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    single = _walk(lake, known, 1)
    assert _walk(lake, known, 8) == single
    assert len(always_split) == 1  # two cores: share 0 here, one child


def test_a_share_killed_mid_walk_fails_the_scan_and_records_nothing(
    store, lake, always_split, monkeypatch
):
    _lake(lake)
    scan(lake, store=store, workers=2)
    before = _ledger(store)
    write(lake / "ds" / "c5" / "new.bin", b"new")
    (lake / "ds" / "c4" / "1.bin").unlink()

    def die(*args, **kwargs):  # runs in the forked share process
        os.kill(os.getpid(), signal.SIGKILL)

    monkeypatch.setattr(walk_split, "_walk_share", die)
    with pytest.raises(walk_split.WalkShareError, match="killed by signal 9"):
        scan(lake, store=store, workers=2)
    assert _ledger(store) == before
    for pid in always_split:  # reaped: no zombie left behind
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)

    monkeypatch.undo()
    result = scan(lake, store=store, workers=2)
    assert [c.path for c in result.new] == ["ds/c5/new.bin"]
    assert [c.path for c in result.deleted] == ["ds/c4/1.bin"]


def test_an_error_in_a_share_is_raised_here(tmp_path, always_split, monkeypatch):
    lake, known = _tree(tmp_path, 5)

    def fail(*args, **kwargs):
        raise PermissionError(13, "Permission denied", "ds/sub")

    monkeypatch.setattr(walk_split, "_walk_share", fail)
    with pytest.raises(PermissionError, match="Permission denied"):
        _walk(lake, known, 2)


def test_a_walk_closed_early_kills_and_reaps_its_shares(tmp_path, always_split, monkeypatch):
    lake, known = _tree(tmp_path, 7)
    entries = walk_lake(lake, settle_seconds=SETTLE_S, fast=FastPath(dict(known)), shares=3)
    for _entry in entries:  # up to share 0's first entry: the other shares are walking
        if always_split:
            break
    assert always_split
    entries.close()
    for pid in always_split:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


# Folder names whose code-point order (the walk's) differs from a locale's: case, punctuation,
# spaces, accents. "B" sorts before "a" by code point, after it in ICU's root collation.
AWKWARD = ["B", "a", "a b", "a-b", "a.b", "aB", "b", "Z", "é", "e", "z~"]


def _icu_collated(store) -> None:
    """On PostgreSQL, give the ledger's path column a locale's collation (ICU's root), as a
    database created with a locale would: its order is no longer the walk's."""
    from sqlalchemy import text

    if store.url.startswith("postgresql"):
        with store.session() as s:
            s.execute(
                text(
                    "ALTER TABLE ledger_files ALTER COLUMN path TYPE VARCHAR(4096) "
                    'COLLATE "und-x-icu"'
                )
            )
            s.commit()


def test_each_share_reads_exactly_the_keys_it_owns(store, lake):
    """LedgerTx.load_keys(where=...) in SQL selects what PathRange.select selects in Python,
    and the shares' ranges partition the ledger, whatever the database's collation."""
    from pipeline.lake.ledger_db import store_transaction

    _icu_collated(store)
    for name in AWKWARD:
        write(lake / "ds" / name / "f.bin", f"in {name}")
        write(lake / "ds" / name / "deeper" / "g.bin", f"deeper in {name}")
    write(lake / "ds" / "top.bin", b"the dataset's own file")
    scan(lake, store=store, workers=1)
    with store_transaction(store) as tx:
        every = tx.load_keys("ds")
        tops = [(str(lake / "ds"), "ds")]
        for shares in (2, 3, 4):
            cut = walk_split._cut(walk_split._subfolders(tops), shares)
            got = [tx.load_keys("ds", share.range) for share in cut]
            assert got == [share.range.select(every) for share in cut]
            assert sorted(p for keys in got for p in keys) == sorted(every)  # each row once


def test_a_split_scan_reads_its_keys_in_each_process(store, lake, always_split, monkeypatch):
    """The scan's walk with a store another process can open: each share process reads its
    own range of keys on its own connection (none is left in the scanning process), and the
    scan records what a one-process scan records, on a locale-collated column too."""
    _icu_collated(store)
    for name in AWKWARD:
        for i in range(3):
            write(lake / "ds" / name / f"{i}.bin", f"{name} {i}")
    scan(lake, store=store, workers=1)
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    always_split.clear()
    loads_here: list[object] = []
    load = ledger_keys.LedgerKeys.load

    def recording(self, where=None):
        loads_here.append(where)  # called here only: the children read through load_apart
        return load(self, where)

    monkeypatch.setattr(ledger_keys.LedgerKeys, "load", recording)
    for name in AWKWARD[::2]:
        (lake / "ds" / name / "0.bin").unlink()
        write(lake / "ds" / name / "new.bin", f"new in {name}")

    result = scan(lake, store=store, workers=3)

    assert len(always_split) == 2  # three shares: two children
    assert [(w.first, w.high is not None) for w in loads_here] == [(True, True)]  # share 0's
    assert sorted(c.path for c in result.deleted) == sorted(f"ds/{n}/0.bin" for n in AWKWARD[::2])
    assert sorted(c.path for c in result.new) == sorted(f"ds/{n}/new.bin" for n in AWKWARD[::2])
    assert result.unchanged == 3 * len(AWKWARD) - len(AWKWARD[::2])
    again = scan(lake, store=store, workers=3)
    assert not again.has_content_changes and again.unchanged == 3 * len(AWKWARD)


def test_a_dataset_of_one_subfolder_reads_every_key_here(store, lake, always_split):
    """With the keys read by the walk and a single subfolder to share out, nothing is forked:
    this process reads every key (none is missed, none is reported twice)."""
    for i in range(4):
        write(lake / "ds" / "only" / f"{i}.bin", f"file {i}")
    write(lake / "ds" / "root.bin", b"at the dataset's root")
    scan(lake, store=store, workers=2)
    (lake / "ds" / "only" / "0.bin").unlink()
    (lake / "ds" / "root.bin").unlink()
    write(lake / "ds" / "only" / "new.bin", b"new")

    result = scan(lake, store=store, workers=2)

    assert always_split == []
    assert sorted(c.path for c in result.deleted) == ["ds/only/0.bin", "ds/root.bin"]
    assert [c.path for c in result.new] == ["ds/only/new.bin"] and result.unchanged == 3

"""The walk's verdicts against a plain reference walk on random trees.

``walk_lake`` is the hot loop of every scan and is tuned for speed (one d_type check per
file, the fast path inside it); the reference below says the same rules the slow, obvious way
(an lstat per entry, recursion, the ignore rules of ``is_ignored_name``). On random trees with
ignored names, names that are not UTF-8, symlinks of every kind, a fifo, files still settling
and a ledger of matching, moved, untrusted and vanished rows, both must yield the same entries
in the same order (the order is the scan's: a folder's files in listing order, then its
subfolders, the last listed first) and leave the FastPath in the same state. Folders that
cannot be listed or whose files cannot be stat'ed are made for real: as root, in a child that
drops to 'nobody'.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pipeline.lake.walk import (
    NOT_UTF8_REASON,
    Candidate,
    FastPath,
    Refused,
    Settling,
    StatKey,
    Unlistable,
    escape_path,
    is_ignored_name,
    is_utf8,
    walk_lake,
)

SETTLE_S = 60.0  # files written now settle; back-dated ones (an hour) do not
FILE_NAMES = [
    "a.png",
    "b.bin",
    ".hidden.png",
    "c.tmp",
    "d.part",
    "_under.png",
    "über café.png",
    "back\\slash.png",
    "x.tmp.png",
    os.fsdecode(b"bad\xff.png"),
]
DIR_NAMES = ["sub", "deep", ".git", "_cache", "x.tmp", "ünï", os.fsdecode(b"dir\xfe")]


def reference_walk(lake: Path, settle_seconds: float, fast: FastPath) -> list[object]:
    root = os.path.realpath(lake)
    now = time.time_ns()
    out: list[object] = []

    def visit(folder: str, rel: str) -> None:
        try:
            listed = list(os.scandir(folder))  # the listing's own order
        except OSError as exc:
            out.append(Unlistable(escape_path(rel), f"cannot list folder: {exc.strerror or exc}"))
            return
        subfolders = []
        for entry in listed:
            name = entry.name
            path, relpath = os.path.join(folder, name), f"{rel}/{name}"
            # What an entry is comes from the listing: a subfolder of a folder that can be
            # listed but not searched is still a folder (unlistable), not a file to refuse.
            try:
                is_link = entry.is_symlink()
                is_dir = not is_link and entry.is_dir(follow_symlinks=False)
            except OSError as exc:
                out.append(Refused(escape_path(relpath), f"cannot stat: {exc.strerror or exc}"))
                continue
            if is_dir:
                if not is_ignored_name(name, is_dir=True):
                    subfolders.append((path, relpath))
                continue
            if is_ignored_name(name, is_dir=False):
                continue
            if not (is_utf8(rel) and is_utf8(name)):
                out.append(Refused(escape_path(relpath), NOT_UTF8_REASON))
                continue
            try:
                if is_link:
                    target = os.path.realpath(path)
                    if os.path.commonpath([root, target]) != root:
                        out.append(Refused(relpath, "symlink target lies outside the lake"))
                        continue
                    if not os.path.exists(target):
                        out.append(Refused(relpath, "dangling symlink"))
                        continue
                    if os.path.isdir(target):
                        out.append(Refused(relpath, "symlink to a folder is not followed"))
                        continue
                    st = os.stat(path)
                else:
                    st = os.lstat(path)
            except FileNotFoundError:
                continue
            except OSError as exc:
                out.append(Refused(escape_path(relpath), f"cannot stat: {exc.strerror or exc}"))
                continue
            if not stat.S_ISREG(st.st_mode):
                kind = "fifo" if stat.S_ISFIFO(st.st_mode) else "?"
                out.append(Refused(relpath, f"special file ({kind}), not a regular file"))
                continue
            row = fast.known.pop(relpath, None)
            if now - st.st_mtime_ns < settle_seconds * 1e9:
                out.append(Settling(relpath))
                continue
            key = StatKey(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
            if row is not None and tuple(row[1:5]) == key:
                fast.unchanged += 1
                if "\\" in relpath:
                    fast.matched_escapable.add(relpath)
                continue
            if row is not None:
                fast.stale[relpath] = row
            out.append(Candidate(relpath, path, key))
        for path, relpath in reversed(subfolders):  # the walk's stack pops the last first
            visit(path, relpath)

    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        is_dir = entry.is_dir(follow_symlinks=False)
        if is_ignored_name(entry.name, is_dir=is_dir):
            continue
        if is_dir:
            visit(entry.path, entry.name)
        else:
            out.append(
                Refused(escape_path(entry.name), "not inside a dataset folder (lake/<dataset>/...)")
            )
    return out


def make_tree(base: Path, seed: int) -> tuple[Path, dict[str, tuple]]:
    """A random lake under ``base`` and a ledger for it: ``path -> load_keys row``."""
    rng = random.Random(seed)
    lake, outside = base / "lake", base / "outside.png"
    base.mkdir(parents=True, exist_ok=True)
    outside.write_bytes(b"not in the lake")
    old = time.time() - 3600
    files: list[Path] = []

    def fill(folder: Path, depth: int) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in rng.sample(FILE_NAMES, rng.randint(1, len(FILE_NAMES))):
            path = folder / name
            path.write_bytes(os.urandom(rng.randint(0, 64)))
            if rng.random() < 0.85:
                os.utime(path, (old, old))  # else it was written now: still settling
            files.append(path)
        if depth < 3:
            for name in rng.sample(DIR_NAMES, rng.randint(0, 3)):
                fill(folder / name, depth + 1)

    for dataset in rng.sample(["ds", "cats", "_scratch", ".trash"], 3):
        fill(lake / dataset, 1)
    (lake / "stray.png").write_bytes(b"top level")
    folders = [Path(d) for d, _, _ in os.walk(lake) if os.path.realpath(d) != str(lake)]
    for i in range(rng.randint(2, 6)):
        where = rng.choice(folders) / f"link{i}.png"
        target = rng.choice(
            [rng.choice(files), rng.choice(folders), outside, lake / "ds" / "nowhere.png"]
        )
        where.symlink_to(target if rng.random() < 0.5 else os.path.relpath(target, where.parent))
    if rng.random() < 0.5:
        os.mkfifo(rng.choice(folders) / "pipe.png")

    known: dict[str, tuple] = {}
    for path in files:
        rel = path.relative_to(lake).as_posix()
        if not is_utf8(rel) or rng.random() < 0.3:
            continue
        st = path.stat()
        key = [rel, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, 0]
        what = rng.random()
        if what < 0.15:
            key[1] += 1  # the file moved on since: a stale row
        elif what < 0.25:
            key[1] = -1  # a row the fast path must not trust
        known[rel] = tuple(key)
    known["ds/vanished.png"] = ("ds/vanished.png", 1, 1, 1, 1, 0)
    known["ds/deleted.png"] = ("ds/deleted.png", -1, 1, 1, 1, 1)
    return lake, known


def compare(lake: Path, known: dict[str, tuple]) -> dict[str, object]:
    """Both walks over ``lake``; what each yielded and left in its FastPath, as JSON."""

    def run(walk) -> dict[str, object]:
        fast = FastPath(dict(known))
        entries = walk(fast)
        return {
            "entries": [[type(e).__name__, *_fields(e)] for e in entries],
            "unchanged": fast.unchanged,
            "stale": sorted(fast.stale),
            "left": sorted(fast.known),
            "escapable": sorted(fast.matched_escapable),
        }

    return {
        "walk": run(lambda fast: list(walk_lake(lake, settle_seconds=SETTLE_S, fast=fast))),
        "reference": run(lambda fast: reference_walk(lake, SETTLE_S, fast)),
    }


def _fields(entry: object) -> list[object]:
    if isinstance(entry, Candidate):
        return [entry.path, entry.abspath, list(entry.key)]
    return [entry.path, getattr(entry, "reason", None)]


@pytest.mark.parametrize("seed", range(40))
def test_the_walk_says_what_the_reference_walk_says(tmp_path, seed):
    lake, known = make_tree(tmp_path, seed)
    both = compare(lake, known)
    assert both["walk"] == both["reference"]


def test_the_random_trees_cover_every_verdict(tmp_path):
    seen: set[str] = set()
    for seed in range(40):
        lake, known = make_tree(tmp_path / str(seed), seed)
        walked = compare(lake, known)["walk"]
        seen |= {e[0] if e[0] != "Refused" else e[2].split(" (")[0] for e in walked["entries"]}
        if walked["stale"]:
            seen.add("stale")
        if walked["escapable"]:
            seen.add("escapable")
    assert {
        "Candidate",
        "Settling",
        "not inside a dataset folder",
        NOT_UTF8_REASON.split(" (")[0],
        "symlink target lies outside the lake",
        "dangling symlink",
        "symlink to a folder is not followed",
        "special file",
        "stale",
        "escapable",
    } <= seen


_CHILD = """
import json, os, sys
from pathlib import Path
from tests.lake.test_walk_equivalence import compare
lake, known = Path(sys.argv[1]), json.loads(sys.argv[2])
if os.geteuid() == 0:
    os.setgid(65534); os.setuid(65534)
print(json.dumps(compare(lake, {k: tuple(v) for k, v in known.items()})))
"""


@pytest.mark.parametrize("seed", range(4))
def test_folders_that_cannot_be_listed_or_stat_ed_match_too(seed):
    """Real permissions: a folder with no read bit cannot be listed, one with no search bit
    lists but its files cannot be stat'ed. As root the walks run as 'nobody'."""
    base = Path(os.environ.get("TMPDIR", "/tmp")) / f"lt-walk-{uuid.uuid4().hex}"
    try:
        lake, known = make_tree(base, seed)
        for d, _dirs, names in os.walk(base):
            os.chmod(d, 0o777)
            for name in names:
                p = os.path.join(d, name)
                if not os.path.islink(p):
                    os.chmod(p, 0o666)
        locked = {0o000: lake / "ds" / "locked", 0o333: lake / "ds" / "unlistable"}
        locked[0o444] = lake / "ds" / "unsearchable"
        for mode, folder in locked.items():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "inside.png").write_bytes(b"x")
            (folder / "inner").mkdir(exist_ok=True)
            folder.chmod(mode)
        env = {**os.environ, "PYTHONPATH": os.getcwd()}
        out = subprocess.run(
            [sys.executable, "-c", _CHILD, str(lake), json.dumps(known)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            cwd=os.getcwd(),
        )
        assert out.returncode == 0, out.stderr
        both = json.loads(out.stdout.strip().splitlines()[-1])
        assert both["walk"] == both["reference"]
        verdicts = [e for e in both["walk"]["entries"] if "/locked" in e[1] or "/uns" in e[1]]
        assert ["Unlistable", "ds/locked", "cannot list folder: Permission denied"] in verdicts
        assert [
            "Refused",
            "ds/unsearchable/inside.png",
            "cannot stat: Permission denied",
        ] in verdicts
    finally:
        for folder in (base / "lake" / "ds").glob("*"):
            if folder.is_dir() and not folder.is_symlink():
                folder.chmod(0o777)
        shutil.rmtree(base, ignore_errors=True)


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")
def test_the_walk_leaves_no_folder_open(tmp_path):
    """Each folder is listed through a descriptor held until its last stat: a walk run to the
    end, and one closed after its first entries, leave none of them open."""
    lake, known = make_tree(tmp_path, 3)
    before = _open_fds()
    entries = list(walk_lake(lake, settle_seconds=SETTLE_S, fast=FastPath(dict(known))))
    assert len(entries) > 3 and _open_fds() == before
    walk = walk_lake(lake, settle_seconds=SETTLE_S, fast=FastPath(dict(known)))
    for _ in range(3):
        next(walk)
    assert len(_open_fds()) > len(before)  # mid-folder: its descriptor is open
    walk.close()
    assert _open_fds() == before

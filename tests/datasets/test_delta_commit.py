"""The delta commit (pipeline/datasets/build/delta.py) against the full commit: two homes hold
the same lake, edited the same way (new files in every class folder, a new folder, deletions,
rewrites, duplicates across classes, near-duplicates, corrupt files), one built with delta
commits and one with full commits only. Every version must come out identical: its id, its
manifest (counts, classes, mean/std, diff, quality report, chunk tree), its metadata parts and
its invalid list. Small leaves (a 4-sample cut target) so that edits fall inside, beside and
across many leaves and nodes, forced cuts included."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.datasets.conftest import SMALL_IMAGE_RECIPE, write_jpeg, write_near_copy, write_recipe

CLASSES = ("cat", "dog", "emu")
AUGMENT = '\n[augment]\ncopies = 2\nops = ["hflip"]\n'


def _edit(lake: Path, rng: random.Random, round_: int) -> None:
    """One round of edits a team makes between two builds."""
    files = sorted(p for p in (lake / "pets").rglob("*") if p.is_file() and p.stem != "broken")
    for k in range(rng.randint(1, 6)):  # new files in several class folders
        write_jpeg(
            lake / f"pets/{rng.choice(CLASSES)}/n{round_}_{k}.jpg", seed=rng.randrange(10**6)
        )
    for p in rng.sample(files, 2):  # deletions
        p.unlink()
        files.remove(p)
    victim = rng.choice(files)  # new bytes at an old path
    write_jpeg(victim, seed=rng.randrange(10**6))
    dup = rng.choice(files)  # the same content in another class: duplicate + label conflict
    other = rng.choice([c for c in CLASSES if c != dup.parent.name])
    shutil.copyfile(dup, lake / f"pets/{other}/dup{round_}.jpg")
    write_near_copy(rng.choice(files), lake / f"pets/{rng.choice(CLASSES)}/near{round_}.png")
    if round_ == 1:
        for k in range(5):  # a new folder
            write_jpeg(lake / f"pets/fox/{k:03d}.jpg", seed=rng.randrange(10**6))
        (lake / "pets/dog/broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    if round_ == 2:
        (lake / "pets/dog/broken.jpg").unlink()
    if round_ == 3:  # a run of consecutive files gone: whole leaves emptied
        folder = sorted(p for p in files if p.parent.name == rng.choice(CLASSES))
        start = rng.randrange(max(1, len(folder) - 12))
        for p in folder[start : start + 12]:
            if p.exists():
                p.unlink()


def _edit_near(lake: Path, rng: random.Random, round_: int) -> None:
    """A round of edits among near-duplicate groups (neargroups.py grows the head's): copies
    that grow groups or start new ones, a new file, and from round 2 a grouped file moved to
    another class and one copied exactly into another (their groups read again); in round 3 a
    grouped file deleted (a group may split: the whole graph decides)."""
    files = sorted(p for p in (lake / "pets").rglob("*") if p.is_file() and p.stem != "broken")
    near = [p for p in files if p.stem.startswith("near")]
    for k in range(rng.randint(2, 4)):
        write_near_copy(
            rng.choice(near + files[:5]), lake / f"pets/{rng.choice(CLASSES)}/near{round_}_{k}.png"
        )
    write_jpeg(lake / f"pets/{rng.choice(CLASSES)}/n{round_}.jpg", seed=rng.randrange(10**6))
    if round_ == 1:
        (lake / "pets/dog/broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    if round_ >= 2 and len(near) > 1:
        moved = rng.choice(near)
        near.remove(moved)
        other = rng.choice([c for c in CLASSES if c != moved.parent.name])
        os.rename(moved, lake / f"pets/{other}/{moved.stem}_moved{moved.suffix}")
        shutil.copyfile(rng.choice(near), lake / f"pets/{other}/dup{round_}.png")
    if round_ == 3:  # a grouped content gone: a near copy whose bytes no other file holds
        files = sorted(p for p in (lake / "pets").rglob("*") if p.is_file())
        held = [p.read_bytes() for p in files]
        victim = rng.choice(
            [
                p
                for p in files
                if p.stem.startswith("near")
                and not p.stem.startswith(f"near{round_}_")  # one the head holds
                and held.count(p.read_bytes()) == 1
            ]
        )
        victim.unlink()


def _mirror(src: Path, dst: Path) -> None:
    """dst becomes an exact copy of src, mtimes included (copy2)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, copy_function=shutil.copy2)


def _version_files(data: Path, version_id: str) -> dict:
    folder = next((data / "datasets" / "pets").glob(f"*{version_id}*"))
    manifest = json.loads((folder / "manifest.json").read_text())
    for volatile in ("created_at", "tag"):
        manifest.pop(volatile)
    manifest["quality"]["drift"].pop("parent", None)  # the parent's tag (dated)
    parts = (folder / "parts.txt").read_text().split()
    return {
        "manifest": manifest,
        "parts": parts,
        "metadata": b"".join((data / p).read_bytes() for p in parts),
        "invalid": (folder / "invalid.jsonl").read_bytes(),
    }


def _store_entries(db: Path, version_id: str) -> list[tuple]:
    """The version's leaf entries as the store answers contains and diff (the chunk_entries
    view), in version order, and the sample rows stored twice (none may be)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT vc.ordinal, ce.pos, ce.path, ce.md5, ce.label, ce.split, ce.segment_id, "
            "ce.row, ce.line, ce.copy, ce.duplicate FROM version_chunks vc "
            "JOIN chunk_entries ce ON ce.chunk_hash = vc.chunk_hash "
            "WHERE vc.version_id = ? ORDER BY vc.ordinal, ce.pos",
            (version_id,),
        ).fetchall()
        twice = conn.execute(
            "SELECT path, md5, label, split, segment_id, row, line, copy, duplicate, count(*) "
            "FROM chunk_samples GROUP BY path, md5, label, split, segment_id, row, line, copy, "
            "duplicate HAVING count(*) > 1"
        ).fetchall()
    return rows + [("stored twice", *t) for t in twice]


def _forget_summaries(db: Path) -> None:
    """The store as a release before leaf summaries left it (migration 0011: NULL)."""
    import sqlite3

    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE chunks SET summary = NULL")


def _missing_summaries(db: Path, version_id: str) -> int:
    import sqlite3

    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT count(*) FROM chunks c JOIN version_chunks vc ON vc.chunk_hash = c.hash "
            "WHERE vc.version_id = ? AND c.summary IS NULL",
            (version_id,),
        ).fetchone()[0]


# LAKETRAIN_DELTA_SEEDS=N runs N seeds (a longer search than make test's four).
SEEDS = int(os.environ.get("LAKETRAIN_DELTA_SEEDS") or 4)


@pytest.mark.parametrize(
    ("seed", "old_head", "augment", "edits"),
    [(s, s % 4 == 3, s % 4 == 1, "mixed") for s in range(SEEDS)]
    + [(s, False, s == 1, "near") for s in range(2)],
)
def test_delta_commits_equal_full_commits(
    tmp_path, monkeypatch, seed, old_head, augment, edits
) -> None:
    """``old_head``: the first version's leaves have no summary (built before 0011); the
    delta commit computes them from the leaves' metadata parts, and stores them. ``augment``:
    two augmented copies per train sample (a path's rows may span two leaves). ``edits``:
    "near", edits among near-duplicate groups (_edit_near), whose delta commits must grow the
    head's groups (neargroups.py) where they can, and come out as the whole graph says."""
    from pipeline.datasets import chunks
    from pipeline.datasets.build import committing, delta, run_build
    from pipeline.datasets.quality import compute, neardup
    from pipeline.settings import get_settings

    monkeypatch.setattr(chunks, "LEAF_TARGET", 4)
    monkeypatch.setattr(chunks, "LEAF_MAX", 12)
    monkeypatch.setattr(chunks, "NODE_TARGET", 4)
    monkeypatch.setattr(chunks, "NODE_MAX", 16)
    homes = {mode: tmp_path / mode for mode in ("delta", "full")}
    for home in homes.values():
        (home / "lake").mkdir(parents=True)
        write_recipe(home, "pets", SMALL_IMAGE_RECIPE + (AUGMENT if augment else ""))
    rng = random.Random(seed)
    lake = homes["delta"] / "lake"
    for cls in CLASSES:
        for i in range(rng.randint(15, 30)):
            write_jpeg(
                lake / f"pets/{cls}/{i:03d}.jpg", seed=seed * 10**5 + CLASSES.index(cls) * 100 + i
            )

    if edits == "near":
        for k, src in enumerate(sorted(lake.rglob("*.jpg"))[:8:2]):
            write_near_copy(src, lake / f"pets/{CLASSES[k % 3]}/near0_{k}.png")
    grew: list[bool] = []  # per delta commit with a head groups file: grown, or not
    real_grow, real_grown = neardup.grow, compute._grown
    monkeypatch.setattr(
        neardup, "grow", lambda *a: (lambda g: grew.append(g is not None) or g)(real_grow(*a))
    )
    reports: list[bool] = []  # per grown commit: the report from the grown groups
    monkeypatch.setattr(
        compute, "_grown", lambda *a: (lambda g: reports.append(g is not None) or g)(real_grown(*a))
    )

    took: list[str] = []
    real_prepare = delta.prepare

    def spy(*args, **kwargs):
        out = real_prepare(*args, **kwargs)
        took.append(out.version_id)
        return out

    monkeypatch.setattr(delta, "prepare", spy)

    def build(mode: str):
        home = homes[mode]
        monkeypatch.setenv("LAKETRAIN_HOME", str(home))
        monkeypatch.setenv("LAKE_DIR", str(home / "lake"))
        monkeypatch.setenv("DATA_ROOT", str(home / "data"))
        monkeypatch.setenv("RECIPES_DIR", str(home / "recipes"))
        monkeypatch.setenv("CHECKPOINT_URL", (home / "objects").as_uri())
        monkeypatch.setenv("METADATA_DB_URL", f"sqlite:///{home / 'metadata.db'}")
        monkeypatch.setenv("SETTLE_SECONDS", "0")
        get_settings.cache_clear()
        monkeypatch.setattr(committing, "DELTA", mode == "delta")
        return run_build("pets", workers=1)

    seen = {"near": 0, "conflicts": 0, "invalid": 0, "leaves": 0}
    for round_ in range(4):
        if round_:
            (_edit_near if edits == "near" else _edit)(lake, rng, round_)
        _mirror(lake, homes["full"] / "lake")
        took.clear()
        a, b = build("delta"), build("full")
        assert (a.version is None) == (b.version is None)
        if a.version is None:
            continue
        assert (
            round_,
            a.version.samples,
            a.version.train,
            a.version.added,
            a.version.removed,
            a.version.changed,
        ) == (
            round_,
            b.version.samples,
            b.version.train,
            b.version.added,
            b.version.removed,
            b.version.changed,
        )
        assert a.version.version_id == b.version.version_id
        if round_ == 0 and old_head:
            for home in homes.values():
                _forget_summaries(home / "metadata.db")
        if round_ == 1 and old_head:
            assert _missing_summaries(homes["delta"] / "metadata.db", a.version.version_id) == 0
        if round_:
            assert took == [a.version.version_id], "the delta commit did not run"
        got = _version_files(homes["delta"] / "data", a.version.version_id)
        want = _version_files(homes["full"] / "data", b.version.version_id)
        assert got["manifest"] == want["manifest"]
        assert got == want
        assert a.version.samples == want["manifest"]["counts"]["samples"]
        # The store's entries too: the delta commit takes the kept samples' ids from the head
        # leaves they come from, the full commit searches for them by path.
        entries = _store_entries(homes["delta"] / "metadata.db", a.version.version_id)
        assert len(entries) == a.version.samples
        assert entries == _store_entries(homes["full"] / "metadata.db", b.version.version_id)
        quality = want["manifest"]["quality"]
        seen["near"] += quality["near_duplicates"]["groups"]
        seen["conflicts"] += quality["label_conflicts"]["count"]
        seen["invalid"] += quality["invalid"]["count"]
        seen["leaves"] = len(want["parts"])
    # The edits reached what they are meant to: several leaves, near-duplicate groups, label
    # conflicts and a corrupt file, each built both ways.
    assert seen["leaves"] >= 10 and seen["near"] and seen["conflicts"] and seen["invalid"], seen
    if edits == "near":
        # Rounds 1 and 2 grew the head's groups (2: a moved and a copied content read again);
        # round 3 deleted a grouped content, so the whole graph decided.
        assert grew == [True, True, False] and reports == [True, True], (grew, reports)


@pytest.mark.parametrize("lines_at_once", [1 << 16, 7])
def test_version_id_from_the_leaf_indexes_is_version_id_for(monkeypatch, lines_at_once) -> None:
    """manifest.version_id_of_indexes (numpy, from the leaves' .idx, its sorted lines hashed a
    slice at a time) is manifest.version_id_for; so is it over samples in memory (index_of,
    the full commit's way)."""
    from pipeline.datasets import chunks
    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build.values import _Sample
    from pipeline.datasets.manifest import version_id_of_indexes as version_id_of

    monkeypatch.setattr(mf, "_LINES_AT_ONCE", lines_at_once)
    rng = random.Random(7)
    labels = [None, "a", "ab", "b", "é", "Z z"]
    samples = [
        _Sample(
            f"d/{rng.choice('xyz')}/{i:04d}",
            f"{rng.randrange(40):032x}",
            rng.choice(labels),
            rng.choice(("train", "val")),
            f"seg{rng.randrange(3)}",
            i,
            1,
            1,
            False,
            None,
            0,
        )  # fmt: skip
        for i in range(500)
    ]
    leaves = [samples[a:b] for a, b in chunks.leaf_bounds(samples)]
    indexes = [chunks.decode_index(chunks.index_bytes(part)) for part in leaves]
    want = mf.version_id_for("d", "r" * 64, [(s.md5, s.label, s.split) for s in samples])
    assert version_id_of("d", "r" * 64, indexes) == want
    assert version_id_of("d", "r" * 64, [chunks.index_of(samples)]) == want
    assert version_id_of("e", "r" * 64, indexes) != want


def _small_leaves_version(store, home, monkeypatch):
    """A first version of 12 images in each class folder, in leaves of ~4 samples: the version,
    the DATA_ROOT and its listed metadata parts (DATA_ROOT-relative, in order)."""
    from pipeline.datasets import chunks
    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build import build
    from pipeline.settings import get_settings

    monkeypatch.setattr(chunks, "LEAF_TARGET", 4)
    write_recipe(home, "pets")
    for ci, cls in enumerate(CLASSES):
        for i in range(12):
            write_jpeg(home / "lake" / f"pets/{cls}/{i:03d}.jpg", seed=ci * 100 + i)
    first = build("pets", workers=1, store=store)
    data = get_settings().data_root
    parts = (mf.version_dir(data, "pets", first.version_id) / mf.PARTS).read_text().split()
    return first, data, parts


# "listed": the files' presence read from their folders' listings (chunks.Present, as for a
# million-sample head), not a stat a file.
@pytest.mark.parametrize("presence", ["stat", "listed"])
def test_a_head_leaf_missing_its_metadata_part_falls_back_to_the_full_commit(
    store, home, monkeypatch, presence
) -> None:
    """The delta takes untouched head leaves whole and cannot write them again; a leaf whose
    metadata part is gone (a damaged DATA_ROOT) makes the commit assemble everything, which
    writes the part back, instead of failing mid-publish."""
    from pipeline.datasets import chunks
    from pipeline.datasets.build import build, delta
    from pipeline.datasets.reader import open_version

    if presence == "listed":
        monkeypatch.setattr(chunks.Present, "LIST_ABOVE", 0)
    first, data, parts = _small_leaves_version(store, home, monkeypatch)
    victim = data / parts[0]  # the first leaf, of cat/; the edit is in emu/
    leaf_of_cat = victim.read_bytes()
    victim.unlink()
    write_jpeg(home / "lake" / "pets/emu/new.jpg", seed=9_999)

    fell_back: list[str] = []
    real = delta.prepare

    def spy(*a, **k):
        try:
            return real(*a, **k)
        except delta.Fallback as exc:
            fell_back.append(str(exc))
            raise

    monkeypatch.setattr(delta, "prepare", spy)
    second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + 1
    assert fell_back and "metadata part missing" in fell_back[0]
    assert victim.read_bytes() == leaf_of_cat  # written again, byte for byte
    assert len(open_version("pets", second.version_id, store=store)) == second.samples


def test_a_delta_commit_reads_which_head_leaves_are_on_disk_once(store, home, monkeypatch):
    """The reused leaves' files are listed once per delta commit: the check that they are all
    there (delta.prepare) and the write that skips what exists (write_pieces) share it."""
    from pipeline.datasets import chunks
    from pipeline.datasets.build import build, delta

    monkeypatch.setattr(chunks.Present, "LIST_ABOVE", 0)  # listed, as for a large head
    first, _data, _parts = _small_leaves_version(store, home, monkeypatch)
    made: list[int] = []

    class Counted(chunks.Present):
        def __init__(self, data_root, hashes):
            made.append(len(hashes))
            super().__init__(data_root, hashes)

    monkeypatch.setattr(chunks, "Present", Counted)
    prepared: list[object] = []
    real = delta.prepare
    monkeypatch.setattr(
        delta, "prepare", lambda *a, **k: prepared.append(real(*a, **k)) or prepared[-1]
    )
    write_jpeg(home / "lake" / "pets/emu/new.jpg", seed=9_999)
    second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + 1
    assert len(prepared) == 1  # the delta commit ran (no fallback)
    assert len(made) == 1 and made[0] > 0, made


# The bytes of metadata parts the cut may keep: all of them, about one small leaf's (the parts
# are ~1.2 KB: a part that does not fit is not kept, even while the window is being cut), none.
@pytest.mark.parametrize("keep", ["all", "one", "none"])
def test_a_delta_commit_formats_each_sample_of_its_windows_once(store, home, monkeypatch, keep):
    """A window's samples are formatted into metadata lines once: the offered head leaf that
    no longer matches, the leaf cut instead and the write of its part share the lines (they
    were formatted three times, a third of a commit at random places on a million samples).
    Past the bytes the cut may keep, the write formats a part again, and writes the same
    files."""
    from collections import Counter

    from pipeline.datasets import chunks, chunkwrite
    from pipeline.datasets.build import build, delta, windows
    from pipeline.datasets.chunkread import read_meta

    room = {"all": windows.KEEP_FORMATTED_BYTES, "one": 2_000, "none": 0}[keep]
    monkeypatch.setattr(windows, "KEEP_FORMATTED_BYTES", room)
    first, data, _parts = _small_leaves_version(store, home, monkeypatch)
    formatted: Counter = Counter()
    real_line = chunks.entry_line

    def counted(s):
        formatted[(s.path, s.line, s.copy)] += 1
        return real_line(s)

    monkeypatch.setattr(chunks, "entry_line", counted)
    monkeypatch.setattr(chunkwrite, "entry_line", counted)
    prepared: list[object] = []
    real = delta.prepare
    monkeypatch.setattr(
        delta, "prepare", lambda *a, **k: prepared.append(real(*a, **k)) or prepared[-1]
    )
    # Inside the folders, between existing names: each lands in a head leaf, which no longer
    # formats to its bytes and is cut again.
    for n, cls in enumerate(CLASSES):
        write_jpeg(home / "lake" / f"pets/{cls}/005a.jpg", seed=8_000 + n)
    second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + len(CLASSES)
    assert len(prepared) == 1  # the delta commit ran (no fallback)
    cut_again = [s for _h, _n, reused, part in prepared[0].pieces if reused is None for s in part]
    assert {f"pets/{cls}/005a.jpg" for cls in CLASSES} <= {s.path for s in cut_again}
    assert formatted and max(formatted.values()) == (1 if keep == "all" else 2), formatted
    assert {(s.path, s.line, s.copy) for s in cut_again} <= formatted.keys()
    kept = prepared[0].formatted
    assert sum(map(len, kept.values())) <= room
    assert bool(kept) == (keep != "none")
    for h, _n, reused, part in prepared[0].pieces:
        if reused is None:  # written, under the sha256 of the very bytes formatted
            assert read_meta(data, h) == chunks.meta_bytes(part)


@pytest.mark.parametrize("know", ["from the leaves", "by path"])
def test_a_delta_commit_takes_the_kept_samples_ids_from_their_head_leaves(
    store, home, monkeypatch, know
) -> None:
    """The re-cut leaves' kept samples are stored already: their ids come from the head
    leaves' entries by position, and only the change set's paths are searched for. Past
    windows.KEEP_ORIGINS_AT_MOST ("by path") every path is searched. Either way the store's entries are the
    version's metadata, and no sample is stored twice."""
    from sqlalchemy import text

    from pipeline.datasets import leaf_index
    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build import build, delta, windows

    if know == "by path":
        monkeypatch.setattr(windows, "KEEP_ORIGINS_AT_MOST", 0)
    first, data, _parts = _small_leaves_version(store, home, monkeypatch)
    searched: list[str] = []
    real = leaf_index._stored_ids
    monkeypatch.setattr(
        leaf_index,
        "_stored_ids",
        lambda session, paths: searched.extend(paths) or real(session, paths),
    )
    prepared: list[object] = []
    real_prepare = delta.prepare
    monkeypatch.setattr(
        delta, "prepare", lambda *a, **k: prepared.append(real_prepare(*a, **k)) or prepared[-1]
    )
    new = {f"pets/{cls}/005a.jpg" for cls in CLASSES}
    for n, path in enumerate(sorted(new)):
        write_jpeg(home / "lake" / path, seed=8_000 + n)
    second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + len(new)
    assert len(prepared) == 1  # the delta commit ran (no fallback)
    if know == "from the leaves":
        assert prepared[0].known_samples
        assert searched and set(searched) <= new, sorted(set(searched) - new)
    else:
        assert not prepared[0].known_samples and set(searched) - new
    folder = mf.version_dir(data, "pets", second.version_id)
    metadata = [
        json.loads(line)
        for part in (folder / mf.PARTS).read_text().split()
        for line in (data / part).read_text().splitlines()
    ]
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT ce.path, ce.md5, ce.label, ce.split, ce.segment_id, ce.row "
                "FROM version_chunks vc JOIN chunk_entries ce ON ce.chunk_hash = vc.chunk_hash "
                "WHERE vc.version_id = :v ORDER BY vc.ordinal, ce.pos"
            ),
            {"v": second.version_id},
        ).all()
        twice = conn.execute(
            text(
                "SELECT path FROM chunk_samples GROUP BY path, md5, label, split, segment_id, "
                'row, line, "copy", duplicate HAVING count(*) > 1'
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (m["path"], m["md5"], m["label"], m["split"], m["segment"], m["row"]) for m in metadata
    ]
    assert twice == []


# Cut short; two documents in one value (read as a batch, it would shift every later leaf's
# summary by one); a document of another shape.
@pytest.mark.parametrize("damage", ['{"n": ', '{"n": 1}, {"n": 2}', "[1, 2]"])
def test_a_damaged_leaf_summary_in_the_store_is_computed_again(
    store, home, monkeypatch, damage
) -> None:
    """A leaf's stored summary that does not parse (a damaged store) is no summary: the delta
    commit computes it again from the leaf's metadata part, exactly, and writes it back."""
    from sqlalchemy import text

    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build import build, delta

    first, data, parts = _small_leaves_version(store, home, monkeypatch)
    victim = parts[0].rsplit("/", 1)[1].split(".")[0]  # the first leaf, of cat/
    with store.engine.begin() as conn:
        good = conn.execute(text("SELECT summary FROM chunks WHERE hash = :h"), {"h": victim})
        good = good.scalar_one()
        conn.execute(
            text("UPDATE chunks SET summary = :d WHERE hash = :h"), {"d": damage, "h": victim}
        )
    write_jpeg(home / "lake" / "pets/emu/new.jpg", seed=9_999)

    ran: list[bool] = []
    real = delta.prepare
    monkeypatch.setattr(delta, "prepare", lambda *a, **k: ran.append(True) or real(*a, **k))
    second = build("pets", workers=1, store=store)
    assert ran and second is not None and second.samples == first.samples + 1
    with store.engine.connect() as conn:
        repaired = conn.execute(text("SELECT summary FROM chunks WHERE hash = :h"), {"h": victim})
        assert repaired.scalar_one() == good
    manifest = json.loads(
        (mf.version_dir(data, "pets", second.version_id) / mf.MANIFEST).read_text()
    )
    assert manifest["counts"]["samples"] == second.samples


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            # Few distinct first 8 characters, often shared: every kind of tie in the first
            # word the sort keys on (equal contents, equal prefixes, none), beside lone rows.
            st.sampled_from(["00000000", "0000000a", "ffffffff", "7a7a7a7a"])
            | st.text("0123456789abcdef", min_size=8, max_size=8),
            st.text("0123456789abcdef", min_size=0, max_size=3),
            st.integers(0, 5),
        ),
        max_size=60,
    )
)
def test_sorted_order_is_the_lexsort_of_md5_then_code(rows) -> None:
    """manifest._sorted_order (a sort on the md5s' first 8 bytes, ties sorted again) orders
    (md5, code) exactly as np.lexsort over the md5 bytes then the code."""
    from pipeline.datasets.manifest import _sorted_order

    md5 = np.array([(head + tail.rjust(24, "0")).encode() for head, tail, _ in rows], "S32")
    code = np.array([c for _, _, c in rows], np.int64)
    got = _sorted_order(md5, code)
    want = np.lexsort((code, md5))
    assert sorted(got.tolist()) == list(range(len(rows)))
    assert md5[got].tolist() == md5[want].tolist() and code[got].tolist() == code[want].tolist()

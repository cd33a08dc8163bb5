"""Chunked versions end to end: equivalent to a format-1 build of the same lake, readable with
``cat``, cheap to add to, and format-1 versions still readable next to them."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.datasets.conftest import image_lake, write_jpeg, write_recipe

TABLE = 'modality = "table"\n[table]\nlabel_column = "label"\n[split]\nval_fraction = 0.3\n'
AUGMENTED = (
    'modality = "image"\n[image]\nsize = 8\n[augment]\ncopies = 2\nops = ["hflip"]\n'
    "[split]\nval_fraction = 0.3\n"
)


def _store_at(home: Path, name: str, monkeypatch):
    """A fresh SQLite store and DATA_ROOT under ``home/name``, set as the process default."""
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    data_root = home / name
    data_root.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{data_root / 'metadata.db'}"
    monkeypatch.setenv("DATA_ROOT", str(data_root))
    monkeypatch.setenv("METADATA_DB_URL", url)
    get_settings.cache_clear()
    return MetadataStore(url), data_root


def _build(store, dataset: str, *, fmt: int, monkeypatch, max_files: int = 7):
    from pipeline.datasets.build import committing, run_build

    monkeypatch.setattr(committing, "WRITE_FORMAT", fmt)
    return run_build(dataset, workers=1, store=store, max_files=max_files).version


def _mixed_lake(home: Path) -> None:
    """Images in class folders (with a duplicate), a table over several files, augmented
    copies: every kind of key (path, line, copy) and label source."""
    image_lake(home, per_class=40, classes=("cat", "dog", "owl"))
    lake = home / "lake"
    (lake / "pets" / "owl" / "zz_dup.jpg").write_bytes(
        (lake / "pets" / "cat" / "003.jpg").read_bytes()
    )
    write_recipe(home, "tab", TABLE)
    rng = random.Random(3)
    for f in range(3):
        rows = "".join(
            f"{rng.uniform(-1, 1):.4f},{rng.uniform(-1, 1):.4f},{rng.choice('ab')}\n"
            for _ in range(150)
        )
        (lake / "tab" / f"part{f}").mkdir(parents=True, exist_ok=True)
        (lake / "tab" / f"part{f}" / "rows.csv").write_text("f1,f2,label\n" + rows)
    image_lake(home, "aug", per_class=6, recipe=AUGMENTED)


def _same_reads(a, b) -> None:
    assert len(a) == len(b) and a.classes == b.classes and a.version_id == b.version_id
    assert a.mean == b.mean and a.std == b.std and a.sample_shape == b.sample_shape
    every = np.arange(len(a))
    xa, ya = a.get_batch(every)
    xb, yb = b.get_batch(every)
    np.testing.assert_array_equal(xa, xb)
    np.testing.assert_array_equal(ya, yb)
    for i in (0, len(a) // 2, len(a) - 1):
        np.testing.assert_array_equal(a[i][0], b[i][0])
        assert a[i][1] == b[i][1]
    assert [a.metadata(i) for i in every] == [b.metadata(i) for i in every]
    np.testing.assert_array_equal(a.md5s(), b.md5s())
    np.testing.assert_array_equal(a.labels(), b.labels())


def test_a_chunked_version_reads_back_exactly_like_a_format_1_build(lt_env, monkeypatch):
    from pipeline.datasets.reader import open_version

    home = lt_env
    _mixed_lake(home)
    ref_store, ref_root = _store_at(home, "ref", monkeypatch)
    refs = {d: _build(ref_store, d, fmt=1, monkeypatch=monkeypatch) for d in ("pets", "tab", "aug")}
    new_store, new_root = _store_at(home, "new", monkeypatch)
    news = {d: _build(new_store, d, fmt=2, monkeypatch=monkeypatch) for d in ("pets", "tab", "aug")}
    for d in refs:
        assert refs[d].version_id == news[d].version_id  # same content, same id, any format
        old = open_version(d, refs[d].version_id, data_root=ref_root, store=ref_store)
        new = open_version(d, news[d].version_id, data_root=new_root, store=new_store)
        assert old.manifest["format_version"] == 1 and new.manifest["format_version"] == 2
        assert (old.folder / "metadata.jsonl").is_file() and not (
            new.folder / "metadata.jsonl"
        ).exists()
        _same_reads(old, new)
        for split in ("train", "val"):
            _same_reads(old.split(split), new.split(split))
    assert len(open_version("tab", store=new_store).manifest["chunks"]["nodes"]) >= 1
    assert open_version("tab", store=new_store).manifest["chunks"]["leaves"] > 1


def test_cat_of_the_listed_parts_is_the_versions_metadata(sqlite_store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=150)
    v = run_build("pets", workers=1, store=sqlite_store).version
    data_root = home / "data"
    parts = data_root / v.path / "parts.txt"
    # Exactly what the docs say: cd DATA_ROOT && xargs cat < datasets/<d>/<v>/parts.txt
    out = subprocess.run(
        f"xargs cat < {v.path}/parts.txt",
        shell=True,
        cwd=data_root,
        capture_output=True,
        check=True,
    ).stdout.decode()
    assert len(parts.read_text().split()) > 1  # several leaves
    r = open_version("pets", store=sqlite_store)
    expected = [
        json.dumps({k: m for k, m in r.metadata(i).items() if k != "index"}, sort_keys=True)
        for i in range(len(r))
    ]
    assert out.splitlines() == expected


def test_metadata_reads_only_the_leaf_of_the_sample_asked_for(sqlite_store, home, monkeypatch):
    """metadata(i) of a chunked version reads the one part that holds sample i (a million-sample
    version's whole metadata took 0.8 s and ~650 MB for one record), in any order of access,
    with any number of leaves kept, in split views and in a pickled copy."""
    import pickle

    from pipeline.datasets import chunks, leafmeta
    from pipeline.datasets.build import run_build
    from pipeline.datasets.chunks import ChunkError
    from pipeline.datasets.reader import open_version

    # Small leaves and nodes: many leaves, under several nodes.
    monkeypatch.setattr(chunks, "LEAF_TARGET", 4)
    monkeypatch.setattr(chunks, "LEAF_MAX", 12)
    monkeypatch.setattr(chunks, "NODE_TARGET", 4)
    image_lake(home, per_class=40)
    v = run_build("pets", workers=1, store=sqlite_store).version
    data_root = home / "data"
    names = (data_root / v.path / "parts.txt").read_text().split()
    expected = b"".join((data_root / n).read_bytes() for n in names).decode().splitlines()
    assert len(names) > 10
    reads: list[str] = []
    real = leafmeta.read_meta

    def counted(root, h):
        reads.append(h)
        return real(root, h)

    monkeypatch.setattr(leafmeta, "read_meta", counted)

    def record(line: str, i: int) -> dict:
        return dict(sorted({**json.loads(line), "index": i}.items()))

    r = open_version("pets", store=sqlite_store)
    assert r.metadata(len(r) - 1) == record(expected[-1], len(r) - 1)
    assert len(reads) == 1  # the last leaf's part, nothing else
    assert [r.metadata(i) for i in range(len(r))] == [
        record(line, i) for i, line in enumerate(expected)
    ]
    # A pass in order read every other part once (the last one was still kept).
    assert len(reads) == len(set(reads)) == len(names)
    assert {Path(n).stem for n in names} == set(reads)

    monkeypatch.setattr(leafmeta, "KEPT_LEAVES", 1)  # evict at every leaf change
    fresh = open_version("pets", store=sqlite_store)
    order = list(range(len(fresh)))
    random.Random(7).shuffle(order)
    assert all(fresh.metadata(i) == record(expected[i], i) for i in order)
    assert len(fresh._leaf_meta._kept) == 1  # the cache stays bounded
    val = fresh.split("val")
    val_rows = [i for i, line in enumerate(expected) if json.loads(line)["split"] == "val"]
    assert [val.metadata(k)["index"] for k in range(len(val))] == val_rows
    copy = pickle.loads(pickle.dumps(fresh))
    assert not copy._leaf_meta._kept  # a copy reads its own leaves
    assert copy.metadata(5) == record(expected[5], 5)

    # A part whose lines do not add up to its leaf's count is refused, naming the leaf.
    monkeypatch.setattr(leafmeta, "read_meta", lambda root, h: real(root, h) + b"{}\n")
    with pytest.raises(ChunkError, match="its node lists"):
        open_version("pets", store=sqlite_store).metadata(0)


def test_export_of_a_chunked_version_writes_one_metadata_jsonl_with_index(
    sqlite_store, home, tmp_path
):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.export import export_version
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=20)
    run_build("pets", workers=1, store=sqlite_store)
    r = open_version("pets", store=sqlite_store)
    export_version(r, tmp_path / "out")
    lines = [json.loads(x) for x in (tmp_path / "out" / "metadata.jsonl").read_text().splitlines()]
    assert [rec["index"] for rec in lines] == list(range(len(r)))
    assert [rec["md5"] for rec in lines] == r.md5s().tolist()
    x = np.load(tmp_path / "out" / "x.npy")
    np.testing.assert_array_equal(x, r.get_batch(np.arange(len(r)))[0])


def _bytes_under(root: Path, skip: tuple[str, ...] = ("segments",)) -> int:
    total = 0
    for dirpath, _dirs, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root)
        if rel.parts[:1] and rel.parts[0] in skip:
            continue
        total += sum(
            os.path.getsize(Path(dirpath) / f) for f in filenames if not f.startswith("metadata.db")
        )
    return total


def _store_bytes(store) -> int:
    """Bytes the store's version records take: the rows of the per-version tables, measured as
    the size of their values (a database file grows in pages, which hides small changes)."""
    from sqlalchemy import text

    total = 0
    with store.session() as session:
        for table in (
            "chunks",
            "version_chunks",
            "chunk_samples",  # with leaf_entries, what the chunk_entries view reads
            "leaf_entries",
            "version_samples",
            "version_segments",
            "version_invalid",
            "dataset_versions",
        ):
            for row in session.execute(text(f"SELECT * FROM {table}")):
                total += sum(len(str(v)) for v in row if v is not None)
    return total


def _ledger_and_processed(store, dataset: str, paths: list[str], seg: str, first_row: int) -> None:
    """Files as a scan and process would record them, without decoding anything: a ledger row
    per path and a processed row per content, all in one (unchecked) segment."""
    from sqlalchemy import insert

    from pipeline.datasets.recipes import load_recipe
    from pipeline.metadata.base import utcnow
    from pipeline.metadata.datasets import ProcessedSample, Segment
    from pipeline.metadata.ledger import LedgerFile

    rh = load_recipe(dataset).recipe_hash
    now = utcnow()
    with store.session() as session:
        session.add(
            Segment(
                segment_id=seg, recipe_hash=rh, format="npy", path=f"segments/{rh}/{seg}",
                n_rows=len(paths), size_bytes=1, sha256="0" * 64,
            )
        )  # fmt: skip
        session.flush()
        md5s = [hashlib.md5(p.encode()).hexdigest() for p in paths]
        session.execute(
            insert(LedgerFile),
            [
                {"path": p, "dataset": dataset, "size": 100, "mtime_ns": 1, "md5": m,
                 "status": "ok", "first_seen": now, "last_seen": now, "content_changed_at": now}
                for p, m in zip(paths, md5s, strict=True)
            ],
        )  # fmt: skip
        session.execute(
            insert(ProcessedSample),
            [
                {"md5": m, "recipe_hash": rh, "segment_id": seg, "row": first_row + i,
                 "n_rows": 1, "status": "ok", "created_at": now}
                for i, m in enumerate(md5s)
            ],
        )  # fmt: skip


@pytest.mark.parametrize(("where", "bound"), [("spread", 0.05), ("new_folder", 0.02)])
def test_an_incremental_version_costs_what_changed(sqlite_store, home, where, bound):
    """+1 % files spread over every class folder: at most 5 % of the bytes the first version
    added to DATA_ROOT and the store (segments excluded); +1 % in a new folder: at most 2 %.
    60,000 samples (recorded straight into the store, nothing decoded): the size at which a
    version is many leaves per class folder, as in the issue's 200,000-image measure."""
    from pipeline.datasets.build import commit

    write_recipe(
        home, "big", 'modality = "image"\n[image]\nsize = 4\n[labels]\nrule = "parent_dir"\n'
    )
    (home / "lake" / "big").mkdir(parents=True)
    classes = [f"c{i}" for i in range(10)]
    n = 60_000
    paths = [f"big/{c}/img_{i:06d}.png" for c in classes for i in range(n // 10)]
    data_root = home / "data"
    before = (_bytes_under(data_root), _store_bytes(sqlite_store))
    _ledger_and_processed(sqlite_store, "big", paths, "a" * 64, 0)
    assert commit("big", store=sqlite_store).samples == n
    first = (_bytes_under(data_root), _store_bytes(sqlite_store))
    if where == "spread":  # the next files of every class folder
        extra = [
            f"big/{c}/img_{i:06d}.png" for c in classes for i in range(n // 10, n // 10 + n // 1000)
        ]
    else:
        extra = [f"big/c_new/img_{i:06d}.png" for i in range(n // 100)]
    _ledger_and_processed(sqlite_store, "big", extra, "b" * 64, 0)
    v2 = commit("big", store=sqlite_store)
    assert v2 is not None and v2.added == len(extra) == n // 100
    second = (_bytes_under(data_root), _store_bytes(sqlite_store))
    disk_first, disk_inc = first[0] - before[0], second[0] - first[0]
    store_first, store_inc = first[1] - before[1], second[1] - first[1]
    assert disk_inc <= bound * disk_first, (disk_inc, disk_first)
    assert store_inc <= bound * store_first, (store_inc, store_first)


def test_format_1_and_format_2_versions_of_one_dataset_read_and_diff_side_by_side(
    sqlite_store, home, monkeypatch
):
    """A store and DATA_ROOT written before chunks keep working: the old version stays
    readable, a new build on top of it writes chunks, and the new build's diff counts
    against the old version's rows."""
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=30)
    old = _build(sqlite_store, "pets", fmt=1, monkeypatch=monkeypatch)
    write_jpeg(home / "lake" / "pets" / "cat" / "new.jpg", seed=4242)
    (home / "lake" / "pets" / "dog" / "000.jpg").unlink()
    new = _build(sqlite_store, "pets", fmt=2, monkeypatch=monkeypatch)
    assert (new.added, new.removed, new.changed) == (1, 1, 0) and new.parent_id == old.version_id
    a = open_version("pets", old.version_id, store=sqlite_store)
    b = open_version("pets", store=sqlite_store)
    assert a.manifest["format_version"] == 1 and b.manifest["format_version"] == 2
    paths_a = {a.metadata(i)["path"] for i in range(len(a))}
    paths_b = {b.metadata(i)["path"] for i in range(len(b))}
    assert paths_b - paths_a == {"pets/cat/new.jpg"} and paths_a - paths_b == {"pets/dog/000.jpg"}
    # Without a store too (the trainer's case).
    monkeypatch.delenv("METADATA_DB_URL")
    assert len(open_version("pets", old.version_id, data_root=home / "data")) == len(a)


def test_a_version_whose_chunk_is_missing_or_damaged_fails_naming_the_file(sqlite_store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.chunkread import walk_leaves
    from pipeline.datasets.manifest import ManifestError
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=5)
    run_build("pets", workers=1, store=sqlite_store)
    r = open_version("pets", store=sqlite_store)
    data_root = home / "data"
    leaf = walk_leaves(data_root, r.manifest["chunks"])[-1]
    idx = data_root / "chunks" / leaf.hash[:2] / f"{leaf.hash}.idx"
    idx.write_bytes(idx.read_bytes()[:-1] + b"\x07")
    with pytest.raises(ManifestError, match=rf"{leaf.hash}\.idx: bytes do not match"):
        open_version("pets", store=sqlite_store)
    idx.unlink()
    with pytest.raises(ManifestError, match=rf"{leaf.hash}\.idx: leaf index missing"):
        open_version("pets", store=sqlite_store)

"""A build driven by the ledger's change set since the head (pipeline/datasets/build/changes.py):
a no-change rebuild reads no row per file, plan plans only what changed, and nothing a
full read would see is missed: a file left pending, a row no scan wrote, a touch."""

from __future__ import annotations

import os

import pytest
from sqlalchemy import text

from tests.datasets.conftest import image_lake, write_jpeg


def _boom(*_a, **_k):
    raise AssertionError("read every ledger row of the dataset")


def _no_full_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.datasets.build import full, planning

    monkeypatch.setattr(full, "_current_files", _boom)
    monkeypatch.setattr(full, "_assemble", _boom)
    monkeypatch.setattr(planning, "_files_to_process", _boom)
    monkeypatch.setattr(planning, "relied_on_segments", _boom)


def test_a_no_change_rebuild_stops_before_reading_every_file(store, home, monkeypatch):
    from pipeline.datasets.build import run_build

    image_lake(home, per_class=5)
    first = run_build("pets", workers=1, store=store)
    assert first.version is not None
    with monkeypatch.context() as m:
        _no_full_reads(m)
        again = run_build("pets", workers=1, store=store)
    assert again.version is None and again.shards == 0

    # A touch (same bytes, a new mtime) is a row written since: read in full, no new version
    # (the id is the md5/label/split list), and the head's mark moves past it.
    path = home / "lake" / "pets" / "cat" / "000.jpg"
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))
    assert run_build("pets", workers=1, store=store).version is None
    with monkeypatch.context() as m:
        _no_full_reads(m)
        assert run_build("pets", workers=1, store=store).version is None


def test_plan_plans_only_the_changed_files_and_the_version_is_a_full_reads(
    store, home, monkeypatch
):
    from pipeline.datasets.build import build, plan, planning
    from pipeline.datasets.build.planning import _files_to_process
    from pipeline.lake.scan import scan

    image_lake(home, per_class=8)
    build("pets", workers=1, store=store)
    lake = home / "lake"
    for k in range(3):
        write_jpeg(lake / f"pets/dog/new{k}.jpg", seed=50_000 + k)
    write_jpeg(lake / "pets/cat/001.jpg", seed=60_000)  # other bytes, same path
    (lake / "pets/cat/002.jpg").unlink()
    scan(lake, dataset="pets", store=store)
    with store.session() as session:
        full = _files_to_process(session, "pets", _recipe_hash())
    with monkeypatch.context() as m:
        m.setattr(planning, "_files_to_process", _boom)
        m.setattr(planning, "relied_on_segments", _boom)
        shards = plan("pets", store=store)
    planned = sorted(f.path for s in shards for f in s.files)
    assert planned == sorted(p for p, _md5, _size in full)
    assert planned == [
        "pets/cat/001.jpg",
        "pets/dog/new0.jpg",
        "pets/dog/new1.jpg",
        "pets/dog/new2.jpg",
    ]


def test_a_file_left_pending_is_built_by_the_next_build_with_no_lake_change(store, home):
    """A file scanned after the plan has no processed sample at commit: left out, and taken
    by the next build although no scan writes its row again."""
    from pipeline.datasets.build import build, commit, plan, process
    from pipeline.datasets.reader import open_version
    from pipeline.lake.scan import scan

    image_lake(home, per_class=4)
    lake = home / "lake"
    scan(lake, dataset="pets", store=store)
    refs = [process(s, store=store) for s in plan("pets", store=store)]
    write_jpeg(lake / "pets/cat/late.jpg", seed=70_000)
    scan(lake, dataset="pets", store=store)  # after the plan: no shard holds it
    v1 = commit("pets", refs, store=store)
    assert v1 is not None and v1.samples == 8
    v2 = build("pets", workers=1, store=store)  # its scan writes no row
    assert v2 is not None and v2.samples == 9
    reader = open_version("pets", v2.version_id, store=store)
    assert "pets/cat/late.jpg" in {reader.metadata(i)["path"] for i in range(len(reader))}


def test_a_ledger_row_no_scan_wrote_is_in_the_change_set(store, home):
    from pipeline.datasets.build import build, run_build
    from pipeline.datasets.build.changes import Since
    from pipeline.datasets.queries import latest_committed

    image_lake(home, per_class=3)
    build("pets", workers=1, store=store)
    with store.session() as session:
        session.execute(
            text("UPDATE ledger_files SET last_scan_id = NULL WHERE path = 'pets/dog/001.jpg'")
        )
    with store.session() as session:
        since = Since.of(session, "pets", latest_committed(session, "pets"), _recipe_hash())
        assert since is not None
        assert [r[0] for r in since.changed(session, "pets")] == ["pets/dog/001.jpg"]
    assert run_build("pets", workers=1, store=store).version is None  # read in full: same id


def test_a_mark_for_another_version_than_the_head_is_not_used(store, home):
    from pipeline.datasets.build import build
    from pipeline.datasets.build.changes import Since
    from pipeline.datasets.queries import latest_committed

    image_lake(home, per_class=3)
    build("pets", workers=1, store=store)
    with store.session() as session:
        session.execute(text("UPDATE dataset_ledger_marks SET version_id = 'not-the-head'"))
    with store.session() as session:
        assert Since.of(session, "pets", latest_committed(session, "pets"), _recipe_hash()) is None


def _recipe_hash() -> str:
    from pipeline.datasets.recipes import load_recipe

    return load_recipe("pets").recipe_hash


@pytest.mark.parametrize("delta_commit", [False, True], ids=["full", "delta"])
def test_an_incremental_version_is_the_version_the_same_lake_gives_from_scratch(
    store, home, tmp_path, monkeypatch, delta_commit
):
    """The head's leaves that no changed path falls in are taken without formatting a line
    (changes.affected_paths, chunks' ``settled``); the version is still exactly the one the
    lake gives from scratch: the same version_id as a build in a fresh store and data root,
    and the very leaves a from-scratch assembly and chunking of the same store cuts. The edits
    include the cases the shortcut must catch: a new first path of an existing content (the
    old first path becomes a duplicate), a deleted first path (its duplicate becomes first),
    a touch (only the metadata line changes), other bytes at a path."""
    import shutil

    from pipeline.datasets.build import build, chunkrows, committing, full
    from pipeline.datasets.build.assemble import _assemble
    from pipeline.datasets.build.planning import _current_files
    from pipeline.datasets.chunkwrite import write_tree
    from pipeline.datasets.manifest import version_id_for
    from pipeline.datasets.recipes import load_recipe, load_sidecar
    from pipeline.datasets.version_rows import leaf_hashes
    from pipeline.settings import get_settings

    lake = home / "lake"
    # owl: no edit of its own; fox: none at all (its leaves are taken as they are).
    image_lake(home, per_class=150, classes=("cat", "dog", "owl", "fox"))
    shutil.copy2(lake / "pets/cat/010.jpg", lake / "pets/owl/zdup.jpg")  # a duplicate pair
    build("pets", workers=1, store=store)
    for k in range(3):
        write_jpeg(lake / f"pets/cat/zz{k}.jpg", seed=40_000 + k)
        write_jpeg(lake / f"pets/dog/zz{k}.jpg", seed=41_000 + k)
    shutil.copy2(lake / "pets/owl/075.jpg", lake / "pets/cat/dup.jpg")  # now its first path
    (lake / "pets/cat/010.jpg").unlink()  # owl/zdup.jpg is its content's first path now
    write_jpeg(lake / "pets/cat/050.jpg", seed=42_000)  # other bytes
    st = (lake / "pets/dog/120.jpg").stat()
    os.utime(lake / "pets/dog/120.jpg", ns=(st.st_atime_ns, st.st_mtime_ns - 10**9))

    settled: list = []
    if delta_commit:
        # The delta commit (build/delta.py): the head's leaves outside the changes are not read.
        from pipeline.datasets.build import delta

        real = delta.prepare
        monkeypatch.setattr(
            delta, "prepare", lambda *a, **k: settled.append(real(*a, **k)) or settled[-1]
        )
    else:
        monkeypatch.setattr(committing, "DELTA", False)
        real = chunkrows.settled_leaves

        def spy(*a, **k):
            settled.append(real(*a, **k))
            return settled[-1]

        monkeypatch.setattr(full, "settled_leaves", spy)
    v2 = build("pets", workers=1, store=store)
    assert v2 is not None and settled
    if delta_commit:
        assert settled[0].version_id == v2.version_id
        assert sum(p[3] is None for p in settled[0].pieces) > 0  # head leaves taken unread
    else:
        assert len(settled[0]) > 0

    recipe = load_recipe("pets")
    with store.session() as session:
        files, processed = _current_files(session, "pets", recipe.recipe_hash)
        leaves = leaf_hashes(session, v2.version_id)
    samples, _invalid = _assemble(recipe, files, processed, load_sidecar(lake / "pets", recipe))
    fresh = write_tree(tmp_path / "fresh", samples)
    assert [leaf.hash for leaf in fresh.leaves] == leaves
    assert (
        version_id_for("pets", recipe.recipe_hash, [(s.md5, s.label, s.split) for s in samples])
        == v2.version_id
    )
    flags = {s.path: s.duplicate for s in samples}
    assert flags["pets/cat/dup.jpg"] is False and flags["pets/owl/075.jpg"] is True
    assert flags["pets/owl/zdup.jpg"] is False

    # A build of the same lake in a fresh store and data root: the same version id.
    from pipeline.metadata.store import MetadataStore

    other = tmp_path / "other"
    monkeypatch.setenv("DATA_ROOT", str(other / "data"))
    url = f"sqlite:///{tmp_path / 'other.db'}"
    monkeypatch.setenv("METADATA_DB_URL", url)
    get_settings.cache_clear()
    fresh_store = MetadataStore(url)
    try:
        v3 = build("pets", workers=1, store=fresh_store)
        assert v3.version_id == v2.version_id
    finally:
        fresh_store.dispose()

"""gc on chunked versions: a chunk lives while a kept version (the newest ``keep_last``, one
a run used, or a published folder the store does not record yet) references it; the others go,
rows and files; unrecorded chunk files go once old."""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

from sqlalchemy import func, select

from pipeline.datasets import chunkread
from pipeline.datasets import chunks as ch
from pipeline.datasets import manifest as mf
from pipeline.datasets.chunkwrite import write_tree
from pipeline.datasets.gc import collect
from pipeline.metadata.datasets import Chunk, ChunkEntry, VersionChunk
from tests.datasets.chunk_synth import add_version, image, ordered
from tests.datasets.test_queries_chunks import lake, mutate


def tree_hashes(tmp: Path, samples) -> set[str]:
    """The brute force: every leaf and node of ``samples``' tree, cut afresh elsewhere."""
    tree = write_tree(tmp, ordered(samples))
    return {leaf.hash for leaf in tree.leaves} | {n.hash for n in tree.nodes}


def on_disk(data_root: Path) -> set[str]:
    root = data_root / ch.CHUNKS_DIR
    return {f.name.split(".", 1)[0] for f in root.rglob("*") if f.is_file()}


def recorded(store) -> tuple[set[str], int]:
    with store.session() as s:
        hashes = set(s.scalars(select(Chunk.hash)))
        entries = s.scalar(select(func.count()).select_from(ChunkEntry))
        unknown = s.scalar(
            select(func.count())
            .select_from(ChunkEntry)
            .where(ChunkEntry.chunk_hash.not_in(select(Chunk.hash)))
        )
    assert unknown == 0  # no entry outlives its chunk
    return hashes, entries


def four_versions(store, data_root: Path):
    rng = random.Random(2)
    v1 = lake(1500, rng)
    v2 = mutate(v1, rng, 40)
    v3 = mutate(v2, rng, 40)
    v4 = mutate(v3, rng, 40)
    ids = [add_version(store, data_root, "pets", s, n=i) for i, s in enumerate([v1, v2, v3, v4])]
    return ids, [v1, v2, v3, v4]


def test_gc_keeps_the_chunks_of_kept_versions_and_deletes_the_others(store, lt_env, tmp_path):
    data_root = lt_env / "data"
    ids, samples = four_versions(store, data_root)
    from pipeline import runs

    runs.record_run_started("run-1", "pets", ids[0], {"epochs": 1}, store=store)
    every = set().union(*(tree_hashes(tmp_path / f"t{i}", s) for i, s in enumerate(samples)))
    assert on_disk(data_root) == every and recorded(store)[0] == every
    plan = collect(keep_last=1, min_age_s=0, apply=True, store=store, data_root=data_root)
    assert {v["version_id"] for v in plan.versions} == {ids[1], ids[2]}
    kept = tree_hashes(tmp_path / "k0", samples[0]) | tree_hashes(tmp_path / "k3", samples[3])
    assert {c["hash"] for c in plan.chunks} == every - kept
    assert on_disk(data_root) == kept
    hashes, entries = recorded(store)
    assert hashes == kept
    # The kept versions' leaves still list, and their entries are all there.
    with store.session() as s:
        listed = set(s.scalars(select(VersionChunk.chunk_hash)))
        assert set(s.scalars(select(VersionChunk.version_id).distinct())) == {ids[0], ids[3]}
    assert listed <= kept
    assert entries == sum(len(chunkread.read_entries(data_root, h)) for h in listed)
    # Nothing left to collect: a second gc drops nothing.
    again = collect(keep_last=1, min_age_s=0, apply=True, store=store, data_root=data_root)
    assert again.versions == [] and again.chunks == []


def test_a_dry_run_deletes_nothing(store, lt_env):
    data_root = lt_env / "data"
    four_versions(store, data_root)
    before = on_disk(data_root), recorded(store)
    plan = collect(keep_last=1, min_age_s=0, store=store, data_root=data_root)
    assert plan.chunks and not plan.applied
    assert (on_disk(data_root), recorded(store)) == before


def test_unrecorded_chunk_files_go_once_old_and_a_young_folder_keeps_its_chunks(
    store, lt_env, tmp_path
):
    data_root = lt_env / "data"
    ids, samples = four_versions(store, data_root)
    # A build killed after writing chunks, before recording them: old files, no rows.
    lost = write_tree(data_root, ordered([image("pets/lost/1.png", "cat")]))
    old = time.time() - 7200
    lost_hashes = {leaf.hash for leaf in lost.leaves} | {n.hash for n in lost.nodes}
    for h in lost_hashes:
        for suffix in (ch.META_SUFFIX, ch.INDEX_SUFFIX, ch.NODE_SUFFIX):
            p = ch.chunk_path(data_root, h, suffix)
            if p.exists():
                os.utime(p, (old, old))
    # A build in flight that published a folder and has not recorded it yet, reusing the
    # chunks of the version gc is about to drop (the lake went back to that content).
    tree = write_tree(data_root, ordered(samples[1]))
    folder = mf.version_dir(data_root, "pets", "f" * 64)
    folder.mkdir(parents=True)
    (folder / mf.MANIFEST).write_text(json.dumps({"chunks": tree.manifest_section()}))
    plan = collect(keep_last=1, min_age_s=3600, apply=True, store=store, data_root=data_root)
    assert ids[1] in {v["version_id"] for v in plan.versions}
    remaining = on_disk(data_root)
    assert tree_hashes(tmp_path / "v1", samples[1]) <= remaining
    assert not (lost_hashes & remaining)
    assert {c["hash"] for c in plan.chunks if not c["recorded"]} == lost_hashes

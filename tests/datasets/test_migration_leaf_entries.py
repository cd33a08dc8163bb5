"""Migration 0013 on SQLite and PostgreSQL: a store whose leaves' samples are full
``chunk_entries`` rows (0012) becomes ``chunk_samples`` + ``leaf_entries`` read through the
``chunk_entries`` view, row for row the same, and back; versions keep answering diff and
contains as the brute force over their samples says; gc drops what only its versions held.
Each re-cut leaf then costs its samples three integers, not a full row again."""

from __future__ import annotations

import random

from alembic import command
from sqlalchemy import func, select, text

from pipeline.datasets import queries
from pipeline.datasets.gc import collect
from pipeline.metadata.datasets import ChunkSample, DatasetHead, LeafEntry
from pipeline.metadata.store import MetadataStore, alembic_config, make_engine, upgrade
from tests.datasets.chunk_synth import add_version, first_map
from tests.datasets.test_queries_chunks import brute_diff, lake, mutate

BEFORE = "0012_version_chunk_lookup"
_SAMPLE = 'path, md5, label, split, segment_id, "row", line, "copy", duplicate'
_ROWS = (
    'SELECT chunk_hash, pos, path, md5, label, split, segment_id, "row", line, "copy", '
    "duplicate FROM chunk_entries ORDER BY chunk_hash, pos"
)


def _key(x) -> tuple:
    return (x.path, x.md5, x.label, x.split, x.segment_id, x.row, x.line, x.copy, x.duplicate)


def _entries(engine) -> list[tuple]:
    with engine.connect() as conn:
        return [
            (*r[:10], bool(r[10]))  # duplicate: 0/1 on SQLite, a bool on PostgreSQL
            for r in conn.execute(text(_ROWS))
        ]


def _to(engine, db_url: str, revision: str) -> None:
    with engine.begin() as conn:
        cfg = alembic_config(db_url)
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, revision)


def test_leaf_entries_migrate_both_ways_and_keep_versions_answering(db_url, lt_env):
    data_root = lt_env / "data"
    store = MetadataStore(db_url)
    rng = random.Random(13)
    s1 = lake(600, rng)
    s2 = mutate(s1, rng, 40)  # leaves cut again: most of their samples are the old leaves'
    v1 = add_version(store, data_root, "pets", s1, n=1)
    v2 = add_version(store, data_root, "pets", s2, n=2, parent_id=v1)
    with store.session() as s:
        s.add(DatasetHead(dataset="pets", version_id=v2))
        distinct = len({_key(x) for x in s1 + s2})
        entries = s.scalar(select(func.count()).select_from(LeafEntry))
        samples = s.scalar(select(func.count()).select_from(ChunkSample))
    # Each distinct sample is stored once, however many leaves hold it.
    assert samples == distinct < entries
    engine = make_engine(db_url)
    at_head = _entries(engine)
    assert len(at_head) == entries

    _to(engine, db_url, BEFORE)  # the full rows again, one per sample per leaf
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM chunk_entries")).scalar() == entries
    assert _entries(engine) == at_head
    upgrade(engine)  # and back: the rows 0012 holds become samples and entries
    assert _entries(engine) == at_head
    with engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM chunk_samples")).scalar() == distinct
        # Every chunk has an id, and a new one goes after them all.
        assert conn.execute(text("SELECT COUNT(*) FROM chunks WHERE id IS NULL")).scalar() == 0
    engine.dispose()

    store.dispose()
    store = MetadataStore(db_url)
    s3 = mutate(s2, rng, 40)
    v3 = add_version(store, data_root, "pets", s3, n=3, parent_id=v2)
    for a, b, sa, sb in ((v1, v2, s1, s2), (v2, v3, s2, s3), (v3, v1, s3, s1)):
        got = queries.diff_versions(a, b, store=store)
        want = brute_diff(sa, sb)
        assert {k: [r["path"] for r in got[k]] for k in want} == want
    for key in (first_map(s1).popitem()[0], first_map(s3).popitem()[0], s2[7].md5):
        got = {
            r["version_id"] for r in queries.versions_containing(key, limit=100_000, store=store)
        }
        want = {
            v
            for v, s in ((v1, s1), (v2, s2), (v3, s3))
            if key in first_map(s) or any(x.md5 == key for x in s)
        }
        assert got == want

    # gc of v1 and v2: their leaves' entries go, and the samples only they held.
    with store.session() as s:
        s.get(DatasetHead, "pets").version_id = v3
    collect(keep_last=1, min_age_s=0, apply=True, store=store, data_root=data_root)
    with store.session() as s:
        kept = [
            (*r[:8], bool(r[8])) for r in s.execute(text(f"SELECT {_SAMPLE} FROM chunk_samples"))
        ]
    assert sorted(kept, key=repr) == sorted({_key(x) for x in s3}, key=repr)
    assert queries.get_version(v3, store=store)["samples"] == len(s3)
    store.dispose()

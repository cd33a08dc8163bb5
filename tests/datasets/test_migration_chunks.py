"""`laketrain db upgrade` of a store holding versions from before chunks (format 1: a
``version_samples`` row per sample), on SQLite and PostgreSQL: the old versions keep answering
show / diff / contains / latest exactly as the brute force over their samples says, beside new
chunked versions, and gc drops an old version's rows."""

from __future__ import annotations

import random

from sqlalchemy import func, inspect, select
from sqlalchemy.orm import Session
from typer.testing import CliRunner

from pipeline.datasets import queries
from pipeline.datasets.gc import collect
from pipeline.metadata.datasets import DatasetHead, VersionSample
from pipeline.metadata.store import (
    MetadataStore,
    current_revision,
    head_revision,
    make_engine,
    upgrade,
)
from tests.datasets.chunk_synth import add_version, first_map
from tests.datasets.test_queries_chunks import brute_diff, lake, mutate

BEFORE_CHUNKS = "0005_run_events"


class _Store:
    """What chunk_synth.add_version needs of a store, over a bare engine (MetadataStore would
    upgrade it to the head on open)."""

    def __init__(self, engine) -> None:
        self.engine = engine

    def session(self):
        class _Ctx:
            def __enter__(inner):
                inner.s = Session(self.engine)
                return inner.s

            def __exit__(inner, exc_type, *_):
                if exc_type is None:
                    inner.s.commit()
                inner.s.close()

        return _Ctx()


def test_db_upgrade_keeps_old_versions_answering(db_url, lt_env, monkeypatch):
    data_root = lt_env / "data"
    engine = make_engine(db_url)
    upgrade(engine, BEFORE_CHUNKS)
    assert "chunks" not in inspect(engine).get_table_names()
    rng = random.Random(4)
    s1 = lake(400, rng)
    s2 = mutate(s1, rng, 15)
    old = _Store(engine)
    v1 = add_version(old, data_root, "pets", s1, n=1, chunked=False)
    v2 = add_version(old, data_root, "pets", s2, n=2, chunked=False, parent_id=v1)
    with Session(engine) as s:
        s.add(DatasetHead(dataset="pets", version_id=v2))
        s.commit()
    engine.dispose()

    from pipeline.cli import app

    monkeypatch.setenv("METADATA_DB_URL", db_url)
    from pipeline.settings import get_settings

    get_settings.cache_clear()
    result = CliRunner().invoke(app, ["db", "upgrade"])
    assert result.exit_code == 0, result.output
    engine = make_engine(db_url)
    assert current_revision(engine) == head_revision()
    tables = set(inspect(engine).get_table_names())
    assert {"chunks", "version_chunks", "chunk_samples", "leaf_entries"} <= tables
    assert "chunk_entries" in inspect(engine).get_view_names()
    engine.dispose()

    store = MetadataStore(db_url)
    # A chunked version published after the upgrade, beside the old ones.
    s3 = mutate(s2, rng, 15)
    v3 = add_version(store, data_root, "pets", s3, n=3, parent_id=v2)

    assert queries.resolve_version("latest", "pets", store=store)["version_id"] == v2
    assert queries.get_version(v1[:8], store=store)["samples"] == len(s1)
    for a, b, sa, sb in ((v1, v2, s1, s2), (v2, v3, s2, s3), (v3, v1, s3, s1)):
        got = queries.diff_versions(a, b, store=store)
        want = brute_diff(sa, sb)
        assert {k: [r["path"] for r in got[k]] for k in want} == want
    for key in ("pets/table.csv", first_map(s1).popitem()[0]):
        got = {
            r["version_id"] for r in queries.versions_containing(key, limit=100_000, store=store)
        }
        assert got == {v for v, s in ((v1, s1), (v2, s2), (v3, s3)) if key in first_map(s)}

    # gc of the old versions drops their sample rows like before.
    with store.session() as s:
        s.get(DatasetHead, "pets").version_id = v3
    plan = collect(keep_last=1, min_age_s=0, apply=True, store=store, data_root=data_root)
    assert {v["version_id"] for v in plan.versions} == {v1, v2}
    with store.session() as s:
        assert s.scalar(select(func.count()).select_from(VersionSample)) == 0
    assert queries.get_version(v3, store=store)["samples"] == len(s3)
    store.dispose()

"""The local build's fork pool: workers use the parent's store handles (their inherited
connections dropped, never shared), and a pooled build publishes what a one-process build does."""

from __future__ import annotations

import json
from pathlib import Path

from tests.datasets.conftest import image_lake


def _segments(data_root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(data_root)): p.read_bytes()
        for p in sorted((data_root / "segments").rglob("*"))
        if p.is_file() and p.suffix in (".npy", ".json") and not p.name.startswith(".")
    }


def test_a_pooled_build_publishes_what_one_process_publishes(store, home, tmp_path, monkeypatch):
    from pipeline.datasets.build import run_build
    from pipeline.metadata.store import MetadataStore
    from pipeline.settings import get_settings

    image_lake(home, per_class=5)
    pooled = run_build("pets", workers=2, store=store, max_files=3)
    assert pooled.shards == 4 and pooled.decoded == 10
    # The parent's handle still works after its workers used (and dropped) their copies.
    assert run_build("pets", workers=2, store=store).version is None

    monkeypatch.setenv("DATA_ROOT", str(tmp_path / "one"))
    url = f"sqlite:///{tmp_path / 'one' / 'metadata.db'}"
    monkeypatch.setenv("METADATA_DB_URL", url)
    get_settings.cache_clear()
    one_store = MetadataStore(url)
    try:
        one = run_build("pets", workers=1, store=one_store, max_files=3)
    finally:
        one_store.dispose()
    assert one.version.version_id == pooled.version.version_id
    a, b = _segments(home / "data"), _segments(tmp_path / "one")
    assert a.keys() == b.keys() and len(a) == 12  # 4 segments: x.npy, y.npy, segment.json
    assert a == b
    # Every segment the workers wrote is recorded in the parent's store.
    ids = {json.loads(v)["segment_id"] for k, v in a.items() if k.endswith("segment.json")}
    assert {r.segment_id for r in pooled.segments} == ids

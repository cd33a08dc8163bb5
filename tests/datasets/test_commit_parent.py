"""A commit on a chunked parent reads the parent through its chunks: its diff counts compare
leaf lists (never a row per sample of the parent), its known splits come from the leaves'
.idx, and the version it writes is the one a commit with no parent to lean on writes."""

from __future__ import annotations

import pytest

from tests.datasets.conftest import image_lake, write_jpeg


def _no_row_per_sample(*_a, **_k):
    raise AssertionError("the commit read every row of a chunked parent")


def test_the_diff_counts_of_a_commit_on_a_chunked_parent_read_only_changed_leaves(
    store, home, monkeypatch: pytest.MonkeyPatch
):
    from pipeline.datasets.build import assemble, build, committing, full, parent
    from pipeline.datasets.reader import open_version

    paths = image_lake(home, per_class=150, classes=("cat", "dog", "owl"))
    v1 = build("pets", workers=1, store=store)
    lake = home / "lake"
    for rel in paths[5:9]:
        (lake / rel).unlink()
    for k, rel in enumerate(paths[200:203]):
        write_jpeg(lake / rel, seed=90_000 + k)  # other content, same path
    for k in range(6):
        write_jpeg(lake / f"pets/new/{k:03d}.jpg", seed=80_000 + k)
    for k in range(3):
        write_jpeg(lake / f"pets/dog/zz{k}.jpg", seed=70_000 + k)
    monkeypatch.setattr(assemble, "_version_paths", _no_row_per_sample)
    monkeypatch.setattr(parent, "_version_paths", _no_row_per_sample)
    # (a commit that imports the whole-version read by name reads it through its own module)
    monkeypatch.setattr(committing, "_version_paths", _no_row_per_sample, raising=False)
    monkeypatch.setattr(full, "_version_paths", _no_row_per_sample, raising=False)
    v2 = build("pets", workers=1, store=store)
    assert (v2.added, v2.removed, v2.changed) == (9, 4, 3)

    # The brute force, over what each version's reader holds.
    def by_path(version_id):
        r = open_version("pets", version_id, store=store)
        out = {}
        for i in range(len(r)):
            m = r.metadata(i)
            out.setdefault(m["path"], (m["md5"], m.get("label"), m["split"]))
        return out

    a, b = by_path(v1.version_id), by_path(v2.version_id)
    assert v2.added == len(b.keys() - a.keys()) and v2.removed == len(a.keys() - b.keys())
    assert v2.changed == sum(a[p][:2] != b[p][:2] for p in a.keys() & b.keys())
    # A content kept from v1 keeps its split (read from v1's leaf indexes, not recomputed).
    assert all(b[p][2] == a[p][2] for p in a.keys() & b.keys() if a[p][0] == b[p][0])


def test_a_commit_on_a_chunked_parent_writes_the_version_a_fresh_commit_writes(
    store, home, monkeypatch: pytest.MonkeyPatch
):
    """The same lake committed twice, once with the parent's leaves offered and once with no
    parent to lean on: the same version id, leaves and parts."""
    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build import build, chunkrows
    from pipeline.settings import get_settings

    image_lake(home, per_class=120, classes=("cat", "dog"))
    build("pets", workers=1, store=store)
    for k in range(4):
        write_jpeg(home / "lake" / f"pets/cat/zz{k}.jpg", seed=60_000 + k)
    offered: list[int] = []
    real = chunkrows.leaf_keys

    def spy(*a, **k):
        out = real(*a, **k)
        offered.append(len(out))
        return out

    monkeypatch.setattr(chunkrows, "leaf_keys", spy)
    from pipeline.datasets.build import committing, full

    monkeypatch.setattr(full, "leaf_keys", spy)
    # The full commit's offer (a delta commit, delta.py, cuts only its windows: its own test).
    monkeypatch.setattr(committing, "DELTA", False)
    v2 = build("pets", workers=1, store=store)
    assert offered and offered[0] > 0
    data_root = get_settings().data_root
    parts = (mf.version_dir(data_root, "pets", v2.version_id) / mf.PARTS).read_text()
    # The same leaves from scratch: every leaf file the parts list names is the chunking of
    # the version's samples with nothing offered.
    from pipeline.datasets import chunks
    from pipeline.datasets.chunkwrite import write_tree
    from pipeline.datasets.reader import open_version

    r = open_version("pets", v2.version_id, store=store)
    rows = [r.metadata(i) for i in range(len(r))]

    class _S:
        def __init__(self, m):
            self.path, self.md5, self.label, self.split = (
                m["path"],
                m["md5"],
                m["label"],
                m["split"],
            )
            self.segment_id, self.row, self.size = m["segment"], m["row"], m["size"]
            self.mtime_ns, self.duplicate = m["mtime_ns"], m["duplicate"]
            self.line, self.copy = m.get("line"), m.get("copy", 0)

    fresh = write_tree(home / "fresh", [_S(m) for m in rows])
    assert parts == "".join(
        chunks.chunk_relpath(leaf.hash, chunks.META_SUFFIX) + "\n" for leaf in fresh.leaves
    )

"""The Datasets app's own paged reads on chunked versions (and a format-1 one beside them):
diff pages, class/split counts without per-split manifest counts, thumbnails' picks — each
against a brute force over the sample lists."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pipeline.ui import data
from tests.datasets.chunk_synth import add_version, first_map, ordered
from tests.datasets.test_queries_chunks import lake, mutate


@pytest.fixture
def two(store, lt_env):
    rng = random.Random(11)
    old = lake(900, rng)
    new = mutate(old, rng, 25)
    a = add_version(store, lt_env / "data", "pets", old, n=1)
    b = add_version(store, lt_env / "data", "pets", new, n=2, parent_id=a)
    return store, (a, old), (b, new)


@pytest.mark.parametrize("chunked_a", [True, False])
def test_diff_pages_match_a_brute_force(store, lt_env, chunked_a):
    rng = random.Random(5)
    old = lake(600, rng)
    new = mutate(old, rng, 30)
    a = add_version(store, lt_env / "data", "pets", old, n=1, chunked=chunked_a)
    b = add_version(store, lt_env / "data", "pets", new, n=2)
    ma, mb = first_map(old), first_map(new)
    added = sorted(mb.keys() - ma.keys())
    removed = sorted(ma.keys() - mb.keys())
    changed = sorted(p for p in ma.keys() & mb.keys() if ma[p][:2] != mb[p][:2])
    full = data.diff_versions(store, a, b, limit=10_000)
    assert full["counts"] == {"added": len(added), "removed": len(removed), "changed": len(changed)}
    assert [(r["path"], r["md5"], r["label"], r["split"]) for r in full["added"]] == [
        (p, *mb[p]) for p in added
    ]
    assert [(r["path"], r["md5"]) for r in full["removed"]] == [(p, ma[p][0]) for p in removed]
    assert [
        (r["path"], r["old_md5"], r["md5"], r["old_label"], r["label"]) for r in full["changed"]
    ] == [(p, ma[p][0], mb[p][0], ma[p][1], mb[p][1]) for p in changed]
    page = data.diff_versions(store, a, b, limit=7, offset=7)
    assert [r["path"] for r in page["added"]] == added[7:14]
    assert [r["path"] for r in page["changed"]] == changed[7:14]
    assert page["counts"] == full["counts"]


def test_class_split_counts_from_the_chunks(two):
    store, (a, old), _ = two
    want = Counter((x.label, x.split) for x in old)
    with store.session() as s:
        got = data.class_split_counts(s, a, {})  # no per-split counts: grouped in SQL
    assert {(r["label"], sp): r[sp] for r in got for sp in ("train", "val") if r[sp]} == dict(want)


def test_thumbnail_picks_are_the_first_samples_of_each_label(two):
    store, _, (b, new) = two
    _, picks = data.thumbnail_rows(store, b, per_class=3)
    samples = ordered(new)
    want = []
    for label in sorted({x.label for x in samples}):
        idx = [i for i, x in enumerate(samples) if x.label == label][:3]
        want += [{"idx": i, "label": label, "path": samples[i].path} for i in idx]
    assert picks == want


def _images_only(samples):
    return [x for x in samples if x.line is None and x.copy == 0 and "aug" not in x.path]


@pytest.mark.parametrize("n,k", [(40, 3), (700, 25), (2500, 400)])
def test_diff_of_one_row_per_path_versions_in_sql_matches_a_brute_force(store, lt_env, n, k):
    """Images only (one row per path): SQLite counts and pages the leaves that differ itself.
    Its answer, at several sizes and page offsets, is the brute force's and the Python
    classification's (method="chunks"); unlabelled samples (label NULL) count as labels."""
    from tests.datasets.chunk_synth import image

    rng = random.Random(n)
    old = _images_only(lake(n, rng))
    old += [image(f"pets/unlabelled/{i:04d}.png", None) for i in range(5)]
    new = _images_only(mutate(old, rng, k))
    new = [image(x.path, "cat", content=x.path) if "unlabelled/0001" in x.path else x for x in new]
    a = add_version(store, lt_env / "data", "pets", old, n=1)
    b = add_version(store, lt_env / "data", "pets", new, n=2, parent_id=a)
    ma, mb = first_map(old), first_map(new)
    want = {
        "added": sorted(mb.keys() - ma.keys()),
        "removed": sorted(ma.keys() - mb.keys()),
        "changed": sorted(p for p in ma.keys() & mb.keys() if ma[p][:2] != mb[p][:2]),
    }
    assert "pets/unlabelled/0001.png" in want["changed"]  # NULL -> "cat" is a change
    for limit, offset in ((10_000, 0), (7, 0), (7, 7), (50, max(0, len(want["added"]) - 3))):
        got = data.diff_versions(store, a, b, limit=limit, offset=offset)
        merged = data.diff_versions(store, a, b, limit=limit, offset=offset, method="chunks")
        assert got["counts"] == {kind: len(paths) for kind, paths in want.items()}
        for kind, paths in want.items():
            shown = got["limit"]  # the page size, clamped by the API
            assert [r["path"] for r in got[kind]] == paths[offset : offset + shown], kind
            assert got[kind] == merged[kind], kind
    assert got["counts"] == merged["counts"]
    again = data.diff_versions(store, b, b)
    assert again["counts"] == {"added": 0, "removed": 0, "changed": 0}


def test_distant_versions_join_only_the_leaves_whose_path_ranges_meet(store, lt_env, monkeypatch):
    """A dataset that drops its oldest files and gains new ones in every class folder (a window
    sliding over numbered files), plus a folder only the old version has and one only the new
    has: of the leaves that differ, only those whose path ranges meet are joined; the others
    are counted whole as added or removed. Counts and pages equal the brute force's and the
    Python classification's, at several page offsets."""
    from pipeline.ui import diff_chunks
    from tests.datasets.chunk_synth import image
    from tests.datasets.test_queries_chunks import CLASSES

    def window(lo: int, hi: int) -> list:
        out = []
        for c in CLASSES:
            for i in range(lo, hi):
                rewritten = i % 17 == 0 and lo > 0  # new bytes, or a new label, in the overlap
                label = "yak" if i % 34 == 0 and lo > 0 and c != "yak" else c
                out.append(image(f"pets/{c}/{i:06d}.png", label, content=f"{c}{i}{rewritten}"))
        return out

    old = window(0, 1200) + [image(f"pets/gone/{i:04d}.png", "owl") for i in range(300)]
    new = window(1100, 2300) + [image(f"pets/zoo/{i:04d}.png", "owl") for i in range(300)]
    a = add_version(store, lt_env / "data", "pets", old, n=1)
    b = add_version(store, lt_env / "data", "pets", new, n=2)
    ma, mb = first_map(old), first_map(new)
    want = {
        "added": sorted(mb.keys() - ma.keys()),
        "removed": sorted(ma.keys() - mb.keys()),
        "changed": sorted(p for p in ma.keys() & mb.keys() if ma[p][:2] != mb[p][:2]),
    }
    assert all(want.values())
    met = []
    meeting = diff_chunks._meeting
    monkeypatch.setattr(
        diff_chunks,
        "_meeting",
        lambda xs, ys, e: met.append((len(xs), r := meeting(xs, ys, e))) or r,
    )
    for limit, offset in ((10_000, 0), (7, 0), (50, 100), (50, len(want["added"]) - 3)):
        got = data.diff_versions(store, a, b, limit=limit, offset=offset)
        merged = data.diff_versions(store, a, b, limit=limit, offset=offset, method="chunks")
        assert got["counts"] == {kind: len(paths) for kind, paths in want.items()}
        for kind, paths in want.items():
            shown = got["limit"]
            assert [r["path"] for r in got[kind]] == paths[offset : offset + shown], kind
            assert got[kind] == merged[kind], kind
    if store.engine.dialect.name != "sqlite":
        assert not met  # PostgreSQL classifies the differing leaves in Python
        return
    # Each side's differing leaves: all of them (nothing is shared), of which a few meet.
    (n_a, oa), (n_b, ob) = met[:2]
    assert 0 < len(oa) < n_a / 3 and 0 < len(ob) < n_b / 3, (n_a, len(oa), n_b, len(ob))

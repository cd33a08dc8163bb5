"""The near-duplicate index against brute force, its incremental use, and the report contract."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.datasets.quality.mih import BandIndex, band_shifts, query_pairs, self_pairs
from pipeline.datasets.quality.nearindex import NearIndex
from pipeline.datasets.quality.report import QualityReport


def _hashes(n: int, seed: int, planted: int = 0, bits: int = 4):
    """n random hashes with bits biased like photos' (crowded bands), plus ``planted`` copies
    of random ones with 1..bits bits flipped."""
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.2, 0.8, 64)
    b = rng.random((n, 64)) < p
    h = (b.astype(np.uint64) << np.arange(64, dtype=np.uint64)).sum(axis=1, dtype=np.uint64)
    src = rng.integers(0, n, planted)
    flips = np.zeros(planted, dtype=np.uint64)
    for k in range(planted):
        for bit in rng.choice(64, int(rng.integers(1, bits + 1)), replace=False):
            flips[k] |= np.uint64(1) << np.uint64(int(bit))
    return np.concatenate([h, h[src] ^ flips])


def _brute(h: np.ndarray, threshold: int) -> set[tuple[int, int]]:
    d = np.bitwise_count(h[:, None] ^ h[None, :])
    i, j = np.nonzero(np.triu(d <= threshold, 1))
    return set(zip(i.tolist(), j.tolist(), strict=True))


@pytest.mark.parametrize("threshold", [0, 2, 4, 7])
def test_self_pairs_are_exactly_the_pairs_brute_force_finds(threshold):
    h = _hashes(1500, seed=threshold, planted=200, bits=max(threshold, 1))
    h = np.concatenate([h, h[:5]])  # exact repeats too
    pairs = self_pairs(h, threshold).tolist()
    got = {tuple(p) for p in pairs}
    assert got == _brute(h, threshold) and got
    # Each pair once (a close pair shares several keys, repeats share all), in (i, j) order.
    assert len(pairs) == len(got) and pairs == sorted(pairs)


def test_query_pairs_are_exactly_the_pairs_brute_force_finds():
    h = _hashes(2000, seed=1, planted=300)
    old, new = h[:1800], h[1800:]
    new = np.concatenate([new, old[:5]])  # exact repeats of indexed hashes: every key shared
    index = BandIndex.build(old, 4)
    for threshold in (4, 2):
        pairs = query_pairs(new, index, threshold).tolist()
        got = {tuple(p) for p in pairs}
        d = np.bitwise_count(new[:, None] ^ old[None, :])
        want = set(zip(*[a.tolist() for a in np.nonzero(d <= threshold)], strict=True))
        assert got == want and got
        assert len(pairs) == len(got) and pairs == sorted(pairs)  # each pair once, in order


def test_bands_are_two_more_than_the_threshold_so_a_close_pair_shares_two():
    for t in (0, 4, 9, 32):
        bands = band_shifts(t)
        assert len(bands) == t + 2 and sum(w for _, w in bands) == 64
    with pytest.raises(ValueError, match="near_duplicate_distance"):
        band_shifts(33)


def test_the_index_fed_in_steps_knows_the_same_edges_as_one_full_pass(tmp_path):
    h = _hashes(3000, seed=2, planted=400)
    keys = [f"{i:032x}" for i in range(len(h))]
    full, _ = NearIndex(tmp_path / "full", 4).add(keys, h)
    stepped = NearIndex(tmp_path / "steps", 4)
    cuts = [0, 1000, 2500, 3100, 3300, len(h)]
    for a, b in zip(cuts, cuts[1:], strict=False):
        edges, new = stepped.add(keys[a:b], h[a:b])
        assert new == b - a
    assert {tuple(e) for e in edges.tolist()} == {tuple(e) for e in full.tolist()}
    assert len(edges) == len(full) and all(a < b for a, b in edges.tolist())  # each edge once
    # Runs merge as they go: a handful, not one per step.
    assert len(stepped.runs()) < len(cuts) - 1
    assert sum(len(r) for r in stepped.runs()) == len(h)
    # Adding what the index already holds writes nothing and counts nothing as new.
    before = sorted(p.name for p in (tmp_path / "steps").iterdir())
    edges_again, new = stepped.add(keys[:50], h[:50])
    assert new == 0 and sorted(p.name for p in (tmp_path / "steps").iterdir()) == before
    assert {tuple(e) for e in edges_again.tolist()} == {tuple(e) for e in full.tolist()}
    assert len(edges_again) == len(full)


def test_a_merge_after_a_killed_merge_keeps_each_edge_once(tmp_path):
    """A merge killed after writing its output but before removing its inputs leaves runs
    that share keys (and edges): the next merge must not keep an edge twice, while merges of
    runs with no key in common concatenate their edges as they are."""
    import shutil

    h = _hashes(2000, seed=3, planted=300)
    keys = [f"{i:032x}" for i in range(len(h))]
    full, _ = NearIndex(tmp_path / "full", 4).add(keys, h)
    index = NearIndex(tmp_path / "steps", 4)
    index.add(keys[1000:], h[1000:])  # the planted copies and many of their originals
    (left,) = index.runs()
    assert len(left.edges)
    shutil.copytree(left.folder, left.folder.with_name("f" * 32))  # the killed merge's input
    edges, new = index.add(keys[:1000], h[:1000])
    assert new == 1000 and len(index.runs()) == 1
    assert sorted(map(tuple, edges.tolist())) == sorted(map(tuple, full.tolist()))


def test_report_round_trips_through_json_and_names_metrics_like_the_rules():
    report = QualityReport(samples=90, train=70, val=20, files=100)
    report.invalid.count = 10
    report.label_conflicts.count = 2
    report.leaks.cross_split_near_duplicates = 3
    report.drift.label_tv_distance = 0.125
    back = QualityReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert back == report
    m = back.metrics()
    assert m["invalid_fraction"] == pytest.approx(0.1)
    assert (m["label_conflicts"], m["cross_split_near_duplicates"], m["val_samples"]) == (2, 3, 20)
    assert m["label_drift"] == 0.125
    assert "2 label conflicts" in back.summary_line() and "\n" not in back.summary_line()
    # A report written by another laketrain (unknown keys, missing sections) still reads.
    assert QualityReport.from_dict({"samples": 1, "future": {}, "invalid": {"count": 1, "x": 0}})
    assert QualityReport.from_dict(None) == QualityReport()


def test_a_killed_writers_temp_folder_is_removed_and_never_read_as_a_run(tmp_path):
    h = _hashes(200, seed=3)
    keys = [f"{i:032x}" for i in range(len(h))]
    index = NearIndex(tmp_path, 4)
    index.add(keys[:100], h[:100])
    dead = tmp_path / ".tmp-12345-deadbeef"
    dead.mkdir()
    (dead / "keys.npy").write_bytes(b"half a file")
    assert sum(len(r) for r in index.runs()) == 100  # a temp folder is no run
    _, new = index.add(keys[100:], h[100:])
    assert new == 100 and not dead.exists()


def _union_find_groups(edges, present=None) -> list[list[str]]:
    """The reference: a plain union-find over the edges, one by one."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent[a] != a:
            a = parent[a]
        return a

    for a_b, b_b in edges:
        a, b = a_b.decode(), b_b.decode()
        if present is not None and not {a.split(":")[0], b.split(":")[0]} <= present:
            continue
        parent.setdefault(a, a)
        parent.setdefault(b, b)
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    groups: dict[str, list[str]] = {}
    for key in parent:
        groups.setdefault(find(key), []).append(key)
    return sorted(sorted(g) for g in groups.values() if len(g) > 1)


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=120),
    st.booleans(),
    st.one_of(st.none(), st.sets(st.integers(0, 40))),
)
def test_near_duplicate_groups_are_the_connected_components_of_the_edges(pairs, rows, held):
    from pipeline.datasets.quality.neardup import components

    def key(i: int) -> str:  # an image's md5, or a table row's md5:<row> (4 rows a file)
        return f"{i // 4 if rows else i:032x}" + (f":{i % 4}" if rows else "")

    edges = np.asarray([(key(a), key(b)) for a, b in pairs], dtype="S40").reshape(-1, 2)
    present = None if held is None else {key(i).split(":")[0] for i in held}
    assert components(edges, present) == _union_find_groups(edges, present)
    chain = np.asarray([(f"{i:032x}", f"{i + 1:032x}") for i in range(300)], dtype="S32")
    assert components(chain) == [[f"{i:032x}" for i in range(301)]]  # the longest diameter


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=0, max_size=120),
    st.sampled_from(["md5", "shared-first-half", "upper-case", "row-keys"]),
)
def test_edge_keys_sort_as_np_unique_does(picks, kind):
    """EdgeGraph's key ids (integers from the md5's first half where that is exact) are
    np.unique's: the same keys in the same order, the same inverse, in every case where the
    shortcut must step aside (two md5s sharing a first half, upper-case hex sorting apart from
    its value, table row keys)."""
    import hashlib

    from pipeline.datasets.quality.neardup import _unique_keys

    def key(i: int) -> bytes:
        digest = hashlib.md5(str(i).encode()).hexdigest()
        if kind == "shared-first-half":
            digest = "0" * 16 + digest[16:] if i % 2 else digest
        elif kind == "upper-case":
            digest = digest.upper() if i % 3 == 0 else digest
        elif kind == "row-keys":
            digest = f"{digest}:{i % 4}"
        return digest.encode()

    flat = np.array([key(i) for i in picks], dtype="S") if picks else np.zeros(0, "S32")
    keys, inverse = _unique_keys(flat)
    want_keys, want_inverse = np.unique(flat, return_inverse=True)
    assert keys.tolist() == want_keys.tolist()
    assert inverse.tolist() == want_inverse.ravel().tolist()


def test_edges_by_rank_are_the_sorted_unique_fresh_edges_written_out():
    """The index's new edges, ranked as integers, are what sorting the byte pairs gives: each
    unordered pair once, smaller key first, no self-edge, only those touching a fresh key."""
    from pipeline.datasets.quality.nearindex import edges_by_rank

    rng = np.random.default_rng(5)
    new = np.array([f"{i:032x}".encode() for i in rng.integers(0, 400, 300)])  # repeats too
    met = np.array([f"{i:032x}".encode() for i in rng.integers(0, 600, 500)])
    ends = np.concatenate([new, met])
    a = rng.integers(0, len(new), 4000)
    b = rng.integers(0, len(ends), 4000)
    fresh = rng.random(len(new)) < 0.7
    got = edges_by_rank(ends, a, b, len(new), fresh).tolist()
    fresh_keys = set(new[fresh].tolist())
    want = sorted(
        {
            (min(x, y), max(x, y))
            for x, y in zip(ends[a].tolist(), ends[b].tolist(), strict=True)
            if x != y and (x in fresh_keys or y in fresh_keys)
        }
    )
    assert [tuple(e) for e in got] == want and len(want) > 1000
    assert edges_by_rank(ends, a[:0], b[:0], len(new), fresh).shape == (0, 2)


def test_sorted_edges_are_numpys_unique_rows_for_keys_of_any_length():
    """A run's merge sorts its edges as one string per pair; keys of unequal length (a table
    row's ``md5:row``) are NUL-padded fields, so the order is still the pairs' order."""
    from pipeline.datasets.quality.nearindex import _sorted_edges

    rng = np.random.default_rng(11)
    keys = np.array([f"{i:x}:{j}".encode() for i, j in rng.integers(0, 40, (200, 2))])
    edges = keys[rng.integers(0, len(keys), (3000, 2))]
    swap = edges[:, 0] > edges[:, 1]
    lo, hi = np.where(swap, edges[:, 1], edges[:, 0]), np.where(swap, edges[:, 0], edges[:, 1])
    want = np.unique(np.stack([lo, hi], axis=1), axis=0)
    assert _sorted_edges(edges).tolist() == want.tolist() and len(want) > 1000

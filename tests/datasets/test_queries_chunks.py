"""show / diff / contains on chunked versions (and format-1 ones, and a mix), at several
sizes, against a brute-force answer computed here from the sample lists."""

from __future__ import annotations

import random

import pytest

from pipeline.datasets import queries
from pipeline.datasets.version_rows import diff_maps, path_diff
from tests.datasets.chunk_synth import S, add_version, first_map, image, md5, ordered

CLASSES = ["cat", "dog", "owl", "yak"]


def lake(n: int, rng: random.Random) -> list[S]:
    out = [image(f"pets/{CLASSES[i % 4]}/{i:06d}.png", CLASSES[i % 4]) for i in range(n)]
    # A table file whose rows span several leaves, and an image with augmented copies.
    out += [S("pets/table.csv", md5(f"row{j}"), CLASSES[j % 4], line=j + 2) for j in range(300)]
    out += [S("pets/aug/a.png", md5("aug"), "cat", copy=c, duplicate=c > 0) for c in range(3)]
    rng.shuffle(out)
    return out


def mutate(samples: list[S], rng: random.Random, k: int) -> list[S]:
    """k of each: new files in a new folder, new files in every class folder, removed files,
    other content (md5) and other labels; and the table: a later row changes (the path does
    not), its last rows go."""
    imgs = [x for x in samples if x.line is None and x.copy == 0 and "aug" not in x.path]
    gone = set(rng.sample(range(len(imgs)), min(k, len(imgs))))
    rest = [x for i, x in enumerate(imgs) if i not in gone]
    out = []
    for i, x in enumerate(rest):
        if i % max(1, len(rest) // k) == 0:
            out.append(image(x.path, x.label, content=x.path + "v2"))
        elif i % max(1, len(rest) // k) == 1:
            out.append(image(x.path, "yak" if x.label != "yak" else "cat", content=x.path))
        else:
            out.append(x)
    out += [image(f"pets/new/{j:04d}.png", "owl") for j in range(k)]
    out += [image(f"pets/{c}/zz{j:03d}.png", c) for c in CLASSES for j in range(k // 4 + 1)]
    table = [x for x in samples if x.line is not None]
    table = [x if x.line != 200 else S(x.path, md5("edited"), x.label, line=x.line) for x in table]
    out += [x for x in table if x.line < 280]
    out += [x for x in samples if x.copy or "aug" in x.path]
    return out


def brute_diff(old: list[S], new: list[S]) -> dict[str, list[str]]:
    a, b = first_map(old), first_map(new)
    return {
        "added": sorted(b.keys() - a.keys()),
        "removed": sorted(a.keys() - b.keys()),
        "changed": sorted(p for p in a.keys() & b.keys() if a[p][:2] != b[p][:2]),
    }


@pytest.mark.parametrize("n,k", [(0, 1), (40, 3), (700, 20), (3000, 60)])
def test_diff_of_chunked_versions_matches_a_brute_force(store, lt_env, n, k):
    rng = random.Random(n)
    data_root = lt_env / "data"
    old = lake(n, rng)
    new = mutate(old, rng, k)
    a = add_version(store, data_root, "pets", old, n=1)
    b = add_version(store, data_root, "pets", new, n=2, parent_id=a)
    want = brute_diff(old, new)
    got = queries.diff_versions(a, b, store=store)
    assert {kind: [r["path"] for r in got[kind]] for kind in want} == want
    assert got["counts"] == {kind: len(v) for kind, v in want.items()}
    ma, mb = first_map(old), first_map(new)
    for r in got["changed"]:
        assert (r["old_md5"], r["old_label"]) == ma[r["path"]][:2]
        assert (r["new_md5"], r["new_label"]) == mb[r["path"]][:2]
    for r in got["added"]:
        assert (r["md5"], r["label"]) == mb[r["path"]][:2]
    # The reverse diff swaps added and removed.
    back = queries.diff_versions(b, a, store=store)
    assert [r["path"] for r in back["added"]] == want["removed"]
    assert [r["path"] for r in back["removed"]] == want["added"]


def test_diff_reads_only_the_leaves_that_differ(store, lt_env):
    """A small change to a large version: the maps the diff compares hold the changed paths
    and the paths of the few leaves around them, not the whole version."""
    rng = random.Random(7)
    old = lake(5000, rng)
    new = old + [image("pets/new/0001.png", "owl")]
    a = add_version(store, lt_env / "data", "pets", old, n=1)
    b = add_version(store, lt_env / "data", "pets", new, n=2)
    with store.session() as s:
        ma, mb = diff_maps(s, a, b)
    assert path_diff(ma, mb) == {"added": ["pets/new/0001.png"], "removed": [], "changed": []}
    assert len(mb) < 4 * 128 < len(first_map(new))


def test_diff_between_a_format_1_and_a_chunked_version(store, lt_env):
    rng = random.Random(3)
    old = lake(500, rng)
    new = mutate(old, rng, 10)
    a = add_version(store, lt_env / "data", "pets", old, n=1, chunked=False)
    b = add_version(store, lt_env / "data", "pets", new, n=2)
    want = brute_diff(old, new)
    for x, y, w in (
        (a, b, want),
        (b, a, {**want, "added": want["removed"], "removed": want["added"]}),
    ):
        got = queries.diff_versions(x, y, store=store)
        assert {kind: [r["path"] for r in got[kind]] for kind in w} == w


def brute_contains(versions: dict[str, list[S]], key: str, by_md5: bool) -> set[tuple]:
    out = set()
    for vid, samples in versions.items():
        for x in samples:
            if (x.md5 if by_md5 else x.path) == key:
                out.add((vid, x.path, x.md5, x.label, x.split, x.duplicate))
    return out


@pytest.mark.parametrize("n", [10, 400, 2500])
def test_contains_by_path_and_md5_matches_a_brute_force(store, lt_env, n):
    rng = random.Random(n)
    data_root = lt_env / "data"
    v1 = lake(n, rng)
    v2 = mutate(v1, rng, max(2, n // 50))
    v3 = mutate(v2, rng, max(2, n // 50))
    versions = {}
    for i, (samples, chunked) in enumerate([(v1, False), (v2, True), (v3, True)]):
        versions[add_version(store, data_root, "pets", samples, n=i, chunked=chunked)] = samples
    keys = [(x.path, False) for x in rng.sample(v2, 5)] + [(x.md5, True) for x in rng.sample(v3, 5)]
    keys += [("pets/table.csv", False), (md5("aug"), True), ("pets/none.png", False)]
    for key, by_md5 in keys:
        got = queries.versions_containing(key, limit=100_000, store=store)
        assert {
            (r["version_id"], r["path"], r["md5"], r["label"], r["split"], r["duplicate"])
            for r in got
        } == brute_contains(versions, key, by_md5), key
        for r in got:  # the index of the (version, path)'s first such sample
            samples = ordered(versions[r["version_id"]])
            first = next(
                i
                for i, x in enumerate(samples)
                if x.path == r["path"]
                and x.md5 == r["md5"]
                and x.split == r["split"]
                and x.label == r["label"]
                and x.duplicate == r["duplicate"]
            )
            assert r["index"] == first
        assert [r["created_at"] for r in got] == sorted(
            (r["created_at"] for r in got), reverse=True
        )


def test_show_of_a_chunked_version(store, lt_env):
    samples = lake(50, random.Random(1))
    a = add_version(store, lt_env / "data", "pets", samples, n=1)
    got = queries.get_version(a[:10], store=store)
    assert got["version_id"] == a and got["samples"] == len(samples)
    assert got["manifest"]["format_version"] == 2


def test_queries_on_real_builds_match_what_the_readers_hold(store, home):
    """Versions built by the pipeline itself: diff and contains agree with a brute force
    over each version's samples as its reader returns them (metadata(i))."""
    from pipeline.datasets.build import build
    from pipeline.datasets.reader import open_version
    from pipeline.ui import data
    from tests.datasets.conftest import image_lake, write_jpeg

    paths = image_lake(home, per_class=120, classes=("cat", "dog", "owl"))
    v1 = build("pets", workers=1, store=store)
    lake = home / "lake"
    for rel in paths[5:10]:
        (lake / rel).unlink()
    for k, rel in enumerate(paths[200:203]):
        write_jpeg(lake / rel, seed=90_000 + k)
    for k in range(8):
        write_jpeg(lake / f"pets/new/{k:03d}.jpg", seed=80_000 + k)
    v2 = build("pets", workers=1, store=store)
    readers = {v.version_id: open_version("pets", v.version_id, store=store) for v in (v1, v2)}
    held = {vid: [r.metadata(i) for i in range(len(r))] for vid, r in readers.items()}

    def as_samples(rows):
        return [S(m["path"], m["md5"], m.get("label"), m["split"]) for m in rows]

    want = brute_diff(as_samples(held[v1.version_id]), as_samples(held[v2.version_id]))
    assert want["added"] and want["removed"] and want["changed"]
    got = queries.diff_versions(v1.version_id, v2.version_id, store=store)
    assert {kind: [r["path"] for r in got[kind]] for kind in want} == want
    page = data.diff_versions(store, v1.version_id, v2.version_id, limit=1000)
    assert {kind: [r["path"] for r in page[kind]] for kind in want} == want
    for key, field in [(paths[0], "path"), (paths[7], "path"), ("pets/new/003.jpg", "path")] + [
        (held[v2.version_id][i]["md5"], "md5") for i in (0, 150, 300)
    ]:
        expected = {vid for vid, rows in held.items() if any(m[field] == key for m in rows)}
        assert {r["version_id"] for r in queries.versions_containing(key, store=store)} == expected
        for r in queries.versions_containing(key, store=store):
            assert held[r["version_id"]][r["index"]][field] == key

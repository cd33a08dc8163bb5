"""The head's near-duplicate groups (pipeline/datasets/quality/neargroups.py): grown by a delta
commit's new edges, they must be the groups the whole graph gives (the same members, entries,
order and splits for the new contents), and a groups file that is missing, damaged or another
version's must be ignored. tests/datasets/test_delta_commit.py holds whole delta commits that
grow them to the full commit's result."""

from __future__ import annotations

import hashlib
import logging
import random
import zlib

import numpy as np
import pytest

from tests.datasets.conftest import write_jpeg, write_near_copy, write_recipe

CAP = 3  # paths kept per entry: small, so that merging first-paths lists is exercised


def _key(i: int) -> str:
    return hashlib.md5(str(i).encode()).hexdigest()


def _entry(keys, splits: dict[str, str]) -> dict:
    """A group's entry when each content is one sample at path p/<key>."""
    return {
        "paths": sorted(f"p/{k}" for k in keys)[:CAP],
        "splits": sorted({splits[k] for k in keys}),
        "size": len(keys),
    }


def _groups(edges: list[tuple[str, str]], present: set[str]) -> list[list[str]]:
    from pipeline.datasets.quality.neardup import EdgeGraph

    arr = np.asarray(edges, dtype="S32").reshape(-1, 2)
    return EdgeGraph(arr).groups(present)


class _Recipe:
    """The one recipe method the split decision calls: a function of path and md5."""

    @staticmethod
    def split_for(path: str, md5: str) -> str:
        return "val" if int(md5[:2], 16) % 3 == 0 else "train"


def _world(seed: int):
    """A random head: contents indexed earlier (some no longer in the version), their edges,
    the version's contents with splits; then a commit: new contents, new edges (each with a new
    key), and touched head contents that stay."""
    rng = random.Random(seed)
    old = [_key(i) for i in range(rng.randint(20, 80))]
    new = [_key(1000 + i) for i in range(rng.randint(1, 25))]
    gone = set(rng.sample(old, len(old) // 5))  # indexed, not in the head
    head = [k for k in old if k not in gone]
    old_edges = {tuple(sorted(rng.sample(old, 2))) for _ in range(rng.randint(5, 60))}
    new_edges = set()
    for _ in range(rng.randint(1, 40)):
        a = rng.choice(new)
        b = rng.choice(old + new)
        if a != b:
            new_edges.add(tuple(sorted((a, b))))
    splits = {k: rng.choice(("train", "train", "val")) for k in old}
    # The change set's contents: some of the head's (that stay) and the new ones.
    touched = set(rng.sample(head, min(3, len(head)))) | set(new)
    return rng, old, new, gone, head, sorted(old_edges), sorted(new_edges), splits, touched


def _head_groups(head, old_edges, splits):
    from pipeline.datasets.quality.neargroups import NearGroups

    found = _groups(old_edges, set(head))
    return NearGroups.of(4, [(g, _entry(g, splits), [splits[k] for k in g]) for g in found])


@pytest.mark.parametrize("seed", range(40))
def test_grown_groups_are_the_whole_graphs(seed) -> None:
    from pipeline.datasets.quality.neardup import EdgeGraph, _splits_for_new
    from pipeline.datasets.quality.neargroups import grow, merged_entry

    _rng, old, new, gone, head, old_edges, new_edges, splits, touched = _world(seed)
    hg = _head_groups(head, old_edges, splits)
    first_path = {k: f"p/{k}" for k in touched}
    growth = grow(
        hg,
        np.asarray(new_edges, dtype="S32").reshape(-1, 2),
        first_path,
        touched,
        {k: splits[k] for k in touched if k in splits},
        lambda md5s: {k: splits[k] for k in md5s if k in set(head)},
    )
    assert growth is not None
    present = set(head) | set(new)

    # The split of each new content: as the whole graph decides it.
    graph = EdgeGraph(np.asarray(old_edges + new_edges, dtype="S32").reshape(-1, 2))
    also = set(head) & graph.contents()
    want_splits = _splits_for_new(
        graph, sorted(new), first_path, {k: splits[k] for k in head}, _Recipe(), also
    )
    got_splits = growth.splits_for_new(sorted(new), first_path, _Recipe())
    assert got_splits == want_splits
    all_splits = {**splits, **{k: got_splits.get(k, "train") for k in new}}

    # The groups, their order and entries: as the whole graph gives them. (Touched groups are
    # read again from their members, as compute._grown does.)
    touched_gids = {int(g) for k, g in zip(hg.keys, hg.group, strict=True) if k.decode() in touched}
    members = hg.members()
    entries = {}
    for ci, comp in enumerate(growth.components):
        if touched_gids & set(comp.old):
            keys = [m.decode() for g in comp.old for m in members[g]] + comp.extra
            entries[ci] = _entry(keys, all_splits)
        else:
            parts = [hg.entries[g] for g in comp.old] + [_entry(comp.extra, all_splits)]
            entries[ci] = merged_entry(parts, CAP)
    replaced = {
        g: _entry([m.decode() for m in members[g]], all_splits)
        for g in touched_gids - {g for comp in growth.components for g in comp.old}
    }
    extra = {k: all_splits[k] for comp in growth.components for k in comp.extra}
    got = growth.apply(entries, extra, replaced)

    want = _groups(old_edges + new_edges, present)
    assert [[m.decode() for m in ks] for ks in got.members()] == want
    assert got.entries == [_entry(g, all_splits) for g in want]
    assert [got.splits[c] for c in got.split] == [all_splits[k.decode()] for k in got.keys]
    assert gone.isdisjoint(k.decode() for k in got.keys)


def test_a_grouped_content_leaving_the_version_is_not_grown() -> None:
    """A group may split when one of its contents goes: the whole graph must decide."""
    from pipeline.datasets.quality.neargroups import grow

    for seed in range(40):
        _rng, _old, new, _gone, head, old_edges, new_edges, splits, _t = _world(seed)
        hg = _head_groups(head, old_edges, splits)
        if len(hg.keys):
            break
    leaving = hg.keys[0].decode()
    growth = grow(
        hg,
        np.asarray(new_edges, dtype="S32").reshape(-1, 2),
        {k: f"p/{k}" for k in new},  # ``leaving`` is touched and has no file now
        {leaving},
        {leaving: splits[leaving]},
        lambda md5s: {k: splits[k] for k in md5s if k in set(head)},
    )
    assert growth is None


def test_the_file_round_trips_and_refuses_damage(tmp_path, caplog) -> None:
    from pipeline.datasets.chunks import LeafRef
    from pipeline.datasets.quality import neargroups

    for seed in range(40):  # a head of several groups
        _rng, _old, _new, _gone, head, old_edges, _ne, splits, _t = _world(seed)
        groups = _head_groups(head, old_edges, splits)
        if len(groups.entries) >= 2:
            break
    assert len(groups.entries) >= 2
    leaves = [LeafRef("h1", 5, 10, "x"), LeafRef("h2", 7, 5, "y")]
    neargroups.write(tmp_path, "pets", "v1", leaves, groups)
    back = neargroups.load(tmp_path, "pets", "v1", leaves, 4)
    assert back is not None
    for name in ("keys", "group", "split"):
        assert np.array_equal(getattr(back, name), getattr(groups, name)), name
    assert (back.entries, back.splits, back.threshold) == (groups.entries, groups.splits, 4)

    # Another version's name, another tree, another distance: not these groups.
    path = neargroups.path_of(tmp_path, "pets", "v1")
    with caplog.at_level(logging.WARNING, logger="laketrain.build"):
        assert neargroups.load(tmp_path, "pets", "v1", leaves[:1], 4) is None
        assert neargroups.load(tmp_path, "pets", "v1", leaves, 5) is None
        path.rename(neargroups.path_of(tmp_path, "pets", "v2"))
        assert neargroups.load(tmp_path, "pets", "v2", leaves, 4) is None
    assert sum("another version's" in r.getMessage() for r in caplog.records) == 3
    assert neargroups.load(tmp_path, "pets", "v1", leaves, 4) is None  # missing: silent
    # A dataset's folder keeps one head's caches: writing v3's drops v2's (and a temp file).
    temp = path.with_name(".v2.neargroups.77.tmp")
    temp.write_bytes(b"torn")
    neargroups.write(tmp_path, "pets", "v3", leaves, groups)
    assert [p.name for p in path.parent.iterdir()] == ["v3.neargroups"]

    raw = b"".join(neargroups.encode("v1", leaves, groups))
    neargroups.decode(raw)
    flipped = bytearray(raw)
    flipped[len(raw) // 2] ^= 0x01
    for bad in (bytes(flipped), raw[:-3], raw + b"x", b"", raw[:8]):
        with pytest.raises(ValueError):
            neargroups.decode(bad)
    # Whole and checksummed, but an entry of another shape: refused.
    odd = neargroups.NearGroups(
        groups.threshold, groups.keys, groups.group, groups.split, groups.splits,
        [{"paths": "p", "splits": [], "size": 1}] * len(groups.entries),
    )  # fmt: skip
    with pytest.raises(ValueError, match="not {paths"):
        neargroups.decode(b"".join(neargroups.encode("v1", leaves, odd)))
    # Whole and checksummed, but a group index past its entries: refused too.
    body = bytearray(raw[9:])
    at = body.index(b"\n") + 1 + 32 * len(groups.keys)  # the first key's group
    body[at : at + 4] = np.int32(len(groups.entries)).tobytes()
    with pytest.raises(ValueError, match="do not fit"):
        neargroups.decode(b"%08x\n" % zlib.crc32(body) + bytes(body))


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("damage", ["flip", "empty", "another version"])
def test_a_damaged_groups_file_is_ignored_and_the_report_comes_from_the_whole_graph(
    store, home, monkeypatch, caplog, damage
) -> None:
    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build import build
    from pipeline.datasets.quality import neardup, neargroups
    from pipeline.settings import get_settings

    write_recipe(home, "pets")
    lake = home / "lake" / "pets"
    for ci, cls in enumerate(("cat", "dog")):
        for i in range(8):
            write_jpeg(lake / cls / f"{i:03d}.jpg", seed=ci * 100 + i)
    write_near_copy(lake / "cat/000.jpg", lake / "dog/near0.png")
    first = build("pets", workers=1, store=store)
    data = get_settings().data_root
    path = neargroups.path_of(data, "pets", first.version_id)
    assert path.is_file()
    if damage == "flip":
        raw = bytearray(path.read_bytes())
        raw[-1] ^= 0x01
        path.write_bytes(bytes(raw))
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # whole, but written for another version
        other = neargroups.decode(path.read_bytes())[1]
        path.write_bytes(b"".join(neargroups.encode("f" * 64, [], other)))

    grown: list[object] = []
    real = neardup.grow
    monkeypatch.setattr(neardup, "grow", lambda *a: grown.append(a) or real(*a))
    write_near_copy(lake / "cat/000.jpg", lake / "cat/near1.png")  # the same copy: exact duplicate
    write_near_copy(lake / "dog/001.jpg", lake / "cat/near2.png")  # a new group
    with caplog.at_level(logging.WARNING, logger="laketrain.build"):
        second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + 2
    assert grown == []  # the whole graph decided
    assert any(str(path) in r.getMessage() for r in caplog.records)
    manifest, _sha = mf.read_manifest(mf.version_dir(data, "pets", second.version_id))
    near = manifest["quality"]["near_duplicates"]
    assert (near["groups"], near["samples"]) == (2, 5)
    # The new head's groups are written again, whole, and serve the next delta commit.
    assert neargroups.path_of(data, "pets", second.version_id).is_file()
    write_near_copy(lake / "dog/002.jpg", lake / "cat/near3.png")
    third = build("pets", workers=1, store=store)
    assert third is not None and len(grown) == 1
    manifest, _sha = mf.read_manifest(mf.version_dir(data, "pets", third.version_id))
    near = manifest["quality"]["near_duplicates"]
    assert (near["groups"], near["samples"]) == (3, 7)

"""The head's digest (pipeline/datasets/build/digest.py): the one file a delta commit reads
instead of every head leaf's index. It must hold exactly what the leaves hold (a
wrong digest would give every later version a wrong id or wrong counts), be used when it
matches, and be ignored, with the same result, when it is missing, damaged or another
version's."""

from __future__ import annotations

import json
import logging
import zlib

import numpy as np
import pytest

from tests.datasets.conftest import write_jpeg, write_recipe

CLASSES = ("cat", "dog", "emu")


def _first_version(store, home, monkeypatch):
    from pipeline.datasets import chunks
    from pipeline.datasets.build import build
    from pipeline.settings import get_settings

    monkeypatch.setattr(chunks, "LEAF_TARGET", 4)  # many leaves, so that most are reused
    write_recipe(home, "pets")
    for ci, cls in enumerate(CLASSES):
        for i in range(10):
            write_jpeg(home / "lake" / f"pets/{cls}/{i:03d}.jpg", seed=ci * 100 + i)
    return build("pets", workers=1, store=store), get_settings().data_root


def _expected(data, version_id: str):
    """What the version's digest must hold, read the slow way: every leaf's index file."""
    from pipeline.datasets import chunkread
    from pipeline.datasets import manifest as mf

    manifest = json.loads((mf.version_dir(data, "pets", version_id) / mf.MANIFEST).read_text())
    leaves = chunkread.walk_leaves(data, manifest["chunks"])
    return leaves, mf.merge_codes([chunkread.read_index(data, leaf) for leaf in leaves])


def _assert_digest_is_the_leaves(data, version_id: str, store=None) -> None:
    from pipeline.datasets.build import digest
    from pipeline.datasets.build.chunkrows import leaf_edges

    leaves, codes = _expected(data, version_id)
    got = digest.load(data, "pets", version_id, leaves)
    assert got is not None
    assert got.leaves == [(leaf.hash, leaf.count) for leaf in leaves]
    assert got.codes["labels"] == codes["labels"] and got.codes["n"] == codes["n"]
    for name in ("label", "split", "md5"):
        assert np.array_equal(got.codes[name], codes[name]), name
    if store is not None:
        # Each leaf's first and last (path, line, copy): what the store's rows say.
        with store.session() as session:
            assert got.edges_by_hash() == leaf_edges(session, leaves)


def _add_files(home, n: int = 2) -> None:
    for i in range(n):
        write_jpeg(home / "lake" / f"pets/{CLASSES[i % 3]}/new{i}.jpg", seed=9_000 + i)


def test_each_head_gets_a_digest_equal_to_its_leaves_and_the_delta_reads_no_head_index(
    store, home, monkeypatch
) -> None:
    from pipeline.datasets.build import build, chunkrows, delta, digest
    from pipeline.datasets.quality import neargroups

    first, data = _first_version(store, home, monkeypatch)
    _assert_digest_is_the_leaves(data, first.version_id, store)  # the full commit's

    reads: list[str] = []
    real = delta._reused_index
    monkeypatch.setattr(
        delta,
        "_reused_index",
        lambda d, leaf, present: reads.append(leaf.hash) or real(d, leaf, present),
    )
    edge_reads: list[int] = []
    real_edges = chunkrows.leaf_edges
    monkeypatch.setattr(
        chunkrows, "leaf_edges", lambda s, leaves: edge_reads.append(1) or real_edges(s, leaves)
    )
    _add_files(home)
    second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + 2
    assert reads == []  # every reused head leaf came from the digest
    assert edge_reads == []  # and the windows were placed by its edges, not the store's rows
    monkeypatch.setattr(chunkrows, "leaf_edges", real_edges)
    _assert_digest_is_the_leaves(data, second.version_id, store)  # the delta commit's
    # Only the head's digest (and its near-duplicate groups) are kept.
    folder = digest.path_of(data, "pets", second.version_id).parent
    assert sorted(p.name for p in folder.iterdir()) == [
        f"{second.version_id}{suffix}" for suffix in (digest.SUFFIX, neargroups.SUFFIX)
    ]

    _add_files(home, 3)  # a delta from a digest the delta commit wrote
    third = build("pets", workers=1, store=store)
    assert reads == [] and third.samples == first.samples + 3
    _assert_digest_is_the_leaves(data, third.version_id, store)


def _flip_a_byte(path) -> None:
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    path.write_bytes(bytes(raw))


def _truncate(path) -> None:
    path.write_bytes(path.read_bytes()[:-7])


# A file beside the store, whichever backend: its damage is checked on one (make test's time).
@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "another tree", "missing"])
def test_a_damaged_or_foreign_digest_is_ignored_and_the_version_comes_out_right(
    store, home, monkeypatch, caplog, damage
) -> None:
    """The head's digest damaged (a flipped byte, cut short, empty), valid but of another leaf list,
    or gone: the commit says so, reads the head's leaves instead, and publishes the version
    whose id is the one its leaves give, with a new digest equal to its leaves."""
    from pipeline.datasets import chunkread
    from pipeline.datasets import manifest as mf
    from pipeline.datasets.build import build, delta, digest
    from pipeline.datasets.chunks import LeafRef

    first, data = _first_version(store, home, monkeypatch)
    _add_files(home)
    path = digest.path_of(data, "pets", first.version_id)
    if damage == "flip":
        _flip_a_byte(path)
    elif damage == "truncate":
        _truncate(path)
    elif damage == "empty":  # renamed into place, never synced, then a crash
        path.write_bytes(b"")
    elif damage == "another tree":
        # Whole and checksummed, under this version's name, but one leaf short.
        whole = digest.decode(path.read_bytes())
        kept = whole.leaves[:-1]
        rows = sum(count for _h, count in kept)
        leaves = [LeafRef(h, count, 0, "") for h, count in kept]
        digest.write(data, "pets", first.version_id, leaves, whole.slice(0, rows))
    else:
        path.unlink()

    reads: list[str] = []
    real = delta._reused_index
    monkeypatch.setattr(
        delta,
        "_reused_index",
        lambda d, leaf, present: reads.append(leaf.hash) or real(d, leaf, present),
    )
    with caplog.at_level(logging.WARNING, logger="laketrain.build"):
        second = build("pets", workers=1, store=store)
    assert second is not None and second.samples == first.samples + 2
    assert reads, "the head's leaves were not read"
    if damage != "missing":
        assert any(str(path) in r.getMessage() for r in caplog.records)
    leaves, _codes = _expected(data, second.version_id)
    indexes = [chunkread.read_index(data, leaf) for leaf in leaves]
    assert mf.version_id_of_indexes("pets", first_recipe_hash(store), indexes) == second.version_id
    _assert_digest_is_the_leaves(data, second.version_id)


def first_recipe_hash(store) -> str:
    from pipeline.metadata.datasets import DatasetVersion

    with store.session() as session:
        return session.query(DatasetVersion.recipe_hash).limit(1).scalar()


def test_decode_refuses_what_is_not_a_whole_digest(tmp_path) -> None:
    from pipeline.datasets.build import digest
    from pipeline.datasets.chunks import LeafRef

    codes = {
        "labels": ["a", "b"],
        "n": 3,
        "label": np.asarray([0, 1, -1], np.int32),
        "split": np.asarray([0, 1, 0], np.int8),
        "md5": np.asarray([b"0" * 32, b"1" * 32, b"2" * 32], "S32"),
    }
    leaves = [LeafRef("h1", 2, 10, "x"), LeafRef("h2", 1, 5, "y")]
    digest.write(tmp_path, "pets", "v", leaves, codes)
    raw = digest.path_of(tmp_path, "pets", "v").read_bytes()
    back = digest.decode(raw)
    assert back.leaves == [("h1", 2), ("h2", 1)] and back.version_id == "v"
    assert back.slice(1, 3)["md5"].tolist() == [b"1" * 32, b"2" * 32]
    assert back.spans() == {"h1": (0, 2), "h2": (2, 3)}
    for bad in (raw[:-1], raw[:9] + raw[10:], b"0" + raw[1:], raw + b"x"):
        with pytest.raises(ValueError):
            digest.decode(bad)
    # Checksummed but not a digest's header (a hand-made or hostile file): refused, no crash.
    for header in (b"[1, 2]", b'{"format": 1, "version_id": "v", "leaves": [["h", -1]], '
                   b'"labels": [], "n": -1}'):  # fmt: skip
        body = header + b"\n"
        with pytest.raises(ValueError):
            digest.decode(b"%08x\n" % zlib.crc32(body) + body)
    # A digest whose leaves do not add up to its rows is refused on write, and not written.
    digest.write(tmp_path, "pets", "w", leaves[:1], codes)
    assert not digest.path_of(tmp_path, "pets", "w").exists()


def test_edges_round_trip_and_a_list_that_does_not_fit_its_leaves_is_left_out(tmp_path) -> None:
    from pipeline.datasets import cachefile
    from pipeline.datasets.build import digest
    from pipeline.datasets.chunks import LeafRef

    codes = {
        "labels": ["a"],
        "n": 3,
        "label": np.asarray([0, 0, -1], np.int32),
        "split": np.asarray([0, 1, 0], np.int8),
        "md5": np.asarray([b"0" * 32, b"1" * 32, b"2" * 32], "S32"),
    }
    leaves = [LeafRef("h1", 2, 10, "x"), LeafRef("h2", 1, 5, "y")]
    edges = [(("a/1", None, 0), ("a/2 é", 3, 1)), (("b/\udcff", None, 0), ("b/\udcff", None, 0))]
    digest.write(tmp_path, "pets", "v", leaves, codes, edges)
    back = digest.decode(digest.path_of(tmp_path, "pets", "v").read_bytes())
    assert back.edges == edges
    assert back.edges_by_hash() == {"h1": edges[0], "h2": edges[1]}
    digest.write(tmp_path, "pets", "v", leaves, codes, edges[:1])  # one short: left out
    assert digest.decode(digest.path_of(tmp_path, "pets", "v").read_bytes()).edges is None
    # Checksummed, but an entry of another shape: the digest's codes stay usable, its edges
    # are not used (the store's rows are read instead).
    for bad in ([["a", None, 0, "b", None]] * 2, [["a", "1", 0, "b", None, 0]] * 2, {"h1": 1}):
        parts = cachefile.frame(
            {"format": 1, "version_id": "v", "leaves": [["h1", 2], ["h2", 1]],
             "labels": ["a"], "n": 3, "edges": bad},
            [(codes[name], dtype) for name, dtype in digest._FIELDS],
        )  # fmt: skip
        got = digest.decode(b"".join(bytes(p) for p in parts))
        assert got.edges is None and got.codes["n"] == 3

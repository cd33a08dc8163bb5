"""Content-addressed chunks (pipeline/datasets/chunks.py): cutting, encoding, the tree, reuse."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.datasets import chunkread
from pipeline.datasets import chunks as ck
from pipeline.datasets.chunkpack import PACK_SUFFIX
from pipeline.datasets.chunkwrite import write_tree


@dataclass(frozen=True)
class S:
    path: str
    md5: str
    label: str | None = "cat"
    split: str = "train"
    segment_id: str = "a" * 64
    row: int = 0
    size: int | None = 10
    mtime_ns: int | None = 5
    duplicate: bool = False
    line: int | None = None
    copy: int = 0


def _samples(names: list[str]) -> list[S]:
    return [
        S(
            f"ds/{'cat' if i % 2 else 'dog'}/{n}.png",
            f"{i:032x}",
            row=i,
            label="cat" if i % 2 else None,
        )
        for i, n in enumerate(sorted(names))
    ]


def test_a_leaf_line_is_exactly_the_sorted_json_record_without_index():
    s = S('ds/ü "q".png', "f" * 32, label="a\tb", line=3, copy=2, size=None, mtime_ns=None)
    rec = {
        "path": s.path, "md5": s.md5, "label": s.label, "split": s.split, "segment": s.segment_id,
        "row": s.row, "size": None, "mtime_ns": None, "duplicate": False, "line": 3, "copy": 2,
    }  # fmt: skip
    assert ck.entry_line(s) == json.dumps(rec, sort_keys=True)
    plain = S("ds/x.png", "0" * 32)
    assert "copy" not in json.loads(ck.entry_line(plain))
    assert "line" not in json.loads(ck.entry_line(plain))


def test_leaf_index_round_trips_and_maps_segments_and_labels():
    samples = [
        S("a", "1" * 32, label="dog", segment_id="s2", row=7, split="val"),
        S("b", "2" * 32, label=None, segment_id="s1", row=3),
        S("c", "3" * 32, label="cat", segment_id="s2", row=9),
    ]
    out = ck.decode_index(ck.index_bytes(samples))
    assert out["segments"] == ["s1", "s2"] and out["labels"] == ["cat", "dog"]
    assert out["seg"].tolist() == [1, 0, 1]
    assert out["row"].tolist() == [7, 3, 9]
    assert out["label"].tolist() == [1, -1, 0]
    assert out["split"].tolist() == [1, 0, 0]
    assert out["md5"].astype("U32").tolist() == [s.md5 for s in samples]


@pytest.mark.parametrize(
    "labels",
    [["cat", "dog"], ['a, "segments": ["x"]', "b"], ['", "segments": [', "é\n"], []],
)
def test_a_leaf_index_read_without_segments_has_the_same_codes(labels):
    """decode_index(segments=False) skips the segments table, and only it, even when a label
    holds the text of the key that starts it."""
    samples = [
        S(f"p{i}", f"{i:032x}", label=labels[i % len(labels)] if labels else None,
          segment_id=f"{i % 3:064x}", row=i, split="val" if i % 2 else "train")
        for i in range(7)
    ]  # fmt: skip
    raw = ck.index_bytes(samples)
    full, codes = ck.decode_index(raw), ck.decode_index(raw, segments=False)
    assert codes["segments"] is None and len(full["segments"]) == 3
    assert codes["labels"] == full["labels"] and codes["n"] == full["n"] == 7
    for name in ("md5", "label", "split", "seg", "row"):
        assert codes[name].tolist() == full[name].tolist()


@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("header", [b'{"n": 1, "labels": []}', b'{"n": 1, "segments": []}', b"[1]"])
def test_a_leaf_index_header_without_its_tables_is_an_error_naming_the_file(header, segments):
    raw = header + b"\n" + bytes(64)
    if header.startswith(b"{") and b"segments" not in header and not segments:
        assert ck.decode_index(raw, "leaf.idx", segments=False)["n"] == 1  # not asked for
        return
    with pytest.raises(ck.ChunkError, match="leaf.idx: not a leaf index"):
        ck.decode_index(raw, "leaf.idx", segments=segments)


def test_a_truncated_leaf_index_is_an_error_naming_the_file():
    raw = ck.index_bytes([S("a", "1" * 32)])
    with pytest.raises(ck.ChunkError, match="leaf.idx: leaf index is truncated"):
        ck.decode_index(raw[:-3], "leaf.idx")


def test_write_tree_writes_each_chunk_once_and_reuses_it(tmp_path):
    samples = _samples([f"f{i:05d}" for i in range(1500)])
    first = write_tree(tmp_path, samples)
    assert sum(leaf.count for leaf in first.leaves) == 1500
    assert len(first.new_leaves) == len(first.leaves) > 1
    assert first.bytes_written > 0
    files = {p: p.stat().st_mtime_ns for p in (tmp_path / "chunks").rglob("*") if p.is_file()}
    again = write_tree(tmp_path, samples)
    assert again.bytes_written == 0 and again.leaves == first.leaves and again.nodes == first.nodes
    assert {p: p.stat().st_mtime_ns for p in files} == files  # nothing rewritten
    # The walk from the manifest section gives back the same leaves, and the same samples.
    walked = chunkread.walk_leaves(tmp_path, first.manifest_section())
    assert walked == first.leaves
    lines = (
        b"".join(chunkread.read_meta(tmp_path, leaf.hash) for leaf in walked).decode().splitlines()
    )
    assert lines == [ck.entry_line(s) for s in samples]
    rows = np.concatenate([chunkread.read_index(tmp_path, leaf)["row"] for leaf in walked])
    assert rows.tolist() == [s.row for s in samples]


def test_a_known_leaf_is_not_reported_new(tmp_path):
    samples = _samples([f"f{i:04d}" for i in range(600)])
    first = write_tree(tmp_path, samples)
    known = {leaf.hash: leaf.sha256_idx for leaf in first.leaves}
    again = write_tree(tmp_path, samples, known=lambda hs: {h: known[h] for h in hs if h in known})
    assert again.new_leaves == [] and again.leaves == first.leaves


def test_a_chunk_whose_bytes_do_not_match_its_name_is_refused(tmp_path):
    tree = write_tree(tmp_path, _samples([f"f{i}" for i in range(50)]))
    leaf = tree.leaves[0]
    path = ck.chunk_path(tmp_path, leaf.hash, ck.META_SUFFIX)
    path.write_bytes(path.read_bytes() + b"x")
    with pytest.raises(ck.ChunkError, match="do not match the leaf's name"):
        chunkread.read_meta(tmp_path, leaf.hash)
    idx = ck.chunk_path(tmp_path, leaf.hash, ck.INDEX_SUFFIX)
    idx.write_bytes(idx.read_bytes()[:-1] + b"\x01")
    with pytest.raises(ck.ChunkError, match="checksum its node lists"):
        chunkread.read_index(tmp_path, leaf)
    node = ck.chunk_path(tmp_path, tree.nodes[0].hash, ck.NODE_SUFFIX)
    node.unlink()
    with pytest.raises(ck.ChunkError, match="chunk node missing"):
        chunkread.walk_leaves(tmp_path, tree.manifest_section())


def _leaf_set(tmp: Path, samples: list[S]) -> tuple[set[str], set[str], bool]:
    tree = write_tree(tmp, samples)
    forced = any(leaf.count >= ck.LEAF_MAX for leaf in tree.leaves)
    return {leaf.hash for leaf in tree.leaves}, {n.hash for n in tree.nodes}, forced


_names = st.lists(
    st.text(alphabet="abcdefghij0123456789", min_size=1, max_size=10), min_size=1, max_size=1200,
    unique=True,
)  # fmt: skip


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(500, 4000),
    salt=st.text(alphabet="abcxyz", max_size=4),
    picks=st.lists(st.integers(0, 10**6), min_size=1, max_size=4),
    insert=st.booleans(),
)
def test_inserting_or_deleting_k_samples_makes_at_most_2k_new_leaves(
    tmp_path_factory, n, salt, picks, insert
):
    """Leaf boundaries depend on sample keys only: k inserted or deleted samples change at most
    the k leaves they fall in plus k they split, wherever they go in the version."""
    tmp = tmp_path_factory.mktemp("tree")
    base = [S(f"ds/c/{salt}{i:05d}.png", f"{i:032x}", row=i) for i in range(n)]
    before, before_nodes, forced_a = _leaf_set(tmp, base)
    if insert:
        extra = {p % n: S(f"ds/c/{salt}{p % n:05d}+.png", f"{p + n:032x}", row=p) for p in picks}
        changed = sorted(base + list(extra.values()), key=lambda s: s.path)
        k = len(extra)
    else:
        drop = {p % n for p in picks}
        changed = [s for i, s in enumerate(base) if i not in drop]
        k = len(drop)
    after, after_nodes, forced_b = _leaf_set(tmp, changed)
    if forced_a or forced_b:
        return  # a hard maximum cut shifts with insertions: the bound is for content cuts
    new_leaves = after - before
    assert len(new_leaves) <= 2 * k
    # Nodes above: each leaf added or gone changes its node and can split or merge one.
    assert len(after_nodes - before_nodes) <= 2 * max(1, len(new_leaves) + len(before - after))


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(names=_names, label_changes=st.lists(st.integers(0, 10_000), max_size=5))
def test_the_same_samples_always_give_the_same_chunks(tmp_path_factory, names, label_changes):
    """Written twice, into two roots: the same leaves and nodes. A changed label of a path
    rewrites only that path's leaf."""
    base = _samples(names)
    a = write_tree(tmp_path_factory.mktemp("a"), base)
    b = write_tree(tmp_path_factory.mktemp("b"), list(base))
    assert a.leaves == b.leaves and a.nodes == b.nodes
    picked = {p % len(base) for p in label_changes}
    relabelled = [replace(s, label="zebra") if i in picked else s for i, s in enumerate(base)]
    c = write_tree(tmp_path_factory.mktemp("c"), relabelled)
    assert len({leaf.hash for leaf in c.leaves} - {leaf.hash for leaf in a.leaves}) <= len(picked)


def test_files_in_a_new_top_folder_rewrite_no_existing_leaf(tmp_path):
    base = [S(f"ds/{c}/{i:05d}.png", f"{c}{i:031x}"[:32], row=i) for c in "ab" for i in range(900)]
    before = {leaf.hash for leaf in write_tree(tmp_path, base).leaves}
    added = [S(f"ds/ab/{i:05d}.png", f"f{i:031x}", row=i) for i in range(40)]  # sorts between
    after = write_tree(tmp_path, sorted(base + added, key=lambda s: s.path))
    assert before <= {leaf.hash for leaf in after.leaves}
    assert all(ck.top_folder(s.path) in ("a", "b", "ab") for s in base + added)


def _packed_copy(src: Path, dst: Path, tree) -> None:
    """A reader's cache of an s3:// root holds a pack per node and no node or index files."""
    from pipeline.datasets.publish import node_pack

    for node in tree.nodes:
        path = ck.chunk_path(dst, node.hash, PACK_SUFFIX)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(node_pack(src, node.hash))


def test_a_node_pack_gives_the_same_leaves_and_indexes_as_the_files(tmp_path):
    samples = _samples([f"f{i:05d}" for i in range(3000)])
    tree = write_tree(tmp_path / "root", samples)
    assert len(tree.leaves) > len(tree.nodes) >= 1
    _packed_copy(tmp_path / "root", tmp_path / "cache", tree)
    section = tree.manifest_section()
    assert chunkread.walk_leaves(tmp_path / "cache", section) == tree.leaves
    for node in tree.nodes:
        from_pack = chunkread.node_indexes(tmp_path / "cache", node.hash)
        from_files = chunkread.node_indexes(tmp_path / "root", node.hash)
        assert [leaf for leaf, _ in from_pack] == [leaf for leaf, _ in from_files]
        for (_, a), (_, b) in zip(from_pack, from_files, strict=True):
            assert a["segments"] == b["segments"] and a["labels"] == b["labels"]
            for name in ("seg", "row", "label", "split", "md5"):
                assert np.array_equal(a[name], b[name]), name


def test_a_damaged_node_pack_is_refused_naming_it(tmp_path):
    from pipeline.datasets.remote_reader import _pack_is

    tree = write_tree(tmp_path / "root", _samples([f"f{i:04d}" for i in range(600)]))
    _packed_copy(tmp_path / "root", tmp_path / "cache", tree)
    h = tree.nodes[0].hash
    pack = ck.chunk_path(tmp_path / "cache", h, PACK_SUFFIX)
    good = pack.read_bytes()
    assert _pack_is(h)(pack)
    damaged = bytearray(good)
    damaged[-1] ^= 0x01  # the last index's last md5 byte: same size, wrong bytes
    pack.write_bytes(bytes(damaged))
    assert not _pack_is(h)(pack)
    with pytest.raises(ck.ChunkError, match=r"\.pack: bytes do not match the checksum"):
        chunkread.node_indexes(tmp_path / "cache", h)
    pack.write_bytes(good[:-10])  # truncated
    assert not _pack_is(h)(pack)
    with pytest.raises(ck.ChunkError, match="not a node pack"):
        chunkread.node_indexes(tmp_path / "cache", h)
    pack.write_bytes(good)
    assert not _pack_is(tree.nodes[-1].hash if len(tree.nodes) > 1 else "0" * 64)(pack)


def test_a_pack_header_with_a_negative_part_size_is_not_a_pack():
    from pipeline.datasets import chunkpack

    assert chunkpack.decode(chunkpack.encode([b"ab", b"c"])) == [b"ab", b"c"]
    with pytest.raises(ValueError, match="negative"):
        chunkpack.decode(b'{"format": 1, "parts": [-2, 5]}\nabc')


@pytest.mark.parametrize("list_above", [0, 10_000])
def test_present_agrees_with_the_files_on_disk_whether_listed_or_statted(
    tmp_path, monkeypatch, list_above
) -> None:
    from pipeline.datasets import chunks

    monkeypatch.setattr(chunks.Present, "LIST_ABOVE", list_above)
    there = ["ab" + "1" * 62, "ab" + "2" * 62, "cd" + "3" * 62]
    for h in there:
        path = chunks.chunk_path(tmp_path, h, chunks.META_SUFFIX)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    (chunks.chunk_path(tmp_path, there[0], chunks.INDEX_SUFFIX)).write_bytes(b"i")
    gone = ["ab" + "4" * 62, "ef" + "5" * 62]  # one in a listed folder, one in none
    present = chunks.Present(tmp_path, there + gone)
    assert [present.has(h, chunks.META_SUFFIX) for h in there + gone] == [1, 1, 1, 0, 0]
    assert present.has(there[0], chunks.INDEX_SUFFIX)
    assert not present.has(there[1], chunks.INDEX_SUFFIX)

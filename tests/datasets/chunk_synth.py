"""Dataset versions written straight into a store (and their chunk files under a DATA_ROOT),
chunked (format 2) or self-contained (format 1, ``version_samples`` rows), so query tests can
state exactly which samples each version holds and check answers against a brute force."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import select

from pipeline.datasets import manifest as mf
from pipeline.datasets.chunks import entry_rows
from pipeline.datasets.chunkwrite import write_tree
from pipeline.datasets.leaf_index import allocate_ids, record_entries
from pipeline.metadata.datasets import (
    CHUNK_LEAF,
    CHUNK_NODE,
    Chunk,
    DatasetVersion,
    VersionChunk,
    VersionSample,
)

T0 = datetime(2026, 2, 1, tzinfo=UTC)


@dataclass(frozen=True)
class S:
    """One sample, with the fields chunks.SampleLike asks for."""

    path: str
    md5: str
    label: str | None
    split: str = "train"
    line: int | None = None
    copy: int = 0
    segment_id: str = "seg0"
    row: int = 0
    size: int | None = 10
    mtime_ns: int | None = 1
    duplicate: bool = False


def md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def image(path: str, label: str | None, content: str | None = None, **kw) -> S:
    m = md5(content if content is not None else path)
    return S(path, m, label, split="val" if int(m[0], 16) < 3 else "train", **kw)


def ordered(samples: list[S]) -> list[S]:
    """Version order: lake path, then table line / augmented copy."""
    return sorted(samples, key=lambda s: (s.path, -1 if s.line is None else s.line, s.copy))


def _add_chunk(s, **fields) -> int:
    """A ``chunks`` row with an id of its own (leaf_index.allocate_ids); the id."""
    (cid,) = allocate_ids(s, "chunks", 1)
    s.add(Chunk(id=cid, **fields))
    s.flush()
    return cid


def add_version(
    store,
    data_root: Path,
    dataset: str,
    samples: list[S],
    *,
    n: int,
    chunked: bool = True,
    parent_id: str | None = None,
) -> str:
    """Record a committed version of ``samples`` (the ``n``-th: created n seconds after T0);
    its id. Chunked: chunk files written, ``chunks`` rows and leaf entries for new leaves
    only, ``version_chunks`` in order; else a ``version_samples`` row per sample."""
    samples = ordered(samples)
    key = json.dumps([(s.path, s.line, s.copy, s.md5, s.label, s.split) for s in samples])
    version_id = hashlib.sha256(f"{dataset}\0{chunked}\0{key}".encode()).hexdigest()
    manifest: dict = {"format_version": 2 if chunked else 1, "counts": {"samples": len(samples)}}
    with store.session() as s:
        if chunked and samples:
            tree = write_tree(data_root, samples)
            manifest["chunks"] = tree.manifest_section()
            have = set(
                s.scalars(
                    select(Chunk.hash).where(
                        Chunk.hash.in_(
                            [leaf.hash for leaf in tree.leaves] + [node.hash for node in tree.nodes]
                        )
                    )
                )
            )
            for leaf, part in tree.new_leaves:
                if leaf.hash in have:
                    continue
                have.add(leaf.hash)
                cid = _add_chunk(
                    s, hash=leaf.hash, kind=CHUNK_LEAF, count=leaf.count, bytes=leaf.bytes,
                    sha256=leaf.sha256_idx,
                )  # fmt: skip
                record_entries(s, ((cid, *row) for row in entry_rows(part)))
            for node in tree.nodes:
                if node.hash not in have:
                    have.add(node.hash)
                    _add_chunk(
                        s, hash=node.hash, kind=CHUNK_NODE, count=node.count, bytes=node.bytes
                    )
            start = 0
            for i, leaf in enumerate(tree.leaves):
                s.add(
                    VersionChunk(
                        version_id=version_id, ordinal=i, chunk_hash=leaf.hash, start=start
                    )
                )
                start += leaf.count
        elif not chunked:
            s.add_all(
                VersionSample(
                    version_id=version_id,
                    idx=i,
                    path=x.path,
                    md5=x.md5,
                    label=x.label,
                    split=x.split,
                    duplicate=x.duplicate,
                )
                for i, x in enumerate(samples)
            )
        created = T0 + timedelta(seconds=n)
        s.add(
            DatasetVersion(
                version_id=version_id,
                dataset=dataset,
                tag=mf.tag_for(dataset, version_id, created),
                parent_id=parent_id,
                recipe_hash="r" * 64,
                format="npy",
                samples=len(samples),
                train=sum(x.split == "train" for x in samples),
                val=sum(x.split == "val" for x in samples),
                files=len({x.path for x in samples}),
                path=mf.version_relpath(dataset, version_id),
                manifest_sha256="0" * 64,
                manifest=json.dumps(manifest),
                created_at=created,
            )
        )
    return version_id


def first_map(samples: list[S]) -> dict[str, tuple[str, str | None, str]]:
    """The brute force: each path's first sample in version order."""
    out: dict[str, tuple[str, str | None, str]] = {}
    for x in ordered(samples):
        out.setdefault(x.path, (x.md5, x.label, x.split))
    return out

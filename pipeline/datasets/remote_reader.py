"""Opening a version of an ``s3://`` DATA_ROOT: fetch what it needs into the local cache
(``pipeline/storage/cache.py``), then read it there with the ordinary VersionReader.

What a version needs, each object checked against a checksum the version itself lists:

- its ``manifest.json`` (GET on every open: small, and the one object that says what the
  version is; written into the cache when its bytes differ);
- its chunk nodes (named by the sha256 of their bytes), every leaf's ``.idx`` (its node
  lists the sha256) and every segment (the manifest lists the sha256 over its files), in one
  parallel pass of the cache. A version the publisher ``packed`` has one pack per node, the
  node and its leaves' indexes in one object (chunkpack.py), fetched beside the segments: one
  GET per node. An older one has its node files first, and each node's leaf indexes start as
  soon as it is there, so the small files ride beside the large ones;
- a leaf's metadata part (named by its sha256) only when a record of that leaf is asked for
  (``metadata(i)``, ``export``: leafmeta.py fetches the part and the next few): a trainer
  never needs them.

The cache's tree under ``objects/<bucket>/<prefix>`` reads like the data root itself, so
the reader memory-maps segments from local files: a warm open costs one GET (the manifest)
beside the resolving (``latest``: the HEAD object) and no hashing, and reads are local reads. Every object stays pinned (a shared lock) while
the reader, or a split view of it, is alive, so no other process evicts it midway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pipeline.datasets import chunkread, remote_files
from pipeline.datasets import chunks as ch
from pipeline.datasets import manifest as mf
from pipeline.datasets.chunkpack import PACK_SUFFIX
from pipeline.datasets.publish import s3_store
from pipeline.datasets.segments import INFO_NAME, ZARR_NAME, tree_digest
from pipeline.storage.cache import CacheItem, ObjectCache, Pins, sha256_file, write_unsynced
from pipeline.storage.s3 import S3_CONCURRENCY
from pipeline.storage.urls import join, split_s3_url

# An estimate of a leaf index's size for making room before it is downloaded (its exact
# size is known once it is there): a JSON header, then 49 bytes per sample.
_IDX_HEADER_BYTES = 512
_IDX_BYTES_PER_SAMPLE = 4 + 8 + 4 + 1 + 32


def _cache(max_mb: int | None = None, root: Path | None = None) -> ObjectCache:
    from pipeline.settings import get_settings

    s = get_settings()
    return ObjectCache(
        Path(root or s.laketrain_cache_dir),
        (max_mb or s.laketrain_cache_mb) * 2**20,
        s3_store(),
    )


def local_root(cache: ObjectCache, remote: str) -> Path:
    """Where the data root ``remote``'s objects lie in the cache."""
    bucket, prefix = split_s3_url(remote)
    root = cache.objects / bucket
    return root / prefix.strip("/") if prefix.strip("/") else root


def _sha_is(expected: str):
    return lambda path: sha256_file(path) == expected


def _tree_is(expected: str):
    return lambda path: tree_digest(path)[1] == expected


def _pack_is(h: str):
    """Whether a file is node ``h``'s whole pack: its node's bytes match the name, and each
    index the checksum the node lists (a pack has no checksum of its own: chunkpack.py)."""

    def check(path: Path) -> bool:
        try:
            return chunkread.pack_indexes(path, h) is not None
        except (OSError, ValueError, KeyError, TypeError, ch.ChunkError):
            return False

    return check


def _file_item(remote: str, root: Path, rel: str, size: int, sha256: str) -> CacheItem:
    return CacheItem(root / rel, ((join(remote, rel), ""),), size, _sha_is(sha256), sha256)


def _zarr_names(remote: str, seg: dict) -> list[str]:
    """A zarr group is many files: their names come from a LIST."""
    prefix = join(remote, seg["path"])
    names = [url[len(prefix) + 1 :] for url in s3_store().list(prefix)]
    return [name for name in names if name.startswith(f"{ZARR_NAME}/")]


def _segment_items(remote: str, root: Path, segments: list[dict], fmt: str) -> list[CacheItem]:
    if fmt == "npy":
        names = [["x.npy", "y.npy"] for _ in segments]
    else:
        with ThreadPoolExecutor(min(S3_CONCURRENCY, max(1, len(segments)))) as pool:
            names = list(pool.map(lambda seg: _zarr_names(remote, seg), segments))
    items = []
    for seg, seg_names in zip(segments, names, strict=True):
        # In tree_digest's order (by path parts), so the cache can hash the files as they
        # stream in against the sha256 the manifest lists.
        kept = sorted((n for n in seg_names if n != INFO_NAME), key=lambda n: n.split("/"))
        files = tuple((join(remote, seg["path"], name), name) for name in kept)
        items.append(
            CacheItem(
                root / seg["path"],
                files,
                int(seg.get("size_bytes") or 0),
                _tree_is(seg["sha256"]),
                seg["sha256"],
            )
        )
    return items


class RemoteMeta:
    """Fetches leaves' metadata parts into the local cache as leafmeta.LeafLines asks for them
    (picklable: a DataLoader worker started by spawn can call it too)."""

    def __init__(self, remote: str, cache_root: Path, max_mb: int) -> None:
        self.remote = remote
        self.cache_root = Path(cache_root)
        self.max_mb = max_mb

    def __call__(self, leaves: Sequence[ch.LeafRef]) -> Pins:
        cache = _cache(self.max_mb, self.cache_root)
        root = local_root(cache, self.remote)
        return cache.fetch(
            _file_item(
                self.remote,
                root,
                ch.chunk_relpath(leaf.hash, ch.META_SUFFIX),
                leaf.bytes,
                leaf.hash,
            )
            for leaf in leaves
        )


def fetch_version(
    remote: str,
    dataset: str,
    version_id: str,
    *,
    cache: ObjectCache | None = None,
    manifest: tuple[dict, bytes] | None = None,
) -> tuple[Path, Path, Pins, dict]:
    """Fetch what reading ``version_id`` needs into the cache; (its folder there, the data
    root there, the pins that keep it, the manifest). ``manifest``: the version's manifest
    and its bytes when the caller read them already (resolving ``latest`` does)."""
    cache = cache or _cache()
    root = local_root(cache, remote)
    rel = mf.version_relpath(dataset, version_id)
    manifest, raw = manifest or remote_files.read_manifest(remote, dataset, version_id)
    folder = root / rel
    path = folder / mf.MANIFEST
    try:
        same = hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(raw).digest()
    except FileNotFoundError:
        same = False
    if not same:  # compared with the GET on every open: a torn copy is only written again
        path.parent.mkdir(parents=True, exist_ok=True)
        write_unsynced(path, raw)
    items = _segment_items(remote, root, manifest["segments"], manifest["format"])
    if manifest["format_version"] < 2:  # the index arrays and metadata.jsonl: the folder's own
        prefix = join(remote, rel)
        for url, size in sorted(s3_store().list_sizes(prefix).items()):
            name = url[len(prefix) + 1 :]
            if name != mf.MANIFEST:
                items.append(CacheItem(root / rel / name, ((url, ""),), size, _size_is(size)))
        return folder, root, cache.fetch(items), manifest
    section = manifest["chunks"]
    if section.get("packed"):
        # One pack per node holds it and its leaves' indexes (chunkpack.py): no second round.
        for n in section["nodes"]:
            rel_pack = ch.chunk_relpath(n["hash"], PACK_SUFFIX)
            size = _IDX_HEADER_BYTES + _IDX_BYTES_PER_SAMPLE * int(n["count"])
            items.insert(
                0,
                CacheItem(
                    root / rel_pack, ((join(remote, rel_pack), ""),), size, _pack_is(n["hash"])
                ),
            )
        return folder, root, cache.fetch(items), manifest
    nodes = {}
    for n in section["nodes"]:
        rel_node = ch.chunk_relpath(n["hash"], ch.NODE_SUFFIX)
        nodes[root / rel_node] = n["hash"]
        items.insert(0, _file_item(remote, root, rel_node, 0, n["hash"]))
    leaves: list[int] = []

    def leaf_indexes(item: CacheItem) -> list[CacheItem]:
        """A chunk node, once there, names its leaves' indexes (the same pass fetches them)."""
        if item.path not in nodes:
            return []
        out = []
        for leaf in chunkread.read_node(root, nodes[item.path]):
            size = _IDX_HEADER_BYTES + _IDX_BYTES_PER_SAMPLE * leaf.count
            rel_idx = ch.chunk_relpath(leaf.hash, ch.INDEX_SUFFIX)
            out.append(_file_item(remote, root, rel_idx, size, leaf.sha256_idx))
            leaves.append(leaf.count)
        return out

    pins = cache.fetch(items, then=leaf_indexes)
    if len(leaves) != section["leaves"]:
        pins.close()
        raise ch.ChunkError(
            f"the chunk tree has {len(leaves)} leaves, its manifest {section['leaves']}"
        )
    return folder, root, pins, manifest


def _size_is(size: int):
    return lambda path: path.stat().st_size == size


def open_remote(remote: str, name: str, version: str, *, store: Any | None = None) -> Any:
    """Open ``version`` of dataset ``name`` on the ``s3://`` data root ``remote``: resolved
    through the store when there is one, else from the HEAD object and the manifests."""
    from pipeline.datasets.reader import VersionReader
    from pipeline.settings import get_settings

    known = None  # the manifest and its bytes, when resolving read them
    if store is not None:
        from pipeline.datasets.queries import resolve_version

        version_id = resolve_version(version, dataset=name, store=store)["version_id"]
    else:
        from pipeline.datasets.refs import locate_on_s3

        version_id, known = locate_on_s3(remote, name, version)
    s = get_settings()
    cache = _cache()
    folder, root, pins, manifest = fetch_version(
        remote, name, version_id, cache=cache, manifest=known
    )
    reader = VersionReader(folder, root)
    reader.cache_downloads = cache.downloaded  # objects this open downloaded (0: warm)
    reader._keep = (pins,)
    reader._fetch_parts = RemoteMeta(remote, Path(s.laketrain_cache_dir), s.laketrain_cache_mb)
    return reader

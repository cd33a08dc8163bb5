"""Opening a version of an ``s3://`` DATA_ROOT: fetch what it needs into the local cache
(``pipeline/storage/cache.py``), then read it there with the ordinary VersionReader.

What a version needs, each object checked against a checksum the version itself lists:

- its ``manifest.json`` (GET on every open: small, and the one object that says what the
  version is; written into the cache when its bytes differ);
- its chunk nodes (named by the sha256 of their bytes), then every leaf's ``.idx`` (its
  node lists the sha256) and every segment (the manifest lists the sha256 over its files),
  fetched in parallel;
- the leaves' metadata parts (named by their sha256) only when metadata is first asked for
  (``metadata``, ``md5s`` of a format-1 version, ``export``): a trainer never needs them.

The cache's tree under ``objects/<bucket>/<prefix>`` reads like the data root itself, so
the reader memory-maps segments from local files: a warm open costs one GET (the manifest)
and no hashing, and reads are local reads. Every object stays pinned (a shared lock) while
the reader, or a split view of it, is alive, so no other process evicts it midway.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pipeline.datasets import chunks as ch
from pipeline.datasets import manifest as mf
from pipeline.datasets import remote_files
from pipeline.datasets.publish import s3_store
from pipeline.datasets.segments import INFO_NAME, ZARR_NAME, tree_digest
from pipeline.storage.cache import CacheItem, ObjectCache, Pins, sha256_file
from pipeline.storage.durable import write_bytes_atomically
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


def _file_item(remote: str, root: Path, rel: str, size: int, check) -> CacheItem:
    return CacheItem(root / rel, ((join(remote, rel), ""),), size, check)


def _segment_item(remote: str, root: Path, seg: dict, fmt: str) -> CacheItem:
    rel = seg["path"]
    if fmt == "npy":
        names = ["x.npy", "y.npy"]
    else:  # a zarr group is many files: their names come from a LIST
        prefix = join(remote, rel)
        names = [
            url[len(prefix) + 1 :]
            for url in s3_store().list(prefix)
            if url[len(prefix) + 1 :].startswith(f"{ZARR_NAME}/")
        ]
    files = tuple((join(remote, rel, name), name) for name in names if name != INFO_NAME)
    return CacheItem(root / rel, files, int(seg.get("size_bytes") or 0), _tree_is(seg["sha256"]))


class RemoteMeta:
    """Fetches a chunked version's metadata parts on first use (picklable: a DataLoader
    worker started by spawn can call it too)."""

    def __init__(self, remote: str, manifest: dict, cache_root: Path, max_mb: int) -> None:
        self.remote = remote
        self.section = manifest.get("chunks")
        self.cache_root = Path(cache_root)
        self.max_mb = max_mb
        self.pins: Pins | None = None

    def __call__(self) -> None:
        if self.pins is not None or not self.section:
            return
        cache = _cache(self.max_mb, self.cache_root)
        root = local_root(cache, self.remote)
        leaves = ch.walk_leaves(root, self.section)
        items = {
            leaf.hash: _file_item(
                self.remote,
                root,
                ch.chunk_relpath(leaf.hash, ch.META_SUFFIX),
                leaf.bytes,
                _sha_is(leaf.hash),
            )
            for leaf in leaves
        }
        self.pins = cache.fetch(items.values())

    def __getstate__(self) -> dict:
        return {**self.__dict__, "pins": None}


def fetch_version(
    remote: str, dataset: str, version_id: str, *, cache: ObjectCache | None = None
) -> tuple[Path, Path, Pins, dict]:
    """Fetch what reading ``version_id`` needs into the cache; (its folder there, the data
    root there, the pins that keep it, the manifest)."""
    cache = cache or _cache()
    root = local_root(cache, remote)
    rel = mf.version_relpath(dataset, version_id)
    manifest, raw = remote_files.read_manifest(remote, dataset, version_id)
    folder = root / rel
    path = folder / mf.MANIFEST
    try:
        same = hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(raw).digest()
    except FileNotFoundError:
        same = False
    if not same:
        write_bytes_atomically(path, raw)
    items: list[CacheItem] = []
    pins = Pins()
    try:
        if manifest["format_version"] >= 2:
            section = manifest["chunks"]
            nodes = [
                _file_item(
                    remote, root, ch.chunk_relpath(n["hash"], ch.NODE_SUFFIX), 0, _sha_is(n["hash"])
                )
                for n in section["nodes"]
            ]
            for fd in _fds(cache.fetch(nodes)):
                pins.add(fd)
            for leaf in ch.walk_leaves(root, section):
                size = _IDX_HEADER_BYTES + _IDX_BYTES_PER_SAMPLE * leaf.count
                rel_idx = ch.chunk_relpath(leaf.hash, ch.INDEX_SUFFIX)
                items.append(_file_item(remote, root, rel_idx, size, _sha_is(leaf.sha256_idx)))
        else:  # format 1: the index arrays and metadata.jsonl are the version's own files
            prefix = join(remote, rel)
            for url, size in sorted(s3_store().list_sizes(prefix).items()):
                name = url[len(prefix) + 1 :]
                if name != mf.MANIFEST:
                    items.append(_file_item(remote, root, f"{rel}/{name}", size, _size_is(size)))
        items += [_segment_item(remote, root, s, manifest["format"]) for s in manifest["segments"]]
        for fd in _fds(cache.fetch(items)):
            pins.add(fd)
    except BaseException:
        pins.close()
        raise
    return folder, root, pins, manifest


def _size_is(size: int):
    return lambda path: path.stat().st_size == size


def _fds(pins: Pins) -> list[int]:
    """Move the descriptors out of ``pins`` (so one Pins holds a version's every item)."""
    fds, pins._fds = pins._fds, []
    return fds


def open_remote(remote: str, name: str, version: str, *, store: Any | None = None) -> Any:
    """Open ``version`` of dataset ``name`` on the ``s3://`` data root ``remote``: resolved
    through the store when there is one, else from the HEAD object and the manifests."""
    from pipeline.datasets.reader import VersionReader
    from pipeline.settings import get_settings

    if store is not None:
        from pipeline.datasets.queries import resolve_version

        version_id = resolve_version(version, dataset=name, store=store)["version_id"]
    else:
        from pipeline.datasets.refs import resolve_on_s3

        version_id = resolve_on_s3(remote, name, version)
    s = get_settings()
    cache = _cache()
    folder, root, pins, manifest = fetch_version(remote, name, version_id, cache=cache)
    reader = VersionReader(folder, root)
    reader.cache_downloads = cache.downloaded  # objects this open downloaded (0: warm)
    reader._keep = (pins,)
    reader._before_meta = RemoteMeta(
        remote, manifest, Path(s.laketrain_cache_dir), s.laketrain_cache_mb
    )
    return reader

"""Publishing a build's local work root (``dataroot.py``) to an ``s3://`` data root.

The order is what makes a version appear whole or not at all:

1. **segments** (by the ``process`` task that wrote them: mapped tasks may run on different
   workers, and only the writer's machine has the files; ``publish_segment``), each one's
   data files first and its ``segment.json`` last, so a segment on S3 with a ``segment.json``
   is complete;
2. at commit, **every segment the version names** again (a no-op when step 1 ran; it repairs a
   process task killed between recording its segment and uploading it), **the chunk files**
   of its tree, **a pack per node** (its leaves' indexes in one object, for a reader's cold
   open: chunkpack.py) and **the version's own files** (``parts.txt``, ``invalid.jsonl``);
3. the **manifest**, last: a version exists on S3 once its ``manifest.json`` exists;
4. after the store has recorded the version and moved the head: ``HEAD`` and
   ``head_history.jsonl`` (``sync_head_remote``), mirroring the store as the local files do.

Every object is immutable and content-addressed, so an object already there with the same size
is never uploaded again (one LIST per prefix says which): a build killed anywhere in 1-3,
rerun, uploads only what is missing and publishes the same ``version_id``. Objects a killed
build uploaded and no version ever names are collected by ``gc`` (after ``min_age_s``).
S3 PUTs are atomic, so nothing half-uploaded is ever an object; a failed upload raises the
storage layer's StorageError naming the URL, after its bounded retries, before the manifest.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.datasets import chunkpack, chunkread
from pipeline.datasets import chunks as ch
from pipeline.datasets import manifest as mf
from pipeline.datasets.chunkpack import PACK_SUFFIX
from pipeline.datasets.crash_points import pause_hook
from pipeline.datasets.segments import INFO_NAME
from pipeline.storage.s3 import S3_CONCURRENCY, S3Store
from pipeline.storage.urls import join

log = logging.getLogger(__name__)

_stores: dict[tuple, S3Store] = {}
# What an S3Store is built from: a client made for one endpoint or one set of limits must not
# serve another (tests point boto3 at a new server), nor cross a fork (boto3 is not fork-safe).
_STORE_KEY_VARS = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_PROFILE",
    "LAKETRAIN_S3_CONNECT_TIMEOUT",
    "LAKETRAIN_S3_READ_TIMEOUT",
    "LAKETRAIN_S3_ATTEMPTS",
    "AWS_MAX_ATTEMPTS",
)


def s3_store() -> S3Store:
    """One S3Store per process and configuration (boto3 clients are thread-safe and cost
    ~50 ms to create)."""
    key = (os.getpid(), *(os.environ.get(v) for v in _STORE_KEY_VARS))
    store = _stores.get(key)
    if store is None:
        store = _stores[key] = S3Store()
    return store


def _files_under(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))


def _upload_missing(
    local_root: Path, remote: str, relpaths: Iterable[str], have: dict[str, int]
) -> int:
    """Upload each ``relpath`` (a file under ``local_root``) whose object is absent or of
    another size, in parallel; return how many were uploaded."""
    store = s3_store()
    todo = []
    for rel in relpaths:
        path = local_root / rel
        url = join(remote, rel)
        if have.get(url) != path.stat().st_size:
            todo.append((path, url))
    if not todo:
        return 0
    with ThreadPoolExecutor(min(S3_CONCURRENCY, len(todo))) as pool:
        # list(): re-raise the first upload's error here, after the others were tried.
        list(pool.map(lambda item: store.put_file(item[0], item[1]), todo))
    return len(todo)


def publish_segment(local_root: Path, remote: str, relpath: str) -> int:
    """Upload the local segment folder ``relpath`` (``segments/<recipe>/<id>``): data files
    first, ``segment.json`` last; nothing when S3 already holds its ``segment.json`` with the
    same checksum. Returns the number of objects uploaded."""
    folder = Path(local_root) / relpath
    info_url = join(remote, relpath, INFO_NAME)
    have = s3_store().list_sizes(join(remote, relpath))
    local_info = (folder / INFO_NAME).read_bytes()
    if info_url in have:
        try:
            same = (
                json.loads(s3_store().read_bytes(info_url))["sha256"]
                == json.loads(local_info)["sha256"]
            )
        except (ValueError, KeyError, FileNotFoundError):
            same = False
        if same:
            return 0
        have = {}  # another writer's bytes under this name, or a damaged one: ours replace them
    data = [
        p.relative_to(local_root).as_posix() for p in _files_under(folder) if p.name != INFO_NAME
    ]
    n = _upload_missing(local_root, remote, data, have)
    pause_hook("segment_uploaded")  # data on S3, segment.json not yet (crash tests)
    s3_store().write_bytes(info_url, local_info)
    return n + 1


def _segments_of(local_root: Path, remote: str, manifest: dict) -> int:
    """Make sure every segment the manifest names is complete on S3 (one LIST per recipe)."""
    n = 0
    by_recipe: dict[str, list[str]] = {}
    for seg in manifest.get("segments", []):
        by_recipe.setdefault(seg["path"].rsplit("/", 1)[0], []).append(seg["path"])
    for parent, paths in by_recipe.items():
        have = s3_store().list_sizes(join(remote, parent))
        for rel in paths:
            if join(remote, rel, INFO_NAME) not in have:
                n += publish_segment(local_root, remote, rel)
    return n


def chunk_relpaths(local_root: Path, manifest: dict) -> list[str]:
    """Every chunk file a format-2 manifest's tree names: its nodes, and each leaf's index and
    metadata part (read from the local node files)."""
    section = manifest.get("chunks")
    if not section:
        return []
    out = []
    for node in section["nodes"]:
        out.append(ch.chunk_relpath(node["hash"], ch.NODE_SUFFIX))
        for leaf in chunkread.read_node(local_root, node["hash"]):
            out.append(ch.chunk_relpath(leaf.hash, ch.INDEX_SUFFIX))
            out.append(ch.chunk_relpath(leaf.hash, ch.META_SUFFIX))
    return sorted(set(out))


def _upload_packs(local_root: Path, remote: str, section: dict, have: dict[str, int]) -> int:
    """Upload the pack (chunkpack.py) of each node of ``section`` that S3 lacks, made from the
    local node and index files; a pack is content-addressed by its node, so one there is it."""
    todo = [
        n["hash"]
        for n in section["nodes"]
        if join(remote, ch.chunk_relpath(n["hash"], PACK_SUFFIX)) not in have
    ]
    store = s3_store()

    def upload(h: str) -> None:
        store.write_bytes(join(remote, ch.chunk_relpath(h, PACK_SUFFIX)), node_pack(local_root, h))

    if todo:
        with ThreadPoolExecutor(min(S3_CONCURRENCY, len(todo))) as pool:
            list(pool.map(upload, todo))
    return len(todo)


def node_pack(data_root: Path, h: str) -> bytes:
    """Node ``h``'s pack, made from its files under ``data_root``, each checked as it is read."""
    path = ch.chunk_path(data_root, h, ch.NODE_SUFFIX)
    node = path.read_bytes()
    parts = [node]
    for leaf in chunkread.parse_node(node, path, h):
        raw, idx_path = chunkread.index_raw(data_root, leaf)
        chunkread.check_index(raw, idx_path, leaf)
        parts.append(raw)
    return chunkpack.encode(parts)


def publish_version(local_root: Path, remote: str, dataset: str, version_id: str) -> bool:
    """Upload the local version folder of ``version_id`` and everything it names, the manifest
    last. False when S3 already holds its manifest (published before; objects immutable)."""
    local_root = Path(local_root)
    folder = mf.version_dir(local_root, dataset, version_id)
    rel = mf.version_relpath(dataset, version_id)
    manifest_url = join(remote, rel, mf.MANIFEST)
    store = s3_store()
    if store.exists(manifest_url):
        return False
    manifest, _ = mf.read_manifest(folder)
    _segments_of(local_root, remote, manifest)
    chunk_files = chunk_relpaths(local_root, manifest)
    if chunk_files:
        have = store.list_sizes(join(remote, ch.CHUNKS_DIR))
        _upload_missing(local_root, remote, chunk_files, have)
        if manifest["chunks"].get("packed"):
            _upload_packs(local_root, remote, manifest["chunks"], have)
    own = [
        p.relative_to(local_root).as_posix() for p in _files_under(folder) if p.name != mf.MANIFEST
    ]
    _upload_missing(local_root, remote, own, store.list_sizes(join(remote, rel)))
    pause_hook("publish_before_manifest")  # every object uploaded, the manifest not (crash tests)
    store.put_file(folder / mf.MANIFEST, manifest_url)
    log.info("dataset %s: version %s published to %s", dataset, version_id[:12], join(remote, rel))
    return True


def sync_head_remote(store, remote: str, dataset: str) -> bool:
    """Make ``HEAD`` and ``head_history.jsonl`` under the ``s3://`` data root mirror the
    store's head (``pipeline.datasets.head.sync_head_file``, for S3): the history first (the
    moves it lacks, by move id), then HEAD when it names another version. True when HEAD was
    written. Called after the store has committed, as the local sync is."""
    from pipeline.datasets.head import _moves, head_record

    s3 = s3_store()
    base = join(remote, "datasets", dataset)
    with store.session() as session:
        want = head_record(session, dataset)
        if want is None:
            return False
        try:
            history = s3.read_bytes(join(base, mf.HEAD_HISTORY)).decode("utf-8", "replace")
        except FileNotFoundError:
            history = ""
        seen = []
        for line in history.splitlines():
            try:
                seen.append(json.loads(line).get("id"))
            except (ValueError, AttributeError):
                continue
        last = max((i for i in seen if isinstance(i, int)), default=0)
        moves = _moves(session, dataset, after_id=last)
    if moves:
        if history and not history.endswith("\n"):
            history += "\n"
        history += "".join(json.dumps(m, sort_keys=True) + "\n" for m in moves)
        s3.write_bytes(join(base, mf.HEAD_HISTORY), history.encode())
    try:
        current = json.loads(s3.read_bytes(join(base, mf.HEAD)))
    except (FileNotFoundError, ValueError):
        current = None
    if isinstance(current, dict) and all(current.get(k) == v for k, v in want.items()):
        return False
    data = {"format_version": mf.HEAD_FORMAT_VERSION, **want}
    s3.write_bytes(
        join(base, mf.HEAD), (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    )
    return True

"""Filling a build's local work root (``dataroot.py``) back from an ``s3://`` data root.

A commit reads what earlier steps wrote: the segments of the samples it assembles (near-
duplicate hashing and column drift read their rows), the head's chunk tree (splits, leaf
reuse, the diff), a version folder published before a crash. On the machine that built them
they are in the work root already; a commit on another worker (mapped ``process`` tasks on
Celery or Kubernetes, or a work root that was deleted) downloads them here first, so the
commit itself only ever reads local files, as with a local DATA_ROOT.

A pulled segment is checked against its ``segment.json`` checksum and renamed into place
whole, like a written one; chunk files are checked against their names by the readers.
"""

from __future__ import annotations

import json
import secrets
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pipeline.datasets import chunkread
from pipeline.datasets import chunks as ch
from pipeline.datasets import manifest as mf
from pipeline.datasets.errors import BuildError
from pipeline.datasets.publish import s3_store
from pipeline.datasets.segments import INFO_NAME, tree_digest
from pipeline.storage.s3 import S3_CONCURRENCY
from pipeline.storage.urls import join


def _get_all(pairs: list[tuple[str, Path]]) -> None:
    store = s3_store()
    if not pairs:
        return
    with ThreadPoolExecutor(min(S3_CONCURRENCY, len(pairs))) as pool:
        list(pool.map(lambda p: store.get_file(p[0], p[1]), pairs))


def pull_segment(remote: str, local_root: Path, relpath: str) -> bool:
    """Download the segment ``relpath`` into the work root unless it is there; False when S3
    has no complete segment under that name (no ``segment.json``)."""
    local_root = Path(local_root)
    final = local_root / relpath
    if (final / INFO_NAME).is_file():
        return True
    prefix = join(remote, relpath)
    have = s3_store().list_sizes(prefix)
    if join(prefix, INFO_NAME) not in have:
        return False
    tmp = final.parent / f".pull-{final.name[:16]}-{secrets.token_hex(4)}"
    try:
        _get_all([(url, tmp / url[len(prefix) + 1 :]) for url in sorted(have)])
        info = json.loads((tmp / INFO_NAME).read_text())
        size, sha = tree_digest(tmp)
        if sha != info.get("sha256"):
            raise BuildError(
                f"{prefix}: the segment's files do not match its {INFO_NAME} checksum; "
                "run `laketrain gc` and build again"
            )
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / INFO_NAME).is_file():  # a leftover without segment.json: not one
                shutil.rmtree(final, ignore_errors=True)
                tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def pull_chunks(remote: str, local_root: Path, section: dict | None) -> None:
    """The chunk files of a manifest's ``chunks`` section that the work root lacks."""
    if not section:
        return
    local_root = Path(local_root)

    def missing(rels: list[str]) -> list[tuple[str, Path]]:
        return [(join(remote, r), local_root / r) for r in rels if not (local_root / r).is_file()]

    nodes = [ch.chunk_relpath(n["hash"], ch.NODE_SUFFIX) for n in section["nodes"]]
    _get_all(missing(nodes))
    leaves = []
    for node in section["nodes"]:
        for leaf in chunkread.read_node(local_root, node["hash"]):
            leaves += [
                ch.chunk_relpath(leaf.hash, ch.INDEX_SUFFIX),
                ch.chunk_relpath(leaf.hash, ch.META_SUFFIX),
            ]
    _get_all(missing(sorted(set(leaves))))


def pull_version(remote: str, local_root: Path, dataset: str, version_id: str) -> bool:
    """The version folder published on S3 (and its chunk tree) into the work root, unless the
    work root holds the same one; False when neither has a manifest. A version on S3 wins
    over a local folder of the same id with another manifest (another worker published it
    first, with its own created_at and tag): the store must record what readers will read."""
    local_root = Path(local_root)
    folder = mf.version_dir(local_root, dataset, version_id)
    prefix = join(remote, mf.version_relpath(dataset, version_id))
    if (folder / mf.MANIFEST).is_file():
        try:
            published = s3_store().read_bytes(join(prefix, mf.MANIFEST))
        except FileNotFoundError:
            return True  # not published yet: the local one is published from here
        if published == (folder / mf.MANIFEST).read_bytes():
            return True
    have = s3_store().list_sizes(prefix)
    if join(prefix, mf.MANIFEST) not in have:
        return False
    tmp = folder.parent / f"{mf.STAGING_PREFIX}pull-{secrets.token_hex(4)}"
    try:
        _get_all([(url, tmp / url[len(prefix) + 1 :]) for url in sorted(have)])
        manifest, _ = mf.read_manifest(tmp)
        pull_chunks(remote, local_root, manifest.get("chunks"))
        shutil.rmtree(folder, ignore_errors=True)  # no manifest: not a version
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def for_commit(store, local_root: Path, remote: str, dataset: str, recipe_hash: str) -> None:
    """What a commit of ``dataset`` reads, into the work root: every segment holding a current
    sample (the commit may read their rows) and the head version's chunk tree. A segment the
    store recorded but S3 never received (its process task died between the two) is forgotten
    with its processed samples, and the commit fails asking for a rerun, which decodes those
    files again: a version is never assembled from rows nobody can read."""
    from sqlalchemy import select

    from pipeline.datasets.build.planning import _current_files
    from pipeline.datasets.build.record import delete_processed_for_segments
    from pipeline.datasets.queries import latest_committed
    from pipeline.metadata.datasets import SAMPLE_OK, Segment

    with store.session() as session:
        _files, processed = _current_files(session, dataset, recipe_hash)
        seg_ids = sorted(
            {p.segment_id for p in processed.values() if p.status == SAMPLE_OK and p.n_rows}
        )
        paths = {
            s.segment_id: s.path
            for s in session.scalars(select(Segment).where(Segment.segment_id.in_(seg_ids)))
        } if seg_ids else {}  # fmt: skip
        head = latest_committed(session, dataset)
        head_manifest = json.loads(head.manifest) if head is not None and head.manifest else {}
    lost = [sid for sid, rel in sorted(paths.items()) if not pull_segment(remote, local_root, rel)]
    if lost:
        with store.session() as session:
            delete_processed_for_segments(session, lost)
        raise BuildError(
            f"dataset {dataset!r}: {len(lost)} recorded segment(s) are neither in this worker's "
            f"work root nor under {remote} (e.g. {paths[lost[0]]}): their process task stopped "
            "before uploading them. They are forgotten; build again to decode those files again"
        )
    pull_chunks(remote, local_root, head_manifest.get("chunks"))

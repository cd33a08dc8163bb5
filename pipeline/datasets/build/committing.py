"""commit: publish the version of the dataset's current contents and move the head."""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import replace
from datetime import datetime
from pathlib import Path

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from pipeline.cyclic_gc import gc_paused
from pipeline.datasets import chunks, dataroot, head, publish, pull
from pipeline.datasets import manifest as mf
from pipeline.datasets.build import delta as delta_commit
from pipeline.datasets.build import digest, summaries
from pipeline.datasets.build import full as full_commit
from pipeline.datasets.build.changes import (
    Since,
    record_mark,
    watermark,
)
from pipeline.datasets.build.chunkrows import (
    record_tree,
)
from pipeline.datasets.build.parent import Parent
from pipeline.datasets.build.record import (
    _record_segment,
)
from pipeline.datasets.build.values import (
    SegmentRef,
    Version,
    _recipe,
    _Sample,
    _settings,
)
from pipeline.datasets.build.writer import (
    VersionWriter,
    _clean_staging,
)
from pipeline.datasets.crash_points import pause_hook
from pipeline.datasets.leases import (
    check_counted_on,
    released_after,
)
from pipeline.datasets.quality import at_commit, neargroups
from pipeline.datasets.queries import latest_committed
from pipeline.datasets.segments import (
    clean_stale_temps,
    read_info,
    segments_guard,
)
from pipeline.metadata.datasets import (
    VERSION_COMMITTED,
    DatasetLock,
    DatasetVersion,
    Segment,
    VersionInvalid,
    VersionSegment,
)
from pipeline.metadata.driver import driver_executemany
from pipeline.metadata.locks import ensure_lock_row, take_lock_row
from pipeline.metadata.store import MetadataStore, open_store
from pipeline.storage.urls import is_s3, join

log = logging.getLogger("laketrain.build")
_INSERT_BATCH = 5000
# The manifest format commits write. Tests set it to 1 to write today's self-contained folders
# (with version_samples rows) and check the reader's fallback and the store migration on them.
WRITE_FORMAT = mf.FORMAT_VERSION
# Whether an s3:// data root's versions are published with a pack per node. Tests turn it off
# to publish versions as they were before packs and check that readers still open them.
PACK_ON_S3 = True
# Whether a commit may build its version from the head and the change set alone (delta.py).
# Tests turn it off to build the same lake both ways and compare.
DELTA = True


@gc_paused()
@released_after  # the leases of this dataset's plans and shards, once committed
def commit(
    dataset: str,
    segments: list[SegmentRef | dict] | None = None,
    *,
    store: MetadataStore | None = None,
    data_root: Path | None = None,
    lake: Path | str | None = None,
) -> Version | None:
    """Publish the version of the dataset's current contents and make it the head, or move
    the head back to an older version with the same contents (``head_move`` says which), or
    return None when the head already is that version. ``segments`` (the outputs of
    ``process``) are recorded again if a crash lost their records; the version itself is
    assembled from the store."""
    from pipeline.datasets.recipes import load_sidecar

    settings = _settings()
    # An s3:// DATA_ROOT: build in its local work root, publish to S3 (dataroot.py).
    data_root, remote = dataroot.resolve(data_root)
    # A folder or an s3:// prefix (kept a string: a Path would collapse s3:// into s3:/).
    lake = lake or settings.lake_dir
    lake = lake if is_s3(lake) else Path(lake)
    store = store or open_store()
    recipe = _recipe(dataset)
    rh = recipe.recipe_hash
    refs = [SegmentRef.from_dict(r) if isinstance(r, dict) else r for r in segments or []]
    if remote is not None:
        # Written by process tasks on other workers: bring them (and the head's chunks) here,
        # so that everything below reads local files, as with a local DATA_ROOT (pull.py).
        for ref in refs:
            pull.pull_segment(remote, data_root, ref.path)
    if refs:
        with store.session() as session:
            recorded = set(
                session.scalars(
                    select(Segment.segment_id).where(
                        Segment.segment_id.in_([r.segment_id for r in refs])
                    )
                )
            )
        with segments_guard(data_root):  # gc must not remove a folder recorded here
            for ref in refs:
                # A segment row is written in the same transaction as its processed samples,
                # so only a segment without one (a crash between rename and record) needs
                # reading.
                folder = data_root / ref.path
                if ref.segment_id not in recorded and (folder / "segment.json").is_file():
                    _record_segment(store, dataset, read_info(folder))
    if remote is not None:
        pull.for_commit(store, data_root, remote, dataset, rh)
    pause_hook("before_commit")
    sidecar = load_sidecar(join(lake, dataset) if is_s3(lake) else lake / dataset, recipe)
    ensure_lock_row(store, DatasetLock, dataset)
    # synced_after is entered before the session so it runs after the session has committed:
    # the HEAD file mirrors the store's head, never runs ahead of it (pipeline/datasets/head.py).
    # The segments guard (shared) is taken first, in gc's order (guard, then lock rows): gc
    # cannot drop a chunk this commit reuses between finding it and recording the version.
    with (
        segments_guard(data_root),
        head.synced_after(store, data_root, dataset, remote=remote),
        store.session() as session,
    ):
        take_lock_row(session, DatasetLock, dataset)
        latest = latest_committed(session, dataset)  # the head, not the newest created
        # Read before the rows: a scan that lands in between is only read again (changes.py).
        scan_mark = watermark(session, dataset)
        since = Since.of(session, dataset, latest, rh)
        pending = since.unchanged(session, dataset, rh) if since is not None else None
        if pending is not None:
            # No ledger row written since the head was built, no pending content processed:
            # the head is the lake's version, found without assembling a sample.
            check_counted_on(
                session, data_root, dataset, recipe, pending, {}, [r.segment_id for r in refs]
            )
            at_commit.review.mark_superseded(session, dataset, latest.tag)
            return None
        # The parent is read through its chunks: what changed, not a row per sample (parent.py).
        prior = Parent.of(session, latest)
        same_recipe = latest is not None and latest.recipe_hash == rh
        delta = None
        if WRITE_FORMAT != 1 and DELTA and delta_commit.applies(recipe, prior, since, same_recipe):
            try:
                # The head and the change set alone: O(changes), not O(samples) (delta.py).
                delta = delta_commit.prepare(
                    session, data_root, dataset, recipe, since, prior, sidecar
                )
            except delta_commit.Fallback as exc:
                log.info("%s: full commit (%s)", dataset, exc)
        # Else every current file, from the store (full.py).
        assembled = (
            delta
            if delta is not None
            else full_commit.prepare(
                session, data_root, dataset, recipe, prior, same_recipe, sidecar
            )
        )
        processed, samples = assembled.processed, assembled.samples
        invalid, left_out, version_id = assembled.invalid, assembled.left_out, assembled.version_id
        # Fail, never publish without them, when files lost rows the build counted on.
        check_counted_on(
            session, data_root, dataset, recipe, left_out, processed, [r.segment_id for r in refs]
        )
        pending = [row[0] for row in left_out]
        if latest is not None and latest.version_id == version_id:
            at_commit.review.mark_superseded(session, dataset, latest.tag)
            # The head is the lake's version as of scan_mark (its chunks may hold older
            # mtimes: a touch changes no id), so the next no-change build stops early.
            record_mark(session, dataset, version_id, scan_mark, pending, exact=False)
            return None
        existing = session.get(DatasetVersion, version_id)
        if existing is not None and existing.status == at_commit.review.VERSION_QUARANTINED:
            # Built before and held by the quality gate: it stays held (not the head).
            gate = at_commit.held_again(session, existing, recipe.quality)
            return replace(_version_of(existing), status=existing.status, gate=gate)
        if existing is not None and existing.status == VERSION_COMMITTED:
            # The lake went back to the content of an older version: that version is it, and
            # the head moves back to it (latest must name what the lake holds).
            head.move_head(session, dataset, version_id, head.HEAD_RETURNED)
            record_mark(session, dataset, version_id, scan_mark, pending, exact=False)
            return replace(_version_of(existing), head_move=head.HEAD_RETURNED)
        parent = latest
        # A chunked parent's diff compares leaf lists, once the new tree is cut (below).
        leafwise = prior.chunked and WRITE_FORMAT != 1
        diff = None if leafwise else prior.diff_counts(session, samples, None)
        folder = mf.version_dir(data_root, dataset, version_id)
        _clean_staging(folder.parent)
        clean_stale_temps(data_root, rh)
        tree = leaf_sums = None
        if remote is not None:
            # Published on S3 before a crash (by any worker), never recorded: that one is it.
            pull.pull_version(remote, data_root, dataset, version_id)
        if (folder / mf.MANIFEST).is_file():
            # Published before a crash, never recorded: keep what is on disk (same content).
            manifest, manifest_sha = mf.read_manifest(folder)
        else:
            if folder.exists():
                shutil.rmtree(folder)  # cannot be a version: the manifest is in the renamed folder
            if delta is not None:
                with VersionWriter(folder) as writer:
                    manifest, tree, leaf_sums = delta_commit.write_manifest(
                        writer, delta, dataset, recipe, parent, session, data_root
                    )
                    if remote is not None and PACK_ON_S3:
                        manifest["chunks"]["packed"] = True
                    manifest_sha = writer.publish(manifest)
            else:
                manifest, manifest_sha, tree, leaf_sums = full_commit.write_version(
                    folder,
                    assembled,
                    dataset=dataset,
                    recipe=recipe,
                    parent=parent,
                    prior=prior,
                    same_recipe=same_recipe,
                    since=since,
                    diff=diff,
                    session=session,
                    data_root=data_root,
                    write_format=WRITE_FORMAT,
                    packed=remote is not None and PACK_ON_S3,
                )
        if remote is not None:
            # Every object, the manifest last, BEFORE the store records the version: a version
            # the store (or a HEAD) names is always readable from S3 (publish.py).
            publish.publish_version(data_root, remote, dataset, version_id)
        pause_hook("commit_renamed")
        gate = at_commit.judge_manifest(manifest, recipe.quality)
        row = DatasetVersion(
            version_id=version_id,
            dataset=dataset,
            tag=manifest["tag"],
            parent_id=manifest["parent"],
            recipe_hash=rh,
            format=recipe.format,
            status=at_commit.status_for(gate),  # quarantined: held by the quality gate
            samples=manifest["counts"]["samples"],
            train=manifest["counts"]["train"],
            val=manifest["counts"]["val"],
            files=manifest["counts"]["files"],
            invalid=manifest["counts"]["invalid"],
            added=manifest["diff"]["added"],
            removed=manifest["diff"]["removed"],
            changed=manifest["diff"]["changed"],
            path=mf.version_relpath(dataset, version_id),
            manifest_sha256=manifest_sha,
            manifest=json.dumps(manifest, sort_keys=True),
            quality=manifest.get("quality"),
            created_at=datetime.fromisoformat(manifest["created_at"]),
        )
        if existing is not None:  # a deleted (gc'd) version published again
            session.delete(existing)
            session.flush()
        session.add(row)
        session.flush()
        chunked = manifest["format_version"] >= 2
        _insert_version_rows(
            session,
            version_id,
            [] if chunked else samples,  # a chunked version's samples are its chunks' entries
            invalid,
            [s["id"] for s in manifest["segments"]],
        )
        if chunked:
            computed = leaf_sums.computed if leaf_sums is not None else {}
            # A new leaf's summary goes into its row; an older leaf's (before 0011) is updated.
            inserted = record_tree(
                session,
                version_id,
                data_root,
                manifest,
                tree,
                {h: leaf.to_json() for h, leaf in computed.items()},
                known_samples=delta.known_samples if delta is not None else None,
            )
            summaries.store_missing(
                session, {h: leaf for h, leaf in computed.items() if h not in inserted}
            )
        if gate.quarantined:
            # Published and recorded, but not the head: latest stays where it is.
            held = at_commit.hold(session, row, gate)
            return replace(_version_of(row), status=row.status, gate=held)
        head.move_head(session, dataset, version_id, head.HEAD_PUBLISHED)
        # exact: the chunks this commit wrote are this assembly (a version found published
        # after a crash has the same id, not necessarily the same paths and mtimes).
        record_mark(session, dataset, version_id, scan_mark, pending, exact=tree is not None)
        if tree is not None and leaf_sums is not None:
            # For the next delta commit (digest.py): a cache, written when the store is about
            # to name the version the head (a rollback leaves a digest nobody asks for).
            codes = delta.codes if delta is not None else chunks.codes_of(samples)
            edges = digest.tree_edges(tree, delta.head_edges if delta is not None else None)
            digest.write(data_root, dataset, version_id, tree.leaves, codes, edges)
            near = assembled.near
            if near.groups is not None:  # the next delta commit's starting groups
                neargroups.write(data_root, dataset, version_id, tree.leaves, near.groups)
        return replace(_version_of(row), head_move=head.HEAD_PUBLISHED)


def _insert_version_rows(
    session: Session,
    version_id: str,
    samples: list[_Sample],
    invalid: list[dict],
    seg_ids: list[str],
) -> None:
    conn = session.connection()
    # Straight to the DBAPI cursor's executemany with tuples: this is one row per sample per
    # version, and SQLAlchemy's per-row parameter processing would double its cost.
    driver_executemany(
        session,
        "INSERT INTO version_samples (version_id, idx, path, md5, label, split, duplicate) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)",
        [
            (version_id, i, s.path, s.md5, s.label, s.split, s.duplicate)
            for i, s in enumerate(samples)
        ],
        batch=_INSERT_BATCH,
    )
    if invalid:
        conn.execute(insert(VersionInvalid), [{"version_id": version_id, **r} for r in invalid])
    if seg_ids:
        conn.execute(
            insert(VersionSegment), [{"version_id": version_id, "segment_id": s} for s in seg_ids]
        )


def _version_of(row: DatasetVersion) -> Version:
    return Version(
        dataset=row.dataset,
        version_id=row.version_id,
        tag=row.tag,
        parent_id=row.parent_id,
        samples=row.samples,
        train=row.train,
        val=row.val,
        added=row.added,
        removed=row.removed,
        changed=row.changed,
        created_at=row.created_at.isoformat(),
        path=row.path,
        invalid=row.invalid,
    )

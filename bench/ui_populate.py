"""The synthetic versions bench/ui.py measures: N versions of M samples, each dropping,
adding and rewriting a few, recorded as the rows layout (a row per sample per version) or the
chunked one (leaves shared between versions, written as a commit writes them)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

WORK = Path(__file__).resolve().parent / "_work" / "ui"

CLASSES = 10
CHURN, REWRITE = 1_000, 100


def md5_hex(i: int, gen: int = 0) -> str:
    return hashlib.md5(f"{i}:{gen}".encode()).hexdigest()


def version_members(k: int, samples: int) -> range:
    """File numbers of version k: a window that slides by CHURN per version."""
    return range(k * CHURN, k * CHURN + samples)


def path_of(i: int) -> str:
    return f"bench/c{i % CLASSES}/img_{i:08d}.png"


def gen_of(i: int, k: int) -> int:
    """Content generation of file i in version k: the REWRITE newest-shared files of each
    version got new bytes at version k."""
    base = k * CHURN
    return k if base <= i < base + REWRITE else 0


def sample_rows(k: int, samples: int, vid: str, gens: dict[int, int]) -> tuple[list[tuple], dict]:
    rows = []
    per_split: dict[str, dict[str, int]] = {"train": {}, "val": {}}
    for idx, i in enumerate(version_members(k, samples)):
        g = gen_of(i, k) if k else 0
        if g:
            gens[i] = g
        split = "val" if i % 5 == 0 else "train"
        label = f"c{i % CLASSES}"
        per_split[split][label] = per_split[split].get(label, 0) + 1
        rows.append((vid, idx, path_of(i), md5_hex(i, gens.get(i, 0)), label, split, False))
    return rows, per_split


def bulk_insert_samples(raw, dialect: str, rows: list[tuple]) -> None:
    """The fastest plain path of each backend: COPY on PostgreSQL, executemany on SQLite."""
    cols = "version_id, idx, path, md5, label, split, duplicate"
    cur = raw.cursor()
    if dialect == "postgresql":
        with cur.copy(f"COPY version_samples ({cols}) FROM STDIN") as copy:
            for r in rows:
                copy.write_row(r)
    else:
        cur.executemany(f"INSERT INTO version_samples ({cols}) VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
    cur.close()


class _Sample:
    """What chunkwrite.write_tree reads of a sample (chunks.SampleLike)."""

    __slots__ = (
        "path", "md5", "label", "split", "segment_id", "row", "size", "mtime_ns", "duplicate",
        "line", "copy",
    )  # fmt: skip

    def __init__(self, idx: int, path: str, md5: str, label: str, split: str) -> None:
        self.path, self.md5, self.label, self.split = path, md5, label, split
        # A content's place in its segment is fixed by the file (a build never moves it): the
        # file number, not the sample's index in the version (that shifts every version).
        self.segment_id, self.row, self.size, self.mtime_ns = "s" * 64, int(path[-12:-4]), 100, 1
        self.duplicate, self.line, self.copy = False, None, 0


def record_chunked(store, data_root: Path, vid: str, rows: list[tuple], prev, manifest: dict):
    """Record one version the way a commit does: its chunk tree written under ``data_root``
    (the parent's leaves offered), the new leaves' entries and the version's leaf list.
    Returns (tree, samples) for the next version to lean on."""
    from pipeline.datasets import chunks, chunkwrite
    from pipeline.datasets.build.chunkrows import known_leaves, record_tree
    from pipeline.metadata.datasets import DatasetVersion

    # Version order is lake path order (sample_rows numbers the files, not the paths).
    samples = [_Sample(r[1], r[2], r[3], r[4], r[5]) for r in sorted(rows, key=lambda r: r[2])]
    offered = None
    if prev is not None:
        tree, old = prev
        offered = [
            (leaf, chunks.sample_key(old[start]))
            for leaf, (start, _stop) in zip(tree.leaves, tree.bounds, strict=True)
        ]
    with store.session() as session:
        tree = chunkwrite.write_tree(
            data_root, samples, known=known_leaves(session), parent=offered
        )
        manifest = {**manifest, "format_version": 2, "chunks": tree.manifest_section()}
        session.add(DatasetVersion(**_version_row(vid, manifest)))
        session.flush()
        record_tree(session, vid, data_root, manifest, tree)
    return tree, samples


def _version_row(vid: str, manifest: dict) -> dict:
    k, samples, counts = manifest["k"], manifest["counts"]["samples"], manifest["counts"]
    return {
        "version_id": vid,
        "dataset": "bench",
        "tag": f"bench_v20260101_{vid[:8]}",
        "parent_id": manifest["parent"],
        "recipe_hash": "r" * 64,
        "format": "npy",
        "status": "committed",
        "samples": samples,
        "train": counts["train"],
        "val": counts["val"],
        "files": samples,
        "invalid": 0,
        "added": CHURN if k else samples,
        "removed": CHURN if k else 0,
        "changed": REWRITE if k else 0,
        "path": f"datasets/bench/{vid}",
        "manifest_sha256": "0" * 64,
        "manifest": json.dumps(manifest),
        "created_at": datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=k),
    }


def populate(store, versions: int, samples: int, layout: str = "rows") -> list[str]:
    """Bulk-insert the synthetic versions, their samples (``layout``: a row per sample, or
    chunked) and runs (one commit per version); return the version ids, oldest first."""
    from sqlalchemy import insert, text

    from pipeline.metadata.datasets import DatasetVersion
    from pipeline.metadata.runs import TrainingRun

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    ids: list[str] = []
    gens: dict[int, int] = {}
    raw = store.engine.raw_connection()
    try:
        if store.dialect == "sqlite":
            cur = raw.cursor()
            cur.execute("PRAGMA cache_size=-1000000")  # 1 GB: the md5 index is random inserts
            cur.close()
        prev = None
        for k in range(versions):
            vid = hashlib.sha256(f"bench-{k}-{samples}".encode()).hexdigest()
            ids.append(vid)
            rows, per_split = sample_rows(k, samples, vid, gens)
            if layout == "rows":
                bulk_insert_samples(raw, store.dialect, rows)
                raw.commit()
            counts = {
                "samples": samples,
                "train": sum(per_split["train"].values()),
                "val": sum(per_split["val"].values()),
                "files": samples,
                "per_split": {
                    s: {"samples": sum(c.values()), "classes": dict(sorted(c.items()))}
                    for s, c in per_split.items()
                },
            }
            manifest = {
                "format_version": 1,
                "id": vid,
                "k": k,
                "parent": ids[k - 1] if k else None,
                "modality": "image",
                "format": "npy",
                "classes": [f"c{c}" for c in range(CLASSES)],
                "counts": counts,
            }
            if layout == "chunked":
                prev = record_chunked(store, WORK / "data", vid, rows, prev, manifest)
            with store.engine.begin() as conn:
                if layout == "rows":
                    conn.execute(insert(DatasetVersion), [_version_row(vid, manifest)])
                conn.execute(
                    insert(TrainingRun),
                    [
                        {
                            "run_id": f"train-{k}-{r}",
                            "dataset": "bench",
                            "version_id": vid,
                            "params": {"epochs": 3},
                            "status": "succeeded",
                            "best_metric": 0.5 + r / 10,
                            "metric_name": "val_accuracy",
                            "dag_id": "train",
                            "dag_run_id": f"manual__{k}_{r}",
                            "launcher": "local",
                            "started_at": t0 + timedelta(minutes=k, seconds=r),
                            "updated_at": t0,
                        }
                        for r in range(3)
                    ],
                )
            if k % 10 == 9:
                print(f"    {k + 1}/{versions} versions in", flush=True)
    finally:
        raw.close()
    with store.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE"))
    return ids

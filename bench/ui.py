"""Datasets page / JSON API benchmark: 100 versions of 100,000 samples each (10 M samples).

Two stores of the same versions, side by side: ``chunked`` (how versions are recorded now:
content-addressed leaves, ``chunks`` / ``chunk_entries`` rows for each distinct leaf and a
``version_chunks`` row per leaf per version; written with pipeline.datasets.chunks and
recorded with the commit's own chunkrows.record_tree, the parent's leaves offered as a commit
offers them) and ``rows`` (the layout before chunks: a ``version_samples`` row per sample per
version, 10 M rows). Reported: each store's size (target: chunked <= 10 % of rows) and every
page on both (target: no worse on chunked).

The rows store is filled directly with bulk inserts of synthetic rows shaped like real builds:
each version keeps the previous one's paths but drops 1,000, adds 1,000 and rewrites 100 (so
consecutive versions differ like real ones), has 3 training runs, and a manifest with its
per-split class counts. Then each endpoint of the app (FastAPI TestClient, auth stubbed: auth
is not what is measured) is timed against a baseline measured in the same run: the bare SQL
that any implementation must at least run for the same answer (a count or the same indexed
lookup, no ORM, no JSON, no HTML). The ratio is endpoint / baseline.

Also counted: SQL statements per request (must not grow with the page size: no N+1).

    python bench/ui.py                       # both layouts, the full size on SQLite (minutes)
    python bench/ui.py --layout chunked      # the chunked store only
    python bench/ui.py --backend postgresql  # the same on the local PostgreSQL
    python bench/ui.py --versions 10 --samples 20000 --no-write   # quick
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import report  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "ui"
PG_ADMIN = os.environ.get(
    "LAKETRAIN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
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


def median_ms(fn, repeat: int) -> float:
    fn()  # warm caches (page cache, statement cache) once
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1000


def store_bytes(store) -> int:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        if store.dialect == "postgresql":
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar())
        pages = conn.execute(text("PRAGMA page_count")).scalar()
        return int(pages * conn.execute(text("PRAGMA page_size")).scalar())


def run(
    backend: str, versions: int, samples: int, repeat: int, layout: str = "rows"
) -> tuple[list[tuple], dict]:
    from fastapi.testclient import TestClient
    from sqlalchemy import event, text

    from pipeline.metadata.store import MetadataStore
    from pipeline.ui.app import create_app

    pg_db = None
    if backend == "sqlite":
        WORK.mkdir(parents=True, exist_ok=True)
        (WORK / f"{layout}.db").unlink(missing_ok=True)
        url = f"sqlite:///{WORK / f'{layout}.db'}"
    else:
        import psycopg

        pg_db = f"lt_bench_ui_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(PG_ADMIN.replace("+psycopg", ""), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{pg_db}"')
        url = PG_ADMIN.rsplit("/", 1)[0] + "/" + pg_db
    store = MetadataStore(url)
    try:
        t = time.perf_counter()
        shutil.rmtree(WORK / "data", ignore_errors=True)
        ids = populate(store, versions, samples, layout)
        fill_s = time.perf_counter() - t
        size = store_bytes(store)
        chunk_files = sum(p.stat().st_size for p in (WORK / "data").rglob("*") if p.is_file())
        client = TestClient(create_app(lambda: None, get_store=lambda: store))
        statements = {"n": 0}
        event.listen(
            store.engine,
            "before_cursor_execute",
            lambda *a, **k: statements.__setitem__("n", statements["n"] + 1),
        )

        def raw(sql: str, **params):
            def go():
                with store.engine.connect() as conn:
                    return conn.execute(text(sql), params).all()

            return go

        def api(path: str, **params):
            def go():
                r = client.get(path, params=params)
                assert r.status_code == 200, (path, r.status_code, r.text[:300])
                return r

            return go

        mid, nxt, last, first = ids[versions // 2], ids[versions // 2 + 1], ids[-1], ids[0]
        probe_i = versions // 2 * CHURN + samples // 2
        anti = (
            "SELECT count(*) FROM version_samples b LEFT JOIN version_samples a "
            "ON a.version_id = :a AND a.path = b.path WHERE b.version_id = :b AND a.id IS NULL"
        )
        cases = [
            (
                "list versions, page of 25 (+ runs)",
                api("/api/versions", limit=25),
                raw("SELECT * FROM dataset_versions ORDER BY created_at DESC LIMIT 25"),
            ),
            (
                "list versions, last page",
                api("/api/versions", limit=25, offset=max(0, versions - 25)),
                raw(
                    "SELECT * FROM dataset_versions ORDER BY created_at DESC LIMIT 25 OFFSET :o",
                    o=max(0, versions - 25),
                ),
            ),
            (
                "datasets",
                api("/api/datasets"),
                raw("SELECT dataset, count(*) FROM dataset_versions GROUP BY dataset"),
            ),
            (
                "index page (HTML)",
                api("/"),
                raw("SELECT * FROM dataset_versions ORDER BY created_at DESC LIMIT 25"),
            ),
            (
                "version detail",
                api(f"/api/versions/{mid}"),
                raw("SELECT * FROM dataset_versions WHERE version_id = :v", v=mid),
            ),
            (
                "version page (HTML)",
                api(f"/versions/{mid}"),
                raw("SELECT * FROM dataset_versions WHERE version_id = :v", v=mid),
            ),
            (
                "diff, consecutive versions",
                api(f"/api/versions/{mid}/diff/{nxt}"),
                raw(anti, a=mid, b=nxt),
            ),
            (
                "diff, first vs last",
                api(f"/api/versions/{first}/diff/{last}"),
                raw(anti, a=first, b=last),
            ),
            ("diff page (HTML)", api("/diff", a=mid, b=nxt), raw(anti, a=mid, b=nxt)),
            (
                "contains, by md5",
                api("/api/contains", q=md5_hex(probe_i)),
                raw("SELECT version_id FROM version_samples WHERE md5 = :m", m=md5_hex(probe_i)),
            ),
            (
                "contains, by path",
                api("/api/contains", q=path_of(probe_i)),
                raw("SELECT version_id FROM version_samples WHERE path = :p", p=path_of(probe_i)),
            ),
        ]
        # The floor of any request through this app and client, whatever it reads.
        floor = median_ms(api("/static/style.css"), repeat * 3)
        print(
            f"  {backend:10} floor (a static file through the same app): {floor:.1f} ms", flush=True
        )
        results = []
        for name, project, baseline in cases:
            statements["n"] = 0
            project()
            n_sql = statements["n"]
            p = median_ms(project, repeat)
            # The bare SQL reads version_samples: a baseline of the rows layout only.
            b = median_ms(baseline, repeat) if layout == "rows" else float("nan")
            results.append((name, p, b, p / b if b == b and b else float("nan"), n_sql))
            print(
                f"  {backend:10} {layout:8} {name:38} {p:9.1f} ms  baseline {b:8.1f} ms  sql={n_sql}",
                flush=True,
            )
        # The store engineer's diff (whole path lists into Python) for comparison.
        from pipeline.datasets import queries
        from pipeline.ui import data

        # In-process, no HTTP: first vs last (no stored counts to lean on) both ways.
        reps = max(1, repeat // 2)
        q = median_ms(lambda: queries.diff_versions(first, last, store=store, limit=100), reps)
        ours = median_ms(lambda: data.diff_versions(store, first, last), reps)
        extra = {
            "fill_s": fill_s,
            "queries_diff_ms": q,
            "ui_diff_ms": ours,
            "floor_ms": floor,
            "store_bytes": size,
            "chunk_file_bytes": chunk_files,
        }
        print(
            f"  {backend:10} populate {versions}x{samples}: {fill_s:.1f} s; in-process diff first vs last: "
            f"pipeline.ui.data {ours:.1f} ms, queries.diff_versions (python merge) {q:.1f} ms"
        )
        return results, extra
    finally:
        store.dispose()
        if pg_db:
            import psycopg

            with psycopg.connect(PG_ADMIN.replace("+psycopg", ""), autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{pg_db}" WITH (FORCE)')


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="sqlite")
    ap.add_argument("--layout", choices=["rows", "chunked", "both"], default="both")
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()
    if args.versions < 3 or args.samples <= CHURN:
        ap.error(f"--versions must be >= 3 and --samples > {CHURN}")
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    layouts = ["rows", "chunked"] if args.layout == "both" else [args.layout]
    lines = [
        f"{args.versions} versions × {args.samples:,} samples ({args.versions * args.samples:,} samples "
        f"in all), 3 runs per version; median of {args.repeat}. The same versions in two stores: "
        "`rows` (a `version_samples` row per sample per version, the layout before chunks) and "
        "`chunked` (how a commit records versions now). Baseline of the rows store: the bare SQL "
        "of the same lookup (rows of the page / the anti-join count / the indexed md5 or path "
        "lookup); of the chunked store: the same request on the rows store (target: no worse). "
        "`sql` = statements per request (constant in the page size: no N+1).",
        "",
        "| backend | request | rows ms | bare SQL ms | chunked ms | **chunked / rows** | sql (chunked) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    notes = []
    sizes = []
    for backend in backends:
        got = {lay: run(backend, args.versions, args.samples, args.repeat, lay) for lay in layouts}
        rows_r = {r[0]: r for r in got["rows"][0]} if "rows" in got else {}
        chunk_r = {r[0]: r for r in got["chunked"][0]} if "chunked" in got else {}
        for name in rows_r or chunk_r:
            a = rows_r.get(name)
            c = chunk_r.get(name)
            ratio = f"**{c[1] / a[1]:.2f}x**" if a and c else "-"
            lines.append(
                f"| {backend} | {name} | {a[1] if a else float('nan'):.1f} | "
                f"{a[2] if a else float('nan'):.1f} | {c[1] if c else float('nan'):.1f} | "
                f"{ratio} | {(c or a)[4]} |"
            )
        for lay, (_, extra) in got.items():
            notes.append(
                f"- {backend}, {lay}: populate {extra['fill_s']:.0f} s; store "
                f"{extra['store_bytes'] / 1e6:,.0f} MB"
                + (
                    f" (+ {extra['chunk_file_bytes'] / 1e6:,.0f} MB of chunk files under DATA_ROOT)"
                    if lay == "chunked"
                    else ""
                )
                + f"; a request that reads nothing (the stylesheet) costs {extra['floor_ms']:.1f} ms "
                f"through the same app and client; in-process (no HTTP), first vs last: "
                f"`pipeline.ui.data.diff_versions` {extra['ui_diff_ms']:.0f} ms, "
                f"`queries.diff_versions` {extra['queries_diff_ms']:.0f} ms."
            )
        if len(got) == 2:
            r_b, c_b = got["rows"][1]["store_bytes"], got["chunked"][1]["store_bytes"]
            sizes.append(
                f"| {backend} | {r_b / 1e6:,.0f} MB | {c_b / 1e6:,.0f} MB | **{c_b / r_b * 100:.1f} %** "
                f"{'MET' if c_b <= 0.1 * r_b else 'MISSED'} |"
            )
    if sizes:
        lines = [
            "| backend | store, rows layout | store, chunked | **chunked / rows** (target <= 10 %) |",
            "|---|---:|---:|---:|",
            *sizes,
            "",
            *lines,
        ]
    body = "\n".join(lines + [""] + notes)
    report("bench/ui.py", body, write=not args.no_write)


if __name__ == "__main__":
    main()

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
import os
import shutil
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import report  # noqa: E402

PG_ADMIN = os.environ.get(
    "LAKETRAIN_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
from bench.ui_populate import CHURN, WORK, md5_hex, path_of, populate  # noqa: E402


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

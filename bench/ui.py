"""Datasets page / JSON API benchmark: 100 versions of 100,000 samples each (10 M samples).

Two stores of the same versions, side by side and open at once: ``chunked`` (how versions are recorded now:
content-addressed leaves, ``chunks`` rows and leaf entries for each distinct leaf and a
``version_chunks`` row per leaf per version; written with pipeline.datasets.chunks and
recorded with the commit's own chunkrows.record_tree, the parent's leaves offered as a commit
offers them) and ``rows`` (the layout before chunks: a ``version_samples`` row per sample per
version, 10 M rows). Reported: each store's size (target: chunked <= 10 % of rows) and every
page on both (target: no worse on chunked).

The rows store is filled directly with bulk inserts of synthetic rows shaped like real builds:
each version keeps the previous one's paths but drops 1,000, adds 1,000 and rewrites 100 (so
consecutive versions differ like real ones), has 3 training runs, and a manifest with its
per-split class counts. Then each endpoint of the app (FastAPI TestClient, auth stubbed: auth
is not what is measured) is timed on both stores in turns, round by round, so that the
machine's load moves both alike, and on the rows store against the bare SQL that any
implementation must at least run for the same answer (a count or the same indexed lookup, no
ORM, no JSON, no HTML).

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
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import quartiles, report  # noqa: E402

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


def paired_ms(fns: dict[str, Callable[[], object]], repeat: int) -> tuple[dict[str, float], list]:
    """Each of ``fns`` timed ``repeat`` times, taking turns within each round (the order
    reversed every other round), so that the machine's load moves them all alike: the median
    ms of each, and the per-round ratios of the second to the first (two of them)."""
    for fn in fns.values():
        fn()  # warm caches once
    names = list(fns)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:
            t = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t)
    ratios = (
        [b / a for a, b in zip(times[names[0]], times[names[1]], strict=True)]
        if len(names) == 2
        else []
    )
    return {name: statistics.median(ts) * 1000 for name, ts in times.items()}, ratios


def store_bytes(store) -> int:
    from sqlalchemy import text

    with store.engine.connect() as conn:
        if store.dialect == "postgresql":
            return int(conn.execute(text("SELECT pg_database_size(current_database())")).scalar())
        pages = conn.execute(text("PRAGMA page_count")).scalar()
        return int(pages * conn.execute(text("PRAGMA page_size")).scalar())


@dataclass
class Layout:
    """One populated store and the app on it: every case as (name, request, bare SQL)."""

    name: str
    store: object
    cases: list[tuple[str, Callable[[], object], Callable[[], object]]]
    statements: dict[str, int]
    ids: list[str]
    extra: dict[str, float] = field(default_factory=dict)


@contextmanager
def open_layout(backend: str, versions: int, samples: int, layout: str) -> Iterator[Layout]:
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
        ids = populate(store, versions, samples, layout)
        fill_s = time.perf_counter() - t
        chunk_files = 0
        if layout == "chunked":
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

        cases = [("a request that reads nothing (the stylesheet)", api("/static/style.css"), None)]
        cases += _cases(ids, versions, samples, api, raw)
        extra = {
            "fill_s": fill_s,
            "store_bytes": store_bytes(store),
            "chunk_file_bytes": chunk_files,
        }
        yield Layout(layout, store, cases, statements, ids, extra)
    finally:
        store.dispose()
        if pg_db:
            import psycopg

            with psycopg.connect(PG_ADMIN.replace("+psycopg", ""), autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{pg_db}" WITH (FORCE)')


def _cases(ids: list[str], versions: int, samples: int, api, raw) -> list[tuple]:
    mid, nxt, last, first = ids[versions // 2], ids[versions // 2 + 1], ids[-1], ids[0]
    probe_i = versions // 2 * CHURN + samples // 2
    anti = (
        "SELECT count(*) FROM version_samples b LEFT JOIN version_samples a "
        "ON a.version_id = :a AND a.path = b.path WHERE b.version_id = :b AND a.id IS NULL"
    )
    page = "SELECT * FROM dataset_versions ORDER BY created_at DESC LIMIT 25"
    one = "SELECT * FROM dataset_versions WHERE version_id = :v"
    return [
        ("list versions, page of 25 (+ runs)", api("/api/versions", limit=25), raw(page)),
        (
            "list versions, last page",
            api("/api/versions", limit=25, offset=max(0, versions - 25)),
            raw(page + " OFFSET :o", o=max(0, versions - 25)),
        ),
        (
            "datasets",
            api("/api/datasets"),
            raw("SELECT dataset, count(*) FROM dataset_versions GROUP BY dataset"),
        ),
        ("index page (HTML)", api("/"), raw(page)),
        ("version detail", api(f"/api/versions/{mid}"), raw(one, v=mid)),
        ("version page (HTML)", api(f"/versions/{mid}"), raw(one, v=mid)),
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


def run(backend: str, layouts: list[Layout], repeat: int) -> list[tuple]:
    """Every case on every layout, the layouts taking turns (paired_ms); per case: (name,
    {layout: ms}, bare SQL ms on the rows store, chunked/rows ratios per round, statements
    per request on each layout)."""
    results = []
    for k, (name, *_rest) in enumerate(layouts[0].cases):
        n_sql = {}
        for lay in layouts:
            lay.statements["n"] = 0
            lay.cases[k][1]()
            n_sql[lay.name] = lay.statements["n"]
        # The stylesheet is the floor of any request: timed more often, being cheap.
        reps = repeat * 3 if layouts[0].cases[k][2] is None else repeat
        ms, ratios = paired_ms({lay.name: lay.cases[k][1] for lay in layouts}, reps)
        rows = next((lay for lay in layouts if lay.name == "rows"), None)
        # The bare SQL reads version_samples: a baseline of the rows layout only.
        bare = median_ms(rows.cases[k][2], repeat) if rows and rows.cases[k][2] else float("nan")
        results.append((name, ms, bare, ratios, n_sql))
        print(f"  {backend:10} {name:46} " + "  ".join(f"{a} {b:8.1f} ms" for a, b in ms.items())
              + f"  bare {bare:7.1f} ms  sql={n_sql}", flush=True)  # fmt: skip
    # In-process, no HTTP: first vs last (no stored counts to lean on), the store engineer's
    # diff (whole path lists into Python) beside the UI's.
    from pipeline.datasets import queries
    from pipeline.ui import data

    for lay in layouts:
        first, last, store = lay.ids[0], lay.ids[-1], lay.store
        reps = max(1, repeat // 2)
        lay.extra["queries_diff_ms"] = median_ms(
            lambda a=first, b=last, st=store: queries.diff_versions(a, b, store=st, limit=100),
            reps,
        )
        lay.extra["ui_diff_ms"] = median_ms(
            lambda a=first, b=last, st=store: data.diff_versions(st, a, b), reps
        )
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", type=int, default=100)
    ap.add_argument("--samples", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="sqlite")
    ap.add_argument("--layout", choices=["rows", "chunked", "both"], default="both")
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()
    if args.versions < 3 or args.samples <= CHURN:
        ap.error(f"--versions must be >= 3 and --samples > {CHURN}")
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    names = ["rows", "chunked"] if args.layout == "both" else [args.layout]
    lines = [
        f"{args.versions} versions × {args.samples:,} samples ({args.versions * args.samples:,} samples "
        f"in all), 3 runs per version. The same versions in two stores, both open at once: "
        "`rows` (a `version_samples` row per sample per version, the layout before chunks) and "
        "`chunked` (how a commit records versions now). Each request runs "
        f"{args.repeat} rounds, the two stores taking turns within each round (in alternating "
        "order), so that the machine's load moves both alike; ms are medians, and **chunked / "
        "rows** is the median of the per-round ratios, with their quartiles. A page is worse on "
        "the chunked store when even its lower quartile is above 1 (slower in at least three "
        "rounds of four). Baseline of the rows store: the bare SQL of the same lookup (rows of "
        "the page / the anti-join count / the indexed md5 or path lookup). `sql` = statements "
        "per request (constant in the page size: no N+1).",
        "",
        "| backend | request | rows ms | bare SQL ms | chunked ms | **chunked / rows** "
        "(quartiles) | target: no worse | sql (chunked) |",
        "|---|---|---:|---:|---:|---:|---|---:|",
    ]
    notes: list[str] = []
    sizes: list[str] = []
    for backend in backends:
        shutil.rmtree(WORK / "data", ignore_errors=True)  # the chunked store's leaf files
        with ExitStack() as stack:
            layouts = [
                stack.enter_context(open_layout(backend, args.versions, args.samples, name))
                for name in names
            ]
            results = run(backend, layouts, args.repeat)
        for name, ms, bare, ratios, n_sql in results:
            if ratios:
                q1, q2, q3 = quartiles(ratios)
                ratio = f"**{q2:.2f}x** ({q1:.2f}-{q3:.2f})"
                verdict = "-" if name.startswith("a request") else ("WORSE" if q1 > 1 else "MET")
            else:
                ratio, verdict = "-", "-"
            lines.append(
                f"| {backend} | {name} | {ms.get('rows', float('nan')):.1f} | {bare:.1f} | "
                f"{ms.get('chunked', float('nan')):.1f} | {ratio} | {verdict} | "
                f"{n_sql.get('chunked', n_sql.get('rows'))} |"
            )
        for lay in layouts:
            extra = lay.extra
            notes.append(
                f"- {backend}, {lay.name}: populate {extra['fill_s']:.0f} s; store "
                f"{extra['store_bytes'] / 1e6:,.0f} MB"
                + (
                    f" (+ {extra['chunk_file_bytes'] / 1e6:,.0f} MB of chunk files under DATA_ROOT)"
                    if lay.name == "chunked"
                    else ""
                )
                + f"; in-process (no HTTP), first vs last: "
                f"`pipeline.ui.data.diff_versions` {extra['ui_diff_ms']:.0f} ms, "
                f"`queries.diff_versions` {extra['queries_diff_ms']:.0f} ms."
            )
        if len(layouts) == 2:
            r_b, c_b = (lay.extra["store_bytes"] for lay in layouts)
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

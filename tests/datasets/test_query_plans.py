"""A build's lookups of a few paths or contents search their index; none walks the lake.

SQLite plans without statistics (a store is never ANALYZEd). A lookup such as ``path IN (...)
AND dataset = ?`` then walks the dataset's index, every row of the lake once per batch: at a
million files a 500-path lookup took half a second, once per shard and per delta commit,
which made the full build quadratic. Every statement a full build and a delta commit run with
an IN list on the ledger, the processed samples or the chunk entries is planned again here,
and its outer loop must search the index of the column the list is over.
"""

from __future__ import annotations

import re
import sqlite3

import pytest
from sqlalchemy import event

from tests.datasets.conftest import image_lake, write_jpeg

_TABLES = ("ledger_files", "processed_samples", "chunk_entries")
# A lookup: an IN list of paths, contents, row ids or chunk hashes (not of statuses).
_LOOKUP = re.compile(r"\b(?:\w+\.)?(?:path|md5|id|hash|chunk_hash) IN \(", re.IGNORECASE)
# The outer loop's step: a search of an index (or the rowid) by the IN list's column.
_INDEXED = re.compile(
    r"^SEARCH (\w+) USING (?:COVERING )?(?:INDEX \w+ \((?:path|md5|id|chunk_hash|hash)=\?"
    r"|INTEGER PRIMARY KEY \(rowid=\?)"
)

# The version check of a lookup of one version's entries (version_rows.ENTRIES_OF_VERSION).
_VERSION_PROBE = re.compile(
    r"^SEARCH vc USING (?:COVERING )?INDEX \w+ \(chunk_hash=\? AND version_id=\?\)"
)


def _traced(store) -> list[str]:
    statements: list[str] = []

    def on_connect(dbapi_conn, _record) -> None:
        dbapi_conn.set_trace_callback(statements.append)

    event.listen(store.engine, "connect", on_connect)
    store.engine.dispose()  # connections made before the listener are not traced
    return statements


def _lookups(statements: list[str]) -> list[str]:
    return sorted(
        {
            s
            for s in statements
            if _LOOKUP.search(s)
            and any(t in s for t in _TABLES)
            and s.lstrip().upper().startswith(("SELECT", "UPDATE"))
        }
    )


def test_lookups_by_path_or_content_search_their_index(sqlite_store, home, monkeypatch):
    from pipeline.datasets.build import committing, run_build

    monkeypatch.setattr(committing, "DELTA", True)
    image_lake(home, per_class=20)
    statements = _traced(sqlite_store)
    assert run_build("pets", workers=1, store=sqlite_store).version is not None
    for cls in ("cat", "dog"):  # the delta commit's case: new files in every class folder
        for i in range(3):
            write_jpeg(home / "lake" / "pets" / cls / f"new{i}.jpg", seed=5000 + i + len(cls))
    (home / "lake" / "pets" / "cat" / "broken.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    (home / "lake" / "pets" / "dog" / "000.jpg").unlink()
    second = run_build("pets", workers=1, store=sqlite_store)
    assert second.version is not None and second.version.added == 6

    lookups = _lookups(statements)
    db = sqlite3.connect(sqlite_store.url.removeprefix("sqlite:///"))
    try:
        plans = {
            sql: [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql)] for sql in lookups
        }
    finally:
        db.close()
    for sql, plan in plans.items():
        outer = next(step for step in plan if step.startswith(("SEARCH", "SCAN")))
        assert _INDEXED.match(outer), f"{sql[:160]}…\nplans as {plan}"
    # A lookup of one version's entries checks each entry's leaf against the version with one
    # probe of (chunk_hash, version_id): not a read of the row of every version sharing the leaf.
    joined = [sql for sql in plans if "version_chunks vc" in sql]
    assert joined, "no lookup of one version's entries ran"
    for sql in joined:
        assert any(_VERSION_PROBE.match(step) for step in plans[sql]), (
            f"{sql[:160]}…\nplans as {plans[sql]}"
        )
    # The lookups this test is about all ran (else it would pass by checking nothing).
    for shape in (
        "FROM ledger_files WHERE path IN",  # a shard's stat keys; the delta's ledger rows
        "FROM ledger_files WHERE md5 IN",  # a segment's verdicts on its files
        "AND ce.path IN",  # the head's contents at the changed paths; the diff
        "AND ce.md5 IN",  # the head's entries of the touched contents
        "FROM processed_samples WHERE recipe_hash",  # the delta's processed rows
    ):
        assert any(shape in s for s in lookups), f"no lookup ran with {shape!r}"


_PATHS = ", ".join(f"'pets/cat/{i:03d}.jpg'" for i in range(10))


@pytest.mark.parametrize(
    "sql",
    [
        # The shapes the build used before, which walk the lake: the check must catch them.
        # (A list of five or more values: with fewer, SQLite still takes the path index.)
        "SELECT path FROM ledger_files WHERE deleted_at IS NULL AND dataset = 'pets' "
        f"AND path IN ({_PATHS})",
        "SELECT DISTINCT ce.md5 FROM chunk_entries ce JOIN version_chunks vc "
        f"ON vc.chunk_hash = ce.chunk_hash WHERE vc.version_id = 'x' AND ce.path IN ({_PATHS})",
    ],
)
def test_the_plan_check_catches_a_walk(sqlite_store, sql):
    from pipeline.metadata.store import MetadataStore

    MetadataStore(sqlite_store.url)  # migrated: the tables and their indexes exist
    db = sqlite3.connect(sqlite_store.url.removeprefix("sqlite:///"))
    try:
        plan = [row[3] for row in db.execute("EXPLAIN QUERY PLAN " + sql)]
    finally:
        db.close()
    outer = next(step for step in plan if step.startswith(("SEARCH", "SCAN")))
    assert not _INDEXED.match(outer), plan

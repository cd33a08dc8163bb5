"""The scan's fast path and its cheap store access: what a no-change rescan reads and writes,
the fast path inside the walk, and a SQLite store scanned without SQLAlchemy."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from pipeline.lake import ledger_db
from pipeline.lake.ledger_query import list_files
from pipeline.lake.rejected import rejected_files
from pipeline.lake.scan import scan
from pipeline.lake.walk import Candidate, FastPath, walk_lake
from pipeline.metadata import ledger
from tests.lake.conftest import write
from tests.lake.test_bad_names import BAD, png_bytes, write_raw


def _stored(store, path: str):
    with store.session() as s:
        return s.execute(
            text("SELECT last_seen, last_scan_id FROM ledger_files WHERE path = :p"), {"p": path}
        ).one()


def _age_everything(store, minutes: int) -> None:
    """Move every stored time back, as if the last scan ran ``minutes`` ago."""
    with store.session() as s:
        for table, cols in (
            ("ledger_files", ("last_seen", "first_seen", "content_changed_at")),
            ("scans", ("started_at", "finished_at")),
        ):
            rows = s.execute(text(f"SELECT id, {', '.join(cols)} FROM {table}")).all()
            for row in rows:
                values = {c: _minus(v, minutes) for c, v in zip(cols, row[1:], strict=True)}
                sets = ", ".join(f"{c} = :{c}" for c in cols)
                s.execute(
                    text(f"UPDATE {table} SET {sets} WHERE id = :id"), {**values, "id": row[0]}
                )


def _minus(value, minutes: int):
    value = _utc(value)
    return None if value is None else value - timedelta(minutes=minutes)


def _utc(value):
    """A stored or listed time as an aware UTC datetime (SQLite hands back text)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _latest_scan_start(store):
    with store.session() as s:
        return _utc(s.execute(text("SELECT MAX(started_at) FROM scans")).scalar())


def test_a_no_change_rescan_writes_no_ledger_row_yet_reports_every_file_seen_now(store, lake):
    write(lake / "ds" / "a" / "1.bin", "one")
    write(lake / "ds" / "a" / "2.bin", "two")
    write(lake / "ds" / "b" / "bad.bin", "bytes the preprocessor refused")
    scan(lake, store=store, workers=1)
    with store.session() as s:
        s.execute(text("UPDATE ledger_files SET status = 'invalid' WHERE path = 'ds/b/bad.bin'"))
    _age_everything(store, 10)
    before = _stored(store, "ds/a/1.bin")

    again = scan(lake, store=store, workers=1)
    assert again.unchanged == 3 and not again.has_content_changes
    # Nothing about the row changed, so nothing was written to it ...
    assert _stored(store, "ds/a/1.bin") == before
    # ... and yet it was seen by this scan: listings report the scan's time.
    started = _latest_scan_start(store)
    rows = {r["path"]: r for r in list_files(store=store)}
    assert abs(_utc(rows["ds/a/1.bin"]["last_seen"]) - started) < timedelta(seconds=1)
    (rejected,) = rejected_files(store=store)["items"]
    assert rejected["path"] == "ds/b/bad.bin"
    assert abs(_utc(rejected["last_seen"]) - started) < timedelta(seconds=1)


def test_a_deleted_file_keeps_the_time_it_was_last_seen(store, lake):
    write(lake / "ds" / "a" / "1.bin", "one")
    scan(lake, store=store, workers=1)
    (lake / "ds" / "a" / "1.bin").unlink()
    scan(lake, store=store, workers=1)
    _age_everything(store, 10)
    scan(lake, store=store, workers=1)
    (row,) = list_files(status="deleted", store=store)
    assert _latest_scan_start(store) - _utc(row["last_seen"]) > timedelta(minutes=5)


def test_the_fast_path_yields_only_files_whose_stat_key_moved(lake):
    for name in ("same", "moved", "new"):
        write(lake / "ds" / name, name)
    st = {n: os.stat(lake / "ds" / n) for n in ("same", "moved")}

    def row(name: str, size: int, row_id: int) -> tuple:
        s = st[name]
        return (f"ds/{name}", size, s.st_mtime_ns, s.st_ctime_ns, s.st_ino, row_id)

    fast = FastPath(
        {
            "ds/same": row("same", 4, 1),
            "ds/moved": row("moved", 999, 2),  # a size the file does not have
            "ds/gone": ("ds/gone", 1, 1, 1, 1, 3),
        }
    )
    yielded = list(walk_lake(lake, fast=fast))
    assert sorted(e.path for e in yielded if isinstance(e, Candidate)) == ["ds/moved", "ds/new"]
    assert fast.unchanged == 1
    assert list(fast.stale) == ["ds/moved"] and fast.stale["ds/moved"][5] == 2
    assert list(fast.known) == ["ds/gone"]  # not seen: the scan looks at it as deleted


def test_a_rescan_still_tells_an_escaped_name_from_the_real_file_it_equals(store, lake):
    write_raw(lake, b"pics/cat/" + BAD, png_bytes(1))
    write_raw(lake, b"pics/cat/bad\\xff.png", png_bytes(2))  # literally backslash-x-f-f
    first = scan(lake, store=store, workers=1)
    (real,) = first.new
    again = scan(lake, store=store, workers=1)  # the real file now takes the fast path
    assert again.unchanged == 1 and not again.has_content_changes
    assert [p for p, _ in again.refused] == ["pics/cat/bad\\xff.png"]
    assert "another file has this name" in again.refused[0][1]
    (row,) = list_files(store=store)
    assert (row["status"], row["md5"]) == ("ok", real.md5)


def test_the_scan_sql_uses_the_ledger_statuses():
    assert (
        ledger_db.STATUS_OK,
        ledger_db.STATUS_INVALID,
        ledger_db.STATUS_UNREADABLE,
        ledger_db.STATUS_REFUSED,
    ) == (ledger.STATUS_OK, ledger.STATUS_INVALID, ledger.STATUS_UNREADABLE, ledger.STATUS_REFUSED)


_NO_STORE_SCAN = """
import json, sys
from pipeline.lake.scan import scan
first = scan(workers=1)
second = scan(workers=1)
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "alembic", "pydantic_settings"))
print(json.dumps({"first": first.summary(), "second": second.summary(), "heavy": heavy}))
"""


def _run(home: Path, code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {
        **os.environ,
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
        **env,
    }
    if "METADATA_DB_URL" not in env:
        full.pop("METADATA_DB_URL", None)
    return subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=300
    )


def test_a_sqlite_store_at_head_is_scanned_without_sqlalchemy(lt_env):
    import json

    from pipeline.metadata.store import MetadataStore

    url = f"sqlite:///{lt_env / 'data' / 'metadata.db'}"
    MetadataStore(url).dispose()  # at head
    write(lt_env / "lake" / "ds" / "a.bin", "a")
    write(lt_env / "lake" / "ds" / "b.bin", "b")
    out = _run(lt_env, _NO_STORE_SCAN)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["heavy"] == []
    assert (got["first"]["new"], got["second"]["unchanged"]) == (2, 2)
    # What it recorded reads back through the ORM like any scan's rows.
    rows = list_files(store=MetadataStore(url))
    assert [(r["path"], r["status"]) for r in rows] == [("ds/a.bin", "ok"), ("ds/b.bin", "ok")]


def test_a_scan_without_a_store_handle_upgrades_a_store_that_is_behind(lt_env):
    from pipeline.metadata.store import current_revision, head_revision, make_engine, upgrade

    url = f"sqlite:///{lt_env / 'data' / 'metadata.db'}"
    engine = make_engine(url)
    upgrade(engine, "0001_ledger")
    write(lt_env / "lake" / "ds" / "a.bin", "a")
    out = _run(lt_env, _NO_STORE_SCAN)
    assert out.returncode == 0, out.stderr
    assert current_revision(engine) == head_revision()
    engine.dispose()

"""The dataset's head: ``latest`` is the version matching the lake after its last build, on
SQLite and PostgreSQL, through the queries, the reader with a store and without one, gc, the
ingest DAG's commit task, the migration that introduced heads, and a crash between the store
and the HEAD file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.datasets.conftest import image_lake, write_jpeg

REPO = Path(__file__).resolve().parents[2]


def _cli_build(dataset: str = "pets") -> str:
    from pipeline.cli import app

    result = CliRunner().invoke(app, ["build", dataset, "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def _build(store, dataset: str = "pets"):
    from pipeline.datasets.build import run_build

    return run_build(dataset, workers=1, store=store).version


def _a_then_b_then_back(store, home: Path):
    """Build A; add a file and build B; remove it again (the lake holds A's content)."""
    image_lake(home, per_class=3)
    a = _build(store)
    extra = home / "lake" / "pets" / "cat" / "extra.jpg"
    write_jpeg(extra, seed=77)
    b = _build(store)
    assert a is not None and b is not None and a.version_id != b.version_id
    extra.unlink()
    return a, b


def _head_file(home: Path) -> dict:
    return json.loads((home / "data" / "datasets" / "pets" / "HEAD").read_text())


def test_lake_back_to_an_older_content_moves_the_head_back_and_latest_follows(
    store, home, monkeypatch
):
    from pipeline.datasets import queries
    from pipeline.datasets.reader import open_version

    a, b = _a_then_b_then_back(store, home)
    out = _cli_build()
    assert f"head moved back to {a.tag}" in out and "published" not in out
    assert "no change" in _cli_build()  # the head already is A: nothing to report again

    assert queries.resolve_version("latest", "pets", store=store)["version_id"] == a.version_id
    shown = queries.get_version("latest", "pets", store=store)
    assert shown["version_id"] == a.version_id and shown["is_head"] is True
    listed = {v["version_id"]: v["is_head"] for v in queries.list_versions("pets", store=store)}
    assert listed == {a.version_id: True, b.version_id: False}
    assert queries.list_datasets(store=store)[0]["latest"]["version_id"] == a.version_id
    d = queries.diff_versions(b.tag, "latest", dataset="pets", store=store)
    assert d["b"]["version_id"] == a.version_id and d["counts"]["removed"] == 1

    assert open_version("pets", store=store).version_id == a.version_id
    monkeypatch.delenv("METADATA_DB_URL")  # the trainer without a store: the HEAD file
    assert open_version("pets", data_root=home / "data").version_id == a.version_id
    assert _head_file(home)["version_id"] == a.version_id and _head_file(home)["tag"] == a.tag


def test_the_head_history_lists_every_move_in_the_store_and_in_the_file(store, home):
    from pipeline.datasets.build import commit
    from pipeline.datasets.queries import head_history

    a, b = _a_then_b_then_back(store, home)
    back = _build(store)
    assert back.version_id == a.version_id and back.head_move == "returned"
    assert commit("pets", store=store) is None  # no change: no move, nothing recorded

    moves = head_history("pets", store=store)
    assert [(m["reason"], m["from_version_id"], m["to_version_id"]) for m in moves] == [
        ("returned", b.version_id, a.version_id),
        ("published", a.version_id, b.version_id),
        ("published", None, a.version_id),
    ]
    assert moves[0]["to_tag"] == a.tag and moves[0]["from_tag"] == b.tag
    lines = (home / "data" / "datasets" / "pets" / "head_history.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [m["id"] for m in reversed(moves)]
    assert [json.loads(line)["to_version_id"] for line in lines] == [
        a.version_id,
        b.version_id,
        a.version_id,
    ]


def test_a_new_version_after_moving_back_has_the_head_as_its_parent(store, home):
    a, b = _a_then_b_then_back(store, home)
    _build(store)
    write_jpeg(home / "lake" / "pets" / "dog" / "other.jpg", seed=88)
    c = _build(store)
    assert c.head_move == "published" and c.parent_id == a.version_id
    assert (c.added, c.removed, c.changed) == (1, 0, 0)


def test_gc_keeps_the_head_whatever_keep_last_says(store, home):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.queries import list_versions
    from pipeline.datasets.reader import open_version

    a, b = _a_then_b_then_back(store, home)
    _build(store)  # head back on A, the older of the two
    plan = collect(keep_last=1, min_age_s=0, apply=True, store=store)
    assert a.version_id not in {v["version_id"] for v in plan.versions}
    assert a.version_id in {v["version_id"] for v in list_versions("pets", store=store)}
    r = open_version("pets", store=store)
    assert r.version_id == a.version_id and len(r) == a.samples
    r.get_batch(list(range(len(r))))  # its folder and segments are all still there


def test_the_ingest_commit_task_emits_the_move_back_once(store, home, caplog):
    from pipeline.orchestration.ingest_tasks import commit_dataset

    a, b = _a_then_b_then_back(store, home)
    from pipeline.lake.scan import scan

    scan(home / "lake", dataset="pets", store=store)
    with caplog.at_level("INFO", logger="laketrain.orchestration"):
        extra = commit_dataset("pets", [])
    assert extra is not None and extra["version_id"] == a.version_id  # the dataset event
    assert f"head moved back to version {a.version_id}" in caplog.text
    assert commit_dataset("pets", []) is None  # and only once


def test_without_a_head_file_the_reader_takes_the_newest_manifest(store, home, monkeypatch):
    # Data built before heads existed (format 1, self-contained folders) has no HEAD file:
    # latest is the newest created, as then. (A chunked version always comes with a HEAD.)
    from pipeline.datasets.build import committing
    from pipeline.datasets.reader import open_version

    monkeypatch.setattr(committing, "WRITE_FORMAT", 1)
    image_lake(home, per_class=3)
    _build(store)
    write_jpeg(home / "lake" / "pets" / "cat" / "extra.jpg", seed=77)
    b = _build(store)
    (home / "data" / "datasets" / "pets" / "HEAD").unlink()
    monkeypatch.delenv("METADATA_DB_URL")
    assert open_version("pets", data_root=home / "data").version_id == b.version_id


def test_a_damaged_head_file_is_an_error_naming_it_and_the_next_build_repairs_it(
    store, home, monkeypatch
):
    from pipeline.datasets.manifest import ManifestError
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=3)
    a = _build(store)
    head = home / "data" / "datasets" / "pets" / "HEAD"
    head.write_text('{"version_id": ')
    with monkeypatch.context() as m:
        m.delenv("METADATA_DB_URL")
        with pytest.raises(ManifestError, match="HEAD"):
            open_version("pets", data_root=home / "data")
    assert _build(store) is None  # no change, and the HEAD file is rewritten from the store
    assert _head_file(home)["version_id"] == a.version_id


def test_migration_backfills_the_head_of_a_store_from_before_heads(store, home):
    from alembic import command
    from sqlalchemy import inspect

    from pipeline.datasets.queries import head_history, resolve_version
    from pipeline.metadata.store import alembic_config

    a, b = _a_then_b_then_back(store, home)
    cfg = alembic_config(store.engine.url.render_as_string(hide_password=False))
    command.downgrade(cfg, "0003_runs")  # the store as it was before heads, with A and B in it
    assert "dataset_heads" not in inspect(store.engine).get_table_names()
    command.upgrade(cfg, "head")
    # Backfilled with the newest committed version: what latest meant before.
    assert resolve_version("latest", "pets", store=store)["version_id"] == b.version_id
    assert [(m["reason"], m["to_version_id"]) for m in head_history("pets", store=store)] == [
        ("backfilled", b.version_id)
    ]
    back = _build(store)  # and from there the head moves as it should
    assert back.version_id == a.version_id and back.head_move == "returned"
    assert resolve_version("latest", "pets", store=store)["version_id"] == a.version_id


@pytest.mark.slow
def test_a_build_killed_between_the_store_and_the_head_file_leaves_a_readable_head(
    store, home, monkeypatch
):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    a, b = _a_then_b_then_back(store, home)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pipeline.cli", "build", "pets", "--workers", "1"],
        env={**os.environ, "LAKETRAIN_TEST_PAUSE_AT": "head_committed"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=REPO,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if line.strip() == "LAKETRAIN_PAUSED_AT head_committed" or not line:
                break
        assert proc.poll() is None, "the build never reached head_committed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
        proc.stderr.close()
    # The store moved the head back to A; the HEAD file still names B, a complete version.
    assert open_version("pets", store=store).version_id == a.version_id
    assert _head_file(home)["version_id"] == b.version_id
    collect(keep_last=1, min_age_s=0, apply=True, store=store)  # keeps A and B: both are heads
    with monkeypatch.context() as m:
        m.delenv("METADATA_DB_URL")
        r = open_version("pets", data_root=home / "data")
        assert r.version_id == b.version_id and len(r.get_batch([0])[1]) == 1
    assert _build(store) is None  # no change in the store, and the files catch up
    assert _head_file(home)["version_id"] == a.version_id
    monkeypatch.delenv("METADATA_DB_URL")
    assert open_version("pets", data_root=home / "data").version_id == a.version_id


def test_a_head_file_that_cannot_be_written_is_a_warning_and_the_next_build_writes_it(
    store, home, caplog
):
    # The store has committed the version and its head by then: failing the commit would make
    # its retry a "no change" and lose the dataset event. The files catch up on the next build.
    image_lake(home, per_class=3)
    blocker = home / "data" / "datasets" / "pets" / "HEAD"
    blocker.mkdir(parents=True)  # os.replace onto a directory fails: a real OSError
    with caplog.at_level("WARNING", logger="pipeline.datasets.head"):
        a = _build(store)
    assert a is not None and a.head_move == "published"
    assert "could not be updated" in caplog.text and str(blocker) in caplog.text
    blocker.rmdir()
    assert _build(store) is None
    assert _head_file(home)["version_id"] == a.version_id


def test_a_head_file_naming_an_unpublished_version_is_an_error_not_another_version(
    store, home, monkeypatch
):
    from pipeline.datasets.manifest import VersionNotFound, write_head
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=3)
    _build(store)
    write_head(home / "data", "pets", {"dataset": "pets", "version_id": "0" * 64})
    monkeypatch.delenv("METADATA_DB_URL")
    with pytest.raises(VersionNotFound, match="HEAD names version 0000.*not published"):
        open_version("pets", data_root=home / "data")

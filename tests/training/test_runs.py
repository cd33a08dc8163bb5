"""pipeline.runs on both store backends (SQLite, PostgreSQL), and migration 0003_runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sqlalchemy import func, inspect, select

from pipeline import runs
from pipeline.metadata.runs import Checkpoint, TrainingRun
from training.checkpoint import CheckpointManager

REPO = Path(__file__).resolve().parents[2]


def _count(store, model) -> int:
    with store.session() as s:
        return s.execute(select(func.count()).select_from(model)).scalar_one()


def test_run_started_then_finished(store) -> None:
    started = runs.record_run_started(
        "run-1",
        "digits",
        "v" * 64,
        {"epochs": 3, "lr": 0.01, "amp": "off"},
        dag_id="train",
        dag_run_id="manual__2026-11-29",
        launcher="local",
        store=store,
    )
    assert started["status"] == "running" and started["attempts"] == 1
    assert started["finished_at"] is None and started["started_at"]

    finished = runs.record_run_finished(
        "run-1",
        "succeeded",
        best_metric=0.975,
        metric_name="val_acc",
        checkpoint_url="s3://b/ckpt/run-1/step-40",
        store=store,
    )
    assert finished["status"] == "succeeded"
    run = runs.get_run("run-1", store=store)
    assert run["best_metric"] == pytest.approx(0.975)
    assert run["metric_name"] == "val_acc"
    assert run["checkpoint_url"] == "s3://b/ckpt/run-1/step-40"
    assert run["params"] == {"epochs": 3, "lr": 0.01, "amp": "off"}
    assert (run["dag_id"], run["dag_run_id"], run["launcher"]) == (
        "train",
        "manual__2026-11-29",
        "local",
    )
    assert run["finished_at"] >= run["started_at"]
    assert run["checkpoints"] == []


def test_retry_updates_the_same_row_and_counts_attempts(store) -> None:
    runs.record_run_started("run-r", "digits", "ver1", {"lr": 0.1}, dag_id="train", store=store)
    runs.record_run_finished("run-r", "preempted", error="SIGTERM: spot preemption", store=store)
    first = runs.get_run("run-r", store=store)
    assert first["status"] == "preempted" and first["error"].startswith("SIGTERM")

    again = runs.record_run_started("run-r", "digits", "ver1", {"lr": 0.1}, store=store)
    assert again["attempts"] == 2
    assert again["status"] == "running"
    assert again["error"] is None and again["finished_at"] is None
    assert again["started_at"] == first["started_at"]  # the run's start, not the attempt's
    assert again["dag_id"] == "train"  # kept when the retry does not name it
    assert _count(store, TrainingRun) == 1

    runs.record_run_finished("run-r", "failed", error="x" * 20_000, store=store)
    assert len(runs.get_run("run-r", store=store)["error"]) == 10_000


def test_checkpoints_are_listed_upserted_and_best_moves(store) -> None:
    runs.record_run_started("run-c", "digits", "ver1", {}, store=store)
    for step, metric, best in [(10, 0.5, True), (20, 0.7, True), (30, 0.6, False)]:
        runs.record_checkpoint(
            "run-c", step, step // 10, f"file:///o/run-c/step-{step}", metric, best, store=store
        )
    # A retry re-records step 30 with a new metric: one row, updated.
    runs.record_checkpoint("run-c", 30, 3, "file:///o/run-c/step-30", 0.65, store=store)
    assert runs.record_checkpoint_deleted("run-c", 10, store=store) is True
    assert runs.record_checkpoint_deleted("run-c", 999, store=store) is False

    run = runs.get_run("run-c", store=store)
    ckpts = run["checkpoints"]
    assert [c["step"] for c in ckpts] == [10, 20, 30]
    assert [c["is_best"] for c in ckpts] == [False, True, False]
    assert ckpts[2]["metric"] == pytest.approx(0.65) and ckpts[2]["epoch"] == 3
    assert ckpts[0]["deleted_at"] is not None and ckpts[1]["deleted_at"] is None
    assert run["best_metric"] == pytest.approx(0.7)
    assert run["checkpoint_url"] == "file:///o/run-c/step-20"
    assert _count(store, Checkpoint) == 3


def test_runs_for_version_and_list_runs(store) -> None:
    runs.record_run_started("a", "digits", "ver1", {}, store=store)
    runs.record_run_started("b", "digits", "ver2", {}, store=store)
    runs.record_run_started("c", "iris", "ver1", {}, store=store)
    assert sorted(r["run_id"] for r in runs.runs_for_version("ver1", store=store)) == ["a", "c"]
    assert [r["run_id"] for r in runs.runs_for_version("ver2", store=store)] == ["b"]
    assert runs.runs_for_version("nope", store=store) == []
    assert sorted(r["run_id"] for r in runs.list_runs("digits", store=store)["runs"]) == ["a", "b"]
    assert runs.list_runs(store=store)["total"] == 3
    assert runs.get_run("missing", store=store) is None


def test_default_store_comes_from_settings(store) -> None:
    # The `store` fixture sets METADATA_DB_URL; no store argument anywhere here.
    runs.record_run_started("run-d", "digits", "ver1", {"x": 1})
    runs.record_checkpoint("run-d", 5, 0, "file:///o/run-d/step-5")
    assert runs.get_run("run-d", store=store)["checkpoints"][0]["step"] == 5


def test_bad_input_names_the_field(store) -> None:
    with pytest.raises(runs.RunNotFoundError, match="ghost"):
        runs.record_checkpoint("ghost", 1, 0, "file:///o/x", store=store)
    with pytest.raises(runs.RunNotFoundError, match="ghost"):
        runs.record_run_finished("ghost", "failed", store=store)
    runs.record_run_started("run-b", "digits", "ver1", {}, store=store)
    with pytest.raises(ValueError, match="status"):
        runs.record_run_finished("run-b", "done", store=store)
    with pytest.raises(ValueError, match="status"):
        runs.record_run_started("run-b", "digits", "ver1", {}, status="weird", store=store)
    with pytest.raises(ValueError, match="best_metric"):
        runs.record_run_finished("run-b", "failed", best_metric=float("nan"), store=store)
    with pytest.raises(ValueError, match="step"):
        runs.record_checkpoint("run-b", -1, 0, "file:///o/x", store=store)
    with pytest.raises(ValueError, match="url"):
        runs.record_checkpoint("run-b", 1, 0, "relative/path", store=store)
    with pytest.raises(ValueError, match="version_id"):
        runs.record_run_started("run-z", "digits", "", {}, store=store)
    with pytest.raises(TypeError, match="params"):
        runs.record_run_started("run-z", "digits", "v", ["not", "a", "dict"], store=store)


def test_checkpoint_manager_hooks_record_commits_and_deletions(store, tmp_path: Path) -> None:
    runs.record_run_started("run-h", "digits", "ver1", {}, store=store)
    mgr = CheckpointManager(
        (tmp_path / "o").as_uri(),
        "run-h",
        keep_last=1,
        on_commit=lambda i: runs.record_checkpoint(
            "run-h", i["step"], 0, i["url"], i["metric"], i["is_best"], store=store
        ),
        on_delete=lambda step, url: runs.record_checkpoint_deleted("run-h", step, store=store),
    )
    for step, metric in [(1, 0.9), (2, 0.2), (3, 0.3)]:
        mgr.save(step, {"w": torch.full((2,), float(step))}, metric=metric)
    mgr.close()
    ckpts = {c["step"]: c for c in runs.get_run("run-h", store=store)["checkpoints"]}
    assert sorted(ckpts) == [1, 2, 3]
    assert ckpts[1]["is_best"] and ckpts[1]["deleted_at"] is None
    assert ckpts[2]["deleted_at"] is not None  # removed by retention, the row stays
    assert ckpts[3]["deleted_at"] is None


def test_migration_0003_creates_and_drops_its_tables(store) -> None:
    from alembic import command

    from pipeline.metadata.store import alembic_config

    tables = set(inspect(store.engine).get_table_names())
    assert {"training_runs", "checkpoints"} <= tables
    uniques = inspect(store.engine).get_unique_constraints("checkpoints")
    assert any(set(u["column_names"]) == {"run_id", "step"} for u in uniques)

    cfg = alembic_config(store.engine.url.render_as_string(hide_password=False))
    command.downgrade(cfg, "0002_datasets")
    after = set(inspect(store.engine).get_table_names())
    assert "training_runs" not in after and "checkpoints" not in after
    assert "dataset_versions" in after  # 0002's tables untouched
    command.upgrade(cfg, "head")
    assert {"training_runs", "checkpoints"} <= set(inspect(store.engine).get_table_names())


def test_pipeline_runs_does_not_import_torch() -> None:
    code = "import sys, pipeline.runs; sys.exit(1 if 'torch' in sys.modules or 'airflow' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], cwd=REPO).returncode == 0


def test_concurrent_first_attempts_make_one_row(store) -> None:
    # Two launchers racing to record the same new run: the loser of the insert updates instead.
    import threading

    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def start() -> None:
        try:
            barrier.wait(timeout=30)
            runs.record_run_started("run-race", "digits", "ver1", {"lr": 1}, store=store)
        except BaseException as exc:  # noqa: BLE001 - reported by the assert below
            errors.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert _count(store, TrainingRun) == 1
    assert runs.get_run("run-race", store=store)["attempts"] == 4


def test_launcher_queued_then_trainer_running_is_one_attempt(store) -> None:
    # The DAG records the attempt before launching; the trainer records again when it starts.
    runs.record_run_started("run-q", "digits", "ver1", {"epochs": 3}, status="queued", store=store)
    row = runs.record_run_started("run-q", "digits", "ver1", {"lr": 0.1}, store=store)
    assert (row["attempts"], row["status"]) == (1, "running")
    assert row["params"] == {"epochs": 3, "lr": 0.1}
    runs.record_run_finished("run-q", "preempted", store=store)
    # The orchestrator's retry: queued again (a new attempt), then the trainer joins it.
    assert (
        runs.record_run_started("run-q", "digits", "ver1", {}, status="queued", store=store)[
            "attempts"
        ]
        == 2
    )
    assert runs.record_run_started("run-q", "digits", "ver1", {}, store=store)["attempts"] == 2
    # A trainer started by hand again, without a launcher: a third attempt.
    assert runs.record_run_started("run-q", "digits", "ver1", {}, store=store)["attempts"] == 3


def test_run_events_are_appended_and_kept_across_attempts(store) -> None:
    assert runs.record_run_event("run-ev", "ERROR", "too early", store=store) is False
    runs.record_run_started("run-ev", "digits", "v" * 64, {}, store=store)
    assert runs.get_run("run-ev", store=store)["events"] == []
    assert runs.record_run_event(
        "run-ev",
        "error",
        "every checkpoint unusable",
        time="2026-12-01T00:00:00+00:00",
        store=store,
    )
    runs.record_run_started("run-ev", "digits", "v" * 64, {}, store=store)  # a retry
    runs.record_run_event("run-ev", "WARNING", "second", store=store)
    events = runs.get_run("run-ev", store=store)["events"]
    assert events[0] == {
        "time": "2026-12-01T00:00:00+00:00",
        "level": "ERROR",
        "message": "every checkpoint unusable",
    }
    assert [e["message"] for e in events] == ["every checkpoint unusable", "second"]
    with pytest.raises(ValueError, match="level"):
        runs.record_run_event("run-ev", "LOUD", "x", store=store)


def test_migration_0005_adds_and_drops_the_events_column(store) -> None:
    from alembic import command

    from pipeline.metadata.store import alembic_config

    def columns() -> set[str]:
        return {c["name"] for c in inspect(store.engine).get_columns("training_runs")}

    assert "events" in columns()
    cfg = alembic_config(store.engine.url.render_as_string(hide_password=False))
    command.downgrade(cfg, "0004_heads")
    assert "events" not in columns() and "run_id" in columns()
    command.upgrade(cfg, "head")
    assert "events" in columns()

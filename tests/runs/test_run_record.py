"""The run record in the store, on both backends: readable names, one attempt row per attempt
with its exit code and error, the champion alias and its history, run references."""

from __future__ import annotations

import pytest

from pipeline import runs
from pipeline.runs import repro
from pipeline.runs.models import PromotionError

V1, V2 = "a1" * 32, "b2" * 32


def _finish(run_id: str, store, status="succeeded", **kw) -> dict:
    return runs.record_run_finished(run_id, status, store=store, **kw)


def test_runs_get_readable_names_counted_per_version(store) -> None:
    first = runs.record_run_started(
        "asset_triggered__2026-12-01T07:22:34_hX", "digits", V1, {}, store=store
    )
    second = runs.record_run_started("manual__x", "digits", V1, {}, store=store)
    other = runs.record_run_started("manual__y", "digits", V2, {}, store=store)
    assert (first["name"], second["name"], other["name"]) == (
        f"digits-{V1[:8]}-1",
        f"digits-{V1[:8]}-2",
        f"digits-{V2[:8]}-1",
    )
    # a retry keeps its name; every reference form finds the run
    again = runs.record_run_started("manual__x", "digits", V1, {}, store=store)
    assert again["name"] == second["name"]
    assert runs.resolve_run(second["name"], store) == "manual__x"
    assert runs.resolve_run("asset_trig", store) == "asset_triggered__2026-12-01T07:22:34_hX"
    with pytest.raises(runs.RunNotFoundError, match="ambiguous"):
        runs.resolve_run("manual__", store)
    with pytest.raises(runs.RunNotFoundError, match="no run"):
        runs.resolve_run("nothing-like-it", store)


def test_each_attempt_is_recorded_with_its_exit_code_and_error(store) -> None:
    runs.record_run_started("r", "digits", V1, {"lr": 0.1}, status="queued", store=store)
    runs.record_run_started("r", "digits", V1, {"epochs": 2}, store=store)  # joins attempt 1
    _finish("r", store, "preempted", error="stopped by SIGTERM", exit_code=75)
    runs.record_run_started("r", "digits", V1, {"lr": 0.1}, status="queued", store=store)
    _finish("r", store, "failed", error="CUDA out of memory", exit_code=1)
    runs.record_run_started("r", "digits", V1, {"lr": 0.1}, status="queued", store=store)
    runs.record_run_started("r", "digits", V1, {"epochs": 2}, store=store)
    _finish("r", store, exit_code=0, best_metric=0.9, metric_name="val_accuracy")
    row = runs.get_run("r", store)
    assert row["attempts"] == 3
    log = [(a["n"], a["status"], a["exit_code"], a["error"]) for a in row["attempt_log"]]
    assert log == [
        (1, "preempted", 75, "stopped by SIGTERM"),
        (2, "failed", 1, "CUDA out of memory"),
        (3, "succeeded", 0, None),
    ]
    assert all(a["started_at"] and a["ended_at"] for a in row["attempt_log"])
    assert row["duration_s"] is not None and row["duration_s"] >= 0


def test_an_attempt_that_never_ended_is_closed_by_the_next(store) -> None:
    runs.record_run_started("k", "digits", V1, {}, store=store)  # killed outright: no finish
    runs.record_run_started("k", "digits", V1, {}, store=store)
    _finish("k", store, exit_code=0)
    log = runs.get_run("k", store)["attempt_log"]
    assert [(a["status"], a["ended_at"] is not None) for a in log] == [
        ("lost", True),
        ("succeeded", True),
    ]


def test_the_launchers_command_is_kept_when_the_trainer_joins_its_attempt(store) -> None:
    runs.record_run_started(
        "c", "digits", V1, {}, status="queued", command=["python", "my_train.py"], store=store
    )
    row = runs.record_run_started(
        "c",
        "digits",
        V1,
        {},
        command=["python", "-m", "training"],
        code_version={"source": "git", "commit": "abc", "dirty": False},
        config={"lr": 0.1},
        store=store,
    )
    assert row["command"] == ["python", "my_train.py"]
    assert row["code_version"]["commit"] == "abc" and row["config"] == {"lr": 0.1}
    with pytest.raises(TypeError, match="unknown run record field"):
        runs.record_run_started("c", "digits", V1, {}, colour="red", store=store)
    with pytest.raises(ValueError, match="command must be a list"):
        runs.record_run_started("c", "digits", V1, {}, command="python x.py", store=store)


def test_promote_records_who_and_when_and_keeps_the_history(store) -> None:
    for run_id, metric in (("good", 0.8), ("better", 0.9)):
        runs.record_run_started(run_id, "digits", V1, {}, store=store)
        runs.record_checkpoint(run_id, 4, 2, f"file:///ckpt/{run_id}/step-4", metric, True, store)
        _finish(run_id, store, best_metric=metric, metric_name="val_accuracy", exit_code=0)
    runs.record_run_started("broken", "digits", V1, {}, store=store)
    _finish("broken", store, "failed", error="boom")
    with pytest.raises(PromotionError, match="failed"):
        runs.promote("broken", by="ann", store=store)
    assert runs.champion("digits", store) is None
    first = runs.promote("good", by="ann", store=store)
    assert (first["run_id"], first["by"], first["previous"]) == ("good", "ann", None)
    second = runs.promote("better", by="bob", store=store)
    assert (second["previous"], second["by"]) == ("good", "bob")
    champ = runs.champion("digits", store)
    assert champ["run_id"] == "better" and champ["run"]["is_champion"]
    assert [(h["run_id"], h["by"]) for h in runs.alias_history("digits", store=store)] == [
        ("better", "bob"),
        ("good", "ann"),
    ]
    models = {m["run_id"]: m for m in runs.models("digits", store)}
    assert set(models) == {"good", "better"}  # the failed run made no model
    assert models["better"]["aliases"] == ["champion"] and models["good"]["aliases"] == []
    assert models["better"]["checkpoint_url"] == "file:///ckpt/better/step-4"
    page = runs.list_runs("digits", "succeeded", store)
    assert page["total"] == 2 and {r["run_id"]: r["is_champion"] for r in page["runs"]} == {
        "good": False,
        "better": True,
    }


def test_compare_lists_only_the_params_that_differ(store) -> None:
    runs.record_run_started("a", "digits", V1, {"lr": 0.1, "epochs": 2}, store=store)
    runs.record_run_started("b", "digits", V1, {"lr": 0.01, "epochs": 2}, store=store)
    d = runs.compare_runs("a", "b", store)
    assert d["params"] == [{"name": "lr", "a": 0.1, "b": 0.01}]
    assert d["data"]["same_version"] and d["data"]["diff"] is None


def test_reproduce_warns_when_the_code_or_the_lock_differs() -> None:
    now = {
        "code_version": {"source": "git", "commit": "c" * 40, "dirty": False},
        "lock_sha256": "1" * 64,
    }
    same = {"code_version": dict(now["code_version"]), "lock_sha256": "1" * 64}
    assert repro.differences(same, now) == []
    other = {"code_version": {"source": "git", "commit": "d" * 40}, "lock_sha256": "2" * 64}
    warnings = repro.differences(other, now)
    assert any("commit dddddddddddd" in w for w in warnings)
    assert any("requirements.lock differs" in w for w in warnings)
    assert repro.differences({}, now) == []  # nothing recorded: nothing to compare


def test_the_code_version_of_this_checkout_is_its_git_commit() -> None:
    import subprocess

    head = subprocess.run(
        ["git", "-C", str(repro.code_root()), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    cv = repro.code_version()
    assert (cv["source"], cv["commit"]) == ("git", head) and isinstance(cv["dirty"], bool)
    import hashlib

    lock = (repro.code_root() / "requirements.lock").read_bytes()
    assert repro.lock_sha256() == hashlib.sha256(lock).hexdigest()


def test_make_runs_follow_along_prints_the_run_name_and_its_page(store) -> None:
    from pipeline.orchestration import follow

    row = runs.record_run_started(
        "asset_triggered__2026-12-01T07:22:34.088447+00:00_hXsUOZOp", "digits", V1, {}, store=store
    )
    line = follow.run_page_line(runs.get_run(row["run_id"], store), "http://127.0.0.1:8080/")
    assert line == (
        f"      digits-{V1[:8]}-1: http://127.0.0.1:8080/laketrain/runs/"
        "asset_triggered__2026-12-01T07%3A22%3A34.088447%2B00%3A00_hXsUOZOp"
    )
    assert follow.run_page_line(None) is None


def test_a_launchers_command_param_becomes_the_recorded_argv(store) -> None:
    # the train DAG records the form's params: its `command` words are the run's argv
    row = runs.record_run_started(
        "dag",
        "digits",
        V1,
        {"command": "python my_train.py --fast 'a b'"},
        status="queued",
        store=store,
    )
    assert row["command"] == ["python", "my_train.py", "--fast", "a b"]
    assert runs.record_run_started("nocmd", "digits", V1, {}, store=store)["command"] is None

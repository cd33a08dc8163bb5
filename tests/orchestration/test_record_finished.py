"""``results.record_finished`` on a launch that was stopped from outside: the train DAG's
record_result starts as soon as ``launch`` is marked failed, while the SIGTERMed trainer may
still be saving its checkpoint and writing result.json."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from pipeline.orchestration import results


def _write_result_later(objects: Path, run_id: str, delay_s: float, body: dict) -> threading.Thread:
    def write() -> None:
        time.sleep(delay_s)
        folder = objects / run_id
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / "result.json.tmp"
        tmp.write_text(json.dumps(body))
        tmp.rename(folder / "result.json")

    thread = threading.Thread(target=write)
    thread.start()
    return thread


def test_a_stopped_launch_waits_for_the_result_the_trainer_is_still_writing(
    store, lt_env: Path, monkeypatch
) -> None:
    from pipeline.runs import get_run, record_run_started

    monkeypatch.setenv("LAKETRAIN_KILL_GRACE_SECONDS", "10")
    record_run_started("train-stopped", "digits", "v" * 64, {"epochs": 9}, store=store)
    ckpt = "file:///ckpt/train-stopped/step-12"
    writer = _write_result_later(
        lt_env / "objects",
        "train-stopped",
        1.5,
        {"status": "preempted", "checkpoint_url": ckpt, "exit_code": 75},
    )
    outcome = results.record_finished(
        "train-stopped", launch_failed="the trainer did not finish", exit_report=None
    )
    writer.join()
    assert outcome["status"] == "preempted"
    row = get_run("train-stopped", store=store)
    assert row["status"] == "preempted" and row["checkpoint_url"] == ckpt


def test_a_stopped_launch_with_no_result_within_the_grace_is_failed(
    store, lt_env: Path, monkeypatch
) -> None:
    from pipeline.runs import get_run, record_run_started

    monkeypatch.setenv("LAKETRAIN_KILL_GRACE_SECONDS", "0.2")
    record_run_started("train-gone", "digits", "v" * 64, {"epochs": 9}, store=store)
    started = time.monotonic()
    outcome = results.record_finished(
        "train-gone", launch_failed="the trainer did not finish", exit_report=None
    )
    assert time.monotonic() - started >= 5.0  # it did wait out the grace and its margin
    assert outcome["status"] == "failed"
    assert get_run("train-gone", store=store)["error"] == "the trainer did not finish"


def test_a_launch_that_reported_its_exit_does_not_wait(store, lt_env: Path, monkeypatch) -> None:
    from pipeline.runs import record_run_started

    monkeypatch.setenv("LAKETRAIN_KILL_GRACE_SECONDS", "60")
    record_run_started("train-exit", "digits", "v" * 64, {"epochs": 9}, store=store)
    started = time.monotonic()
    outcome = results.record_finished(
        "train-exit",
        launch_failed="exit code 1",
        exit_report={"code": 1, "message": "exited with code 1"},
    )
    assert time.monotonic() - started < 30.0
    assert outcome["status"] == "failed"

"""The quality gate's approval step on a real Airflow (the end-to-end stack): a version of a
recipe with ``quality.approval = "always"`` waits under Required Actions; answering "Approve"
over the REST API makes it latest and its dataset event starts auto-training; answering
"Reject" keeps it quarantined with the reason, and no event is sent."""

# ruff: noqa: F811 (the end-to-end stack's fixtures are imported, then named as parameters)
from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.orchestration.test_dag_runs import write_digits_subset
from tests.orchestration.test_end_to_end import (  # noqa: F401 (fixtures)
    POLL,
    REPO,
    TIMEOUT,
    Stack,
    asset_run,
    drop_files,
    stack,
    store,
)

pytestmark = pytest.mark.slow
GATED = (REPO / "recipes" / "digits.toml").read_text() + '\n[quality]\napproval = "always"\n'


def _drop_twin(stack: Stack, per_class: int, *, skip: int = 0) -> None:
    staging = stack.home / f"staging-{per_class}-{skip}"
    write_digits_subset(staging, per_class=per_class)
    files = sorted(staging.rglob("*.png"))
    drop_files(
        stack.lake,
        {
            "twin/" + str(p.relative_to(staging / "digits")): p.read_bytes()
            for i, p in enumerate(files)
            if i >= skip
        },
    )


def _awaiting(stack: Stack, answered: set[str], timeout: float = TIMEOUT) -> tuple[str, dict]:
    """A lake_ingest run whose approve step waits for an answer, not one in ``answered``
    (any run: the scheduled reconcile at start-up may be the one that finds the drop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in stack.api.dag_runs("lake_ingest", limit=20):
            rid = run["dag_run_id"]
            if rid in answered or run["state"] != "running":
                continue
            status, body = stack.api.get(
                f"/api/v2/dags/lake_ingest/dagRuns/{rid}/taskInstances/approve/0/hitlDetails"
            )
            if status == 200 and isinstance(body, dict) and not body.get("response_received"):
                _, ti = stack.api.get(
                    f"/api/v2/dags/lake_ingest/dagRuns/{rid}/taskInstances/approve/0"
                )
                if isinstance(ti, dict) and ti.get("state") == "awaiting_input":
                    # A person answers seconds later, not within the second the worker takes
                    # to exit after parking the task: an answer in that second makes the
                    # executor's "finished" report meet a task already queued again, which
                    # Airflow fails as a state changed externally.
                    time.sleep(5.0)
                    return rid, body
        time.sleep(POLL)
    pytest.fail(f"timed out waiting for the approve step\n{stack.logs_tail()}")


def _answer(stack: Stack, run_id: str, option: str, reason: str) -> None:
    status, body = stack.api.patch(
        f"/api/v2/dags/lake_ingest/dagRuns/{run_id}/taskInstances/approve/0/hitlDetails",
        {"chosen_options": [option], "params_input": {"reason": reason}},
    )
    assert status == 200, body


def _wait_answered(stack: Stack, run_id: str, what: str) -> None:
    """Until the run answered ends; on a failure, the approve step's whole log is the cause."""
    try:
        stack.wait_run("lake_ingest", lambda r: r["dag_run_id"] == run_id, what)
    except BaseException:
        logs = stack.stack.cfg.home / "logs"
        for f in sorted(logs.rglob("task_id=approve/*/*.log")):
            print(f"==== {f}\n{f.read_text(errors='replace')[-20000:]}")
        raise


def _started_train(stack: Stack, before: set[str], timeout: float = TIMEOUT) -> str:
    """The id of a new asset-triggered train run, once its record_run step has finished."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for run in stack.api.dag_runs("train", limit=20):
            rid = run["dag_run_id"]
            if rid in before or not asset_run(run):
                continue
            _, ti = stack.api.get(f"/api/v2/dags/train/dagRuns/{rid}/taskInstances/record_run")
            if isinstance(ti, dict) and ti.get("state") == "success":
                return rid
        time.sleep(POLL)
    pytest.fail(f"no train run started on the approved version\n{stack.logs_tail()}")


def _version_events(stack: Stack) -> list[dict]:
    # Airflow's own event listing answered 500 once in CI on its SQLite database while the
    # scheduler wrote (the approval itself had landed): ask again a few times before failing.
    for _ in range(5):
        status, body = stack.api.get("/api/v2/assets/events?limit=200&order_by=-timestamp")
        if status < 500:
            break
        time.sleep(1)
    assert status == 200, body
    return [
        e.get("extra") or {}
        for e in body["asset_events"]
        if (e.get("uri") or "").startswith("laketrain://datasets/twin")
    ]


def _quarantined(store) -> dict:
    from pipeline.datasets.queries import list_versions

    held = [v for v in list_versions("twin", store=store) if v["status"] == "quarantined"]
    assert len(held) == 1, held
    return held[0]


def test_approve_and_reject_through_the_rest_api(stack: Stack, store) -> None:
    from pipeline.datasets.quality.review import history
    from pipeline.datasets.queries import get_version
    from pipeline.orchestration.env_contract import sanitize_run_id
    from pipeline.runs import get_run

    (Path(stack.stack.env["RECIPES_DIR"]) / "twin.toml").write_text(GATED)
    trains_before = {r["dag_run_id"] for r in stack.api.dag_runs("train", limit=50)}

    # 1. the first version waits: quarantined, not latest, no event, no training
    _drop_twin(stack, per_class=4)
    run_id, detail = _awaiting(stack, set())
    held = _quarantined(store)
    assert held["tag"] in detail["subject"] and detail["options"] == ["Approve", "Reject"]
    assert not _version_events(stack)
    # 2. Approve: latest, the event, and the auto_train run on that version
    _answer(stack, run_id, "Approve", "looked at it")
    _wait_answered(stack, run_id, "the approved ingest")
    assert get_version("latest", dataset="twin", store=store)["version_id"] == held["version_id"]
    assert [e["version_id"] for e in _version_events(stack)] == [held["version_id"]]
    with store.session() as s:
        last = history(s, held["version_id"])[-1]
    assert (last["decision"], last["reason"]) == ("approve", "looked at it") and last["who"]
    # The event started a train run on that version (recorded before the trainer launches;
    # whether the training itself succeeds is the end-to-end tests' business).
    train = _started_train(stack, trains_before)
    run = get_run(sanitize_run_id("train", train), store=store)
    assert run["version_id"] == held["version_id"]

    # 3. Reject: a new version stays quarantined with the reason; no event
    first_run = run_id
    _drop_twin(stack, per_class=6, skip=0)
    run_id, _ = _awaiting(stack, {first_run})
    second = _quarantined(store)
    assert second["version_id"] != held["version_id"]
    _answer(stack, run_id, "Reject", "three blurry digits")
    _wait_answered(stack, run_id, "the rejected ingest")
    assert get_version(second["tag"], store=store)["status"] == "quarantined"
    assert get_version("latest", dataset="twin", store=store)["version_id"] == held["version_id"]
    with store.session() as s:
        last = history(s, second["version_id"])[-1]
    assert (last["decision"], last["reason"]) == ("reject", "three blurry digits")
    # the event list is final once the run succeeded: none for the rejected version
    assert second["version_id"] not in [e["version_id"] for e in _version_events(stack)]

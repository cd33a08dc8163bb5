"""lake_ingest's side of the quality gate without a scheduler: the commit task fires no event
for a held version, the approve step is asked only for versions waiting on a person, each
answer does what the Required Action says, and the train DAG refuses a held version."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.orchestration import approval, ingest_tasks, tasks
from tests.datasets.conftest import SMALL_IMAGE_RECIPE, image_lake, write_jpeg, write_recipe

ASK = SMALL_IMAGE_RECIPE + "\n[quality]\nmin_val_samples = 1000\napproval = 'on_failure'\n"
BLOCK = SMALL_IMAGE_RECIPE + "\n[quality]\nmin_val_samples = 1000\n"


def _ingest(dataset: str = "pets") -> dict | None:
    """scan + commit as lake_ingest runs them (the commit builds what plan/process left)."""
    from pipeline.datasets import build

    ingest_tasks.scan_lake()
    segments = [build.process(s).to_dict() for s in build.plan(dataset)]
    return ingest_tasks.commit_dataset(dataset, segments)


def _held(home: Path, recipe: str = ASK) -> tuple[dict, str]:
    image_lake(home, per_class=3)
    first = _ingest()
    assert first is not None
    write_recipe(home, "pets", recipe)
    write_jpeg(home / "lake" / "pets" / "cat" / "new.jpg", seed=4242)
    return first, ingest_tasks.commit_dataset("pets", [])


def _held_version(store) -> dict:
    from pipeline.datasets.queries import list_versions

    return next(v for v in list_versions("pets", store=store) if v["status"] == "quarantined")


def test_a_held_version_fires_no_dataset_event_and_waits_for_approval(
    store, lt_env: Path, caplog
) -> None:
    caplog.set_level("WARNING", logger="laketrain.orchestration")
    ingest_tasks.scan_lake()
    first, _ = _held(lt_env)
    extra = _ingest()
    assert extra is None  # no event: auto-training must not start
    held = _held_version(store)
    assert "quarantined by the quality gate" in caplog.text and "val_samples" in caplog.text
    asks = approval.pending_reviews(["pets"])
    assert [a["version"]["version_id"] for a in asks] == [held["version_id"]]
    assert held["tag"] in asks[0]["subject"] and "val_samples" in asks[0]["body"]


def test_with_approval_never_a_held_version_is_blocked_and_nobody_is_asked(
    store, lt_env: Path
) -> None:
    _held(lt_env, BLOCK)
    assert _ingest() is None
    assert _held_version(store)
    assert approval.pending_reviews(["pets"]) == []


def test_approve_answer_makes_it_latest_and_gives_the_event(store, lt_env: Path) -> None:
    from pipeline.datasets.queries import get_version

    _held(lt_env)
    _ingest()
    held = _held_version(store)
    ask = approval.pending_reviews(["pets"])[0]
    extra = approval.decide(ask["version"], True, who="admin")
    assert extra == ingest_tasks.version_event_extra({**held, "samples": held["samples"]})
    assert get_version("latest", dataset="pets", store=store)["version_id"] == held["version_id"]
    assert approval.pending_reviews(["pets"]) == []


def test_reject_answer_keeps_it_quarantined_and_stops_asking(store, lt_env: Path) -> None:
    from pipeline.datasets.queries import get_version

    first, _ = _held(lt_env)
    _ingest()
    ask = approval.pending_reviews(["pets"])[0]
    assert approval.decide(ask["version"], False, who="admin", reason="") is None
    held = get_version(ask["version"]["version_id"], store=store)
    assert held["status"] == "quarantined"
    assert get_version("latest", dataset="pets", store=store)["version_id"] == first["version_id"]
    assert approval.pending_reviews(["pets"]) == []


def test_the_train_dag_refuses_a_held_version_even_pinned(store, lt_env: Path) -> None:
    from pipeline.orchestration.env_contract import TrainParams

    first, _ = _held(lt_env)
    _ingest()
    held = _held_version(store)
    with pytest.raises(tasks.RunRefused, match="quarantined by the quality gate"):
        tasks.resolve_version(TrainParams(dataset="pets", dataset_version=held["tag"]))
    latest = tasks.resolve_version(TrainParams(dataset="pets", dataset_version="latest"))
    assert latest["version_id"] == first["version_id"]


def test_the_response_timeout_comes_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv(approval.TIMEOUT_ENV, "90")
    assert approval.response_timeout().total_seconds() == 90
    monkeypatch.setenv(approval.TIMEOUT_ENV, "soon")
    assert approval.response_timeout().total_seconds() == approval.DEFAULT_RESPONSE_TIMEOUT_S


def _operator(version: dict):
    from airflow.sdk import Param

    from pipeline.orchestration.approval_operator import VersionApprovalOperator

    return VersionApprovalOperator(
        task_id="approve",
        subject="s",
        version=version,
        params={"reason": Param("", type="string")},
    )


def _event(option: str, reason: str) -> dict:
    from datetime import UTC, datetime

    return {
        "chosen_options": [option],
        "params_input": {"reason": reason},
        "responded_at": datetime.now(UTC),
        "responded_by_user": {"id": "1", "name": "erin"},
    }


def test_the_operator_applies_approve_and_emits_the_event_through_the_alias(
    store, lt_env: Path
) -> None:
    from airflow.sdk import AssetAlias
    from airflow.sdk.execution_time.context import OutletEventAccessors

    from pipeline.datasets.quality.review import history

    _held(lt_env)
    _ingest()
    ask = approval.pending_reviews(["pets"])[0]
    outlets = OutletEventAccessors()
    _operator(ask["version"]).execute_complete(
        {"outlet_events": outlets}, _event("Approve", "fine")
    )
    events = outlets[AssetAlias(tasks.DATASET_ALIAS)].asset_alias_events
    assert [e.extra["version_id"] for e in events] == [ask["version"]["version_id"]]
    assert events[0].dest_asset_key.uri == "laketrain://datasets/pets"
    with store.session() as s:
        last = history(s, ask["version"]["version_id"])[-1]
    assert (last["decision"], last["who"], last["reason"]) == ("approve", "erin", "fine")


def test_the_operator_records_reject_and_emits_nothing(store, lt_env: Path) -> None:
    from airflow.sdk import AssetAlias
    from airflow.sdk.execution_time.context import OutletEventAccessors

    _held(lt_env)
    _ingest()
    ask = approval.pending_reviews(["pets"])[0]
    outlets = OutletEventAccessors()
    _operator(ask["version"]).execute_complete({"outlet_events": outlets}, _event("Reject", "no"))
    assert not outlets[AssetAlias(tasks.DATASET_ALIAS)].asset_alias_events
    assert approval.pending_reviews(["pets"]) == []

"""Task bodies that decide what a train run does, called directly."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.orchestration import ingest_tasks, tasks


@pytest.fixture
def recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    from pipeline.settings import get_settings

    folder = tmp_path / "recipes"
    folder.mkdir()
    (folder / "auto.toml").write_text('modality = "image"\nauto_train = true\n')
    (folder / "manual.toml").write_text('modality = "image"\n')
    monkeypatch.setenv("RECIPES_DIR", str(folder))
    get_settings.cache_clear()
    yield folder
    get_settings.cache_clear()


FORM = {"dataset": "manual", "dataset_version": "latest", "epochs": 2, "launcher": "local"}


def test_manual_run_uses_the_form(recipes: Path) -> None:
    p = tasks.choose_params(FORM, [])
    assert (p.dataset, p.dataset_version, p.epochs) == ("manual", "latest", 2)


def test_asset_run_takes_dataset_and_version_from_the_newest_event(recipes: Path) -> None:
    events = [
        {"dataset": "auto", "version_id": "a" * 64},
        {"dataset": "auto", "version_id": "b" * 64},
    ]
    p = tasks.choose_params(FORM, events)
    assert (p.dataset, p.dataset_version, p.epochs) == ("auto", "b" * 64, 2)


def test_asset_run_on_a_dataset_without_auto_train_is_skipped(recipes: Path) -> None:
    with pytest.raises(tasks.SkipRun, match="auto_train"):
        tasks.choose_params(FORM, [{"dataset": "manual", "version_id": "c" * 64}])


def test_bad_form_values_are_refused_naming_the_field(recipes: Path) -> None:
    with pytest.raises(tasks.RunRefused, match="^lr:"):
        tasks.choose_params({**FORM, "lr": -1}, [])


def test_version_event_extra_has_exactly_the_announced_fields() -> None:
    version = {
        "dataset": "d",
        "version_id": "v",
        "tag": "t",
        "samples": 3,
        "added": 2,
        "removed": 1,
        "train": 2,
        "val": 1,
        "path": "/x",
    }
    assert ingest_tasks.version_event_extra(version) == {
        "dataset": "d",
        "version_id": "v",
        "tag": "t",
        "samples": 3,
        "added": 2,
        "removed": 1,
    }


def test_missing_version_names_the_reference_and_what_exists(store, lt_env: Path) -> None:
    from pipeline.orchestration.env_contract import TrainParams

    with pytest.raises(
        tasks.RunRefused, match="^dataset_version: .*'nope'.*no committed version yet"
    ):
        tasks.resolve_version(TrainParams(dataset="digits", dataset_version="nope"))


class Event:
    def __init__(self, extra: dict, timestamp: str) -> None:
        self.extra, self.timestamp = extra, timestamp


def test_triggering_versions_keeps_the_newest_per_dataset_newest_last() -> None:
    events = {
        "laketrain://datasets/auto": [
            Event({"dataset": "auto", "version_id": "a1"}, "2026-01-01T00:00:01"),
            Event({"dataset": "auto", "version_id": "a2"}, "2026-01-01T00:00:03"),
        ],
        "laketrain://datasets/other": [
            Event({"dataset": "other", "version_id": "o1"}, "2026-01-01T00:00:02"),
            Event({"from_trigger": True}, "2026-01-01T00:00:04"),
        ],
    }
    assert tasks.triggering_versions(events) == [
        {"dataset": "other", "version_id": "o1"},
        {"dataset": "auto", "version_id": "a2"},
    ]
    assert tasks.triggering_versions(None) == []


def test_other_datasets_of_the_same_event_get_their_own_runs(recipes: Path) -> None:
    (recipes / "auto2.toml").write_text('modality = "image"\nauto_train = true\n')
    versions = [
        {"dataset": "manual", "version_id": "m1"},
        {"dataset": "auto2", "version_id": "b1"},
        {"dataset": "auto", "version_id": "a1"},
    ]
    confs = tasks.fan_out_confs(FORM, versions)
    assert confs == [
        {**FORM, "dataset": "auto2", "dataset_version": "b1"}
    ]  # not manual, not the one trained here


def test_an_env_overriding_the_contract_is_refused_at_the_first_task(recipes: Path) -> None:
    with pytest.raises(tasks.RunRefused, match="env: RUN_ID is part of the environment contract"):
        tasks.choose_params({**FORM, "env": {"RUN_ID": "mine"}}, [])

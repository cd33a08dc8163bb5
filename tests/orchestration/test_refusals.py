"""What a DAG run refuses at its first task, called directly: unknown conf keys, dataset names
that are not one lake folder, datasets without labels (by recipe, by lake folder, by version)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.orchestration import dagconfig, tasks
from pipeline.orchestration.env_contract import ContractError, TrainParams
from pipeline.orchestration.refusals import (
    RunRefused,
    check_conf_keys,
    check_dataset,
    untrainable_reason,
)

REPO = Path(__file__).resolve().parents[2]
TRAIN_KEYS = list(TrainParams("d", "latest").to_dict())
LABELLED = 'modality = "image"\n[image]\nsize = 8\nchannels = 1\n[labels]\nrule = "parent_dir"\n'
UNLABELLED = 'modality = "image"\n[image]\nsize = 8\nchannels = 1\n[labels]\nrule = "none"\n'


def png(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8), dtype=np.uint8)
    Image.fromarray(pixels, mode="L").save(path)


def test_a_typo_key_is_refused_with_the_allowed_keys_and_a_hint() -> None:
    with pytest.raises(RunRefused) as exc:
        check_conf_keys({"dataset": "digits", "epoch": 2}, TRAIN_KEYS, dag_id="train")
    message = str(exc.value)
    assert "'epoch' (did you mean 'epochs'?)" in message
    assert "allowed keys: dataset, dataset_version, epochs, batch_size" in message


def test_known_keys_and_an_empty_conf_pass() -> None:
    check_conf_keys({"dataset": "digits", "epochs": 2}, TRAIN_KEYS, dag_id="train")
    check_conf_keys({}, TRAIN_KEYS, dag_id="train")
    check_conf_keys(None, (), dag_id="lake_ingest")


def test_the_ingest_takes_no_conf() -> None:
    with pytest.raises(RunRefused, match=r"lake_ingest: unknown conf key\(s\) 'dataset'.*no conf"):
        check_conf_keys({"dataset": "../x"}, (), dag_id="lake_ingest")


@pytest.mark.parametrize("name", ["../../../etc", "a/b", "..", ".hidden", "_private", ""])
def test_a_dataset_name_that_is_not_one_lake_folder_is_refused(name: str) -> None:
    with pytest.raises(RunRefused, match="^dataset: dataset name"):
        check_dataset(name)
    with pytest.raises(ContractError, match="^dataset: dataset name"):
        TrainParams(dataset=name, dataset_version="latest")


def test_an_asset_event_naming_a_path_outside_the_lake_is_refused(lt_env: Path) -> None:
    event = {"dataset": "../../etc", "version_id": "a" * 64}
    with pytest.raises(RunRefused, match="^asset event dataset: dataset name '../../etc'"):
        tasks.choose_params({"dataset": "digits"}, [event])


def test_the_form_refuses_a_dataset_path_from_the_conf(lt_env: Path) -> None:
    with pytest.raises(RunRefused, match="^dataset: dataset name '../../etc'"):
        tasks.choose_params({"dataset": "../../etc", "dataset_version": "latest"}, [])


def test_unlabelled_recipes_and_folders_are_not_trainable(lt_env: Path) -> None:
    recipes, lake = lt_env / "recipes", lt_env / "lake"
    recipes.mkdir()
    (recipes / "photos.toml").write_text(UNLABELLED)
    (recipes / "flat.toml").write_text(LABELLED)
    (recipes / "classes.toml").write_text(LABELLED)
    (recipes / "empty.toml").write_text(LABELLED)
    (recipes / "broken.toml").write_text("modality = 'sound'\n")
    png(lake / "flat" / "a.png", 1)  # images directly in the dataset folder: no class
    png(lake / "classes" / "cat" / "a.png", 2)
    assert 'rule = "none"' in untrainable_reason("photos")
    assert "directly in the dataset folder" in untrainable_reason("flat")
    assert "class folders" in untrainable_reason("flat")  # says what to do
    assert untrainable_reason("classes") is None
    assert untrainable_reason("empty") is None  # no lake folder yet: may still get classes
    assert untrainable_reason("broken").startswith("recipe not usable")
    offered, left_out = dagconfig.trainable_datasets()
    assert offered == ["classes", "empty"]
    assert sorted(left_out) == ["broken", "flat", "photos"]


def test_the_shipped_photos_recipe_is_not_offered_for_training(
    monkeypatch: pytest.MonkeyPatch, lt_env: Path
) -> None:
    from pipeline.settings import get_settings

    monkeypatch.setenv("RECIPES_DIR", str(REPO / "recipes"))
    get_settings.cache_clear()
    offered, left_out = dagconfig.trainable_datasets()
    assert "digits" in offered and "photos" not in offered
    assert left_out["photos"].startswith("no labels")


def test_resolve_refuses_an_unlabelled_recipe_saying_why(store, lt_env: Path) -> None:
    (lt_env / "recipes").mkdir()
    (lt_env / "recipes" / "photos.toml").write_text(UNLABELLED)
    with pytest.raises(RunRefused) as exc:
        tasks.resolve_version(TrainParams(dataset="photos", dataset_version="latest"))
    message = str(exc.value)
    assert message.startswith("dataset 'photos' cannot be trained: no labels")
    assert "class folders" in message and "labels file" in message


def test_resolve_refuses_a_version_without_labels(store, lt_env: Path) -> None:
    """No recipe, images directly in the dataset folder: the default recipe (parent_dir)
    builds a version with no class. resolve refuses it, not the trainer with 'train has
    labels outside 0..-1'."""
    from pipeline.datasets.build import build

    for i in range(6):
        png(lt_env / "lake" / "flat" / f"{i}.png", i)
    version = build("flat", workers=1)
    assert version is not None
    with pytest.raises(RunRefused, match="^dataset 'flat' cannot be trained: no labels") as exc:
        tasks.resolve_version(TrainParams(dataset="flat", dataset_version="latest"))
    message = str(exc.value)
    assert version.tag in message and "6 file(s) left out as invalid" in message
    assert "class folders" in message


def test_resolve_accepts_a_labelled_version(store, lt_env: Path) -> None:
    from pipeline.datasets.build import build

    for i in range(4):
        png(lt_env / "lake" / "pets" / "cat" / f"{i}.png", i)
        png(lt_env / "lake" / "pets" / "dog" / f"{i}.png", 100 + i)
    version = build("pets", workers=1)
    got = tasks.resolve_version(TrainParams(dataset="pets", dataset_version="latest"))
    assert got == {"dataset": "pets", "version_id": version.version_id, "tag": version.tag}

"""Recipes: validation messages, defaults per file type, recipe_hash, labels and splits."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.datasets.recipes import (
    Recipe,
    RecipeError,
    SidecarError,
    default_recipe,
    list_recipes,
    load_recipe,
    load_sidecar,
    parse_recipe,
    split_of,
)

REPO_RECIPES = Path(__file__).resolve().parents[2] / "recipes"

GOOD_IMAGE = 'modality = "image"\n[image]\nsize = 8\nchannels = 1\nresize = "squash"\n'


def _load(tmp_path: Path, text: str, name: str = "ds") -> Recipe:
    recipes = tmp_path / "recipes"
    recipes.mkdir(exist_ok=True)
    (recipes / f"{name}.toml").write_text(text)
    return load_recipe(name, recipes_dir=recipes, lake_dir=tmp_path / "lake")


@pytest.mark.parametrize(
    ("text", "field", "allowed"),
    [
        (
            GOOD_IMAGE + "colour = true\n",
            "image.colour",
            "allowed keys: size, channels, resize, max_pixels",
        ),
        (
            'modality = "image"\nsplt = 1\n',
            "splt",
            "allowed keys: modality, image, array, table, labels",
        ),
        (
            'modality = "image"\n[image]\nresize = "stretch"\n',
            "image.resize",
            "must be one of squash, center_crop, pad (got 'stretch')",
        ),
        (
            'modality = "image"\n[image]\nchannels = 4\n',
            "image.channels",
            "must be one of 1, 3 (got 4)",
        ),
        (
            'modality = "image"\n[split]\nval_fraction = 1.5\n',
            "split.val_fraction",
            "less than 1 (got 1.5)",
        ),
        (
            'modality = "image"\n[split]\nval_fraction = -0.1\n',
            "split.val_fraction",
            "greater than or equal to 0",
        ),
        (
            'modality = "image"\n[split]\ngroup_regex = "patient_(\\\\d+"\n',
            "split.group_regex",
            "valid regular expression",
        ),
        (
            'modality = "image"\n[split]\ngroup_regex = "patient_\\\\d+"\n',
            "split.group_regex",
            "exactly one capture group",
        ),
        (
            'modality = "image"\n[split]\ngroup_regex = "(a)(b)"\n',
            "split.group_regex",
            "exactly one capture group",
        ),
        ('modality = "video"\n', "modality", "must be one of image, array, table (got 'video')"),
        ("auto_train = true\n", "modality", "required"),
        ('modality = "array"\n', "array", "required when modality = 'array'"),
        (
            'modality = "image"\n[array]\nshape = [2]\n',
            "array",
            "only allowed when modality = 'array'",
        ),
        (
            'modality = "array"\n[array]\nshape = [2]\ndtype = "object"\n',
            "array.dtype",
            "numeric dtype",
        ),
        (
            'modality = "array"\n[array]\nshape = [2]\ndtype = "floaty"\n',
            "array.dtype",
            "numpy dtype name",
        ),
        (
            'modality = "array"\n[array]\nshape = [0, 2]\n',
            "array.shape.0",
            "greater than or equal to 1",
        ),
        (
            'modality = "table"\n[labels]\nrule = "parent_dir"\n',
            "labels.rule",
            "must be 'none' for a table",
        ),
        (
            'modality = "image"\n[labels]\nrule = "folder"\n',
            "labels.rule",
            "must be one of parent_dir, sidecar, none",
        ),
        (
            'modality = "image"\n[labels]\nrule = "sidecar"\nfile = "../x.csv"\n',
            "labels.file",
            "inside the dataset folder",
        ),
        (
            'modality = "image"\n[augment]\ncopies = 2\n',
            "augment.ops",
            "at least one of hflip, random_resized_crop, color_jitter",
        ),
        (
            'modality = "image"\n[augment]\ncopies = 1\nops = ["rotate"]\n',
            "augment.ops.0",
            "must be one of hflip, random_resized_crop, color_jitter",
        ),
        (
            'modality = "table"\n[augment]\ncopies = 1\nops = ["hflip"]\n',
            "augment.copies",
            "must be 0 unless modality = 'image'",
        ),
        (
            'modality = "image"\nformat = "hdf5"\n',
            "format",
            "must be one of npy, zarr (got 'hdf5')",
        ),
        (
            'modality = "table"\n[table]\nfeature_columns = ["a", "label"]\n',
            "table.feature_columns",
            "must not contain the label column",
        ),
    ],
)
def test_recipe_error_names_file_field_and_allowed(
    tmp_path: Path, text: str, field: str, allowed: str
) -> None:
    with pytest.raises(RecipeError) as info:
        _load(tmp_path, text)
    lines = str(info.value).splitlines()
    hit = [line for line in lines if line.split(": ")[1:2] == [field]]
    assert hit, f"no problem reported for field {field!r}: {lines}"
    assert hit[0].startswith(str(info.value.source)) and info.value.source.endswith("ds.toml")
    assert allowed in hit[0], hit[0]
    assert isinstance(info.value, ValueError)


def test_recipe_error_lists_every_problem(tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as info:
        _load(
            tmp_path,
            'modality = "image"\nfoo = 1\n[image]\nresize = "x"\n[split]\nval_fraction = 2\n',
        )
    fields = {f for f, _ in info.value.problems}
    assert fields == {"foo", "image.resize", "split.val_fraction"}


def test_invalid_toml_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(RecipeError, match=r"ds\.toml: not valid TOML"):
        _load(tmp_path, 'modality = "image\n')


def test_repo_recipes_are_valid() -> None:
    assert {"digits", "photos"} <= set(list_recipes(REPO_RECIPES))
    digits = load_recipe("digits", recipes_dir=REPO_RECIPES, lake_dir=REPO_RECIPES)
    assert digits.modality == "image" and digits.image is not None
    assert (digits.image.size, digits.image.channels, digits.image.resize) == (8, 1, "squash")
    assert digits.labels.rule == "parent_dir" and digits.split.val_fraction == 0.2
    assert digits.auto_train is True and digits.format == "npy"
    photos = load_recipe("photos", recipes_dir=REPO_RECIPES, lake_dir=REPO_RECIPES)
    assert photos.image is not None
    assert (photos.image.size, photos.image.channels, photos.image.resize) == (64, 3, "center_crop")
    assert photos.labels.rule == "none" and photos.auto_train is False


def test_list_recipes(tmp_path: Path) -> None:
    assert list_recipes(tmp_path / "missing") == []
    for name in ("b", "a"):
        (tmp_path / f"{name}.toml").write_text(GOOD_IMAGE)
    (tmp_path / "notes.txt").write_text("x")
    assert list_recipes(tmp_path) == ["a", "b"]


# ---- defaults --------------------------------------------------------------------------------


def test_default_recipe_for_images(tmp_path: Path) -> None:
    folder = tmp_path / "lake" / "pets" / "cat"
    folder.mkdir(parents=True)
    Image.new("RGB", (5, 5)).save(folder / "a.jpg")
    Image.new("RGB", (5, 5)).save(folder / "b.png")
    r = load_recipe("pets", recipes_dir=tmp_path / "recipes", lake_dir=tmp_path / "lake")
    assert r.modality == "image" and r.image is not None
    assert (r.image.size, r.image.channels, r.image.resize) == (64, 3, "center_crop")
    assert r.labels.rule == "parent_dir" and r.format == "npy" and not r.auto_train


def test_default_recipe_for_npy_takes_first_file_shape(tmp_path: Path) -> None:
    folder = tmp_path / "vecs" / "x"
    folder.mkdir(parents=True)
    np.save(folder / "a.npy", np.zeros((3, 5), dtype=np.int16))
    np.save(folder / "b.npy", np.zeros((7,), dtype=np.float64))
    r = default_recipe("vecs", tmp_path)
    assert r.modality == "array" and r.array is not None
    assert (r.array.shape, r.array.dtype) == ([3, 5], "int16")


def test_default_recipe_for_npy_skips_pickled_first_file(tmp_path: Path) -> None:
    folder = tmp_path / "vecs"
    folder.mkdir()
    np.save(folder / "a.npy", np.array([None], dtype=object), allow_pickle=True)
    np.save(folder / "b.npy", np.zeros((2, 2), dtype=">f4"))
    r = default_recipe("vecs", tmp_path)
    assert r.array is not None and (r.array.shape, r.array.dtype) == ([2, 2], "float32")


def test_default_recipe_for_csv_and_parquet(tmp_path: Path) -> None:
    (tmp_path / "tab").mkdir()
    (tmp_path / "tab" / "a.csv").write_text("f1,label,f2\n1,a,2\n")
    r = default_recipe("tab", tmp_path)
    assert r.modality == "table" and r.table is not None
    assert r.table.label_column == "label" and r.table.feature_columns == ["f1", "f2"]
    assert r.labels.rule == "none"

    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"label": ["x"], "z": [1.0]}), tmp_path / "pq" / "t.parquet")
    r = default_recipe("pq", tmp_path)
    assert r.table is not None and r.table.feature_columns == ["z"]


def test_default_recipe_follows_the_most_common_type_and_skips_hidden(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    for i in range(3):
        np.save(folder / f"{i}.npy", np.zeros((2,), dtype=np.float32))
    Image.new("L", (2, 2)).save(folder / "one.png")
    for i in range(5):  # hidden and partial files do not count
        Image.new("L", (2, 2)).save(folder / f".h{i}.png")
    assert default_recipe("mixed", tmp_path).modality == "array"


def test_default_recipe_without_usable_files_fails_clearly(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "readme.txt").write_text("hi")
    with pytest.raises(RecipeError, match="no recipe docs.toml and no image"):
        default_recipe("docs", tmp_path)
    with pytest.raises(RecipeError, match="modality"):
        default_recipe("absent", tmp_path)


# ---- recipe_hash -----------------------------------------------------------------------------

BASE = {
    "modality": "image",
    "image": {"size": 8, "channels": 1, "resize": "squash"},
    "labels": {"rule": "parent_dir"},
    "split": {"val_fraction": 0.2},
}


def _with(path: str, value: object) -> dict:
    import copy

    data = copy.deepcopy(BASE)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("image.size", 16),
        ("image.channels", 3),
        ("image.resize", "pad"),
        ("image.max_pixels", 1000),
        ("labels.rule", "none"),
        ("labels.file", "y.csv"),
        ("split.val_fraction", 0.3),
        ("split.group_regex", "p(\\d+)"),
        ("augment", {"copies": 1, "ops": ["hflip"]}),
        ("format", "zarr"),
    ],
)
def test_recipe_hash_changes_with_each_field(path: str, value: object) -> None:
    assert parse_recipe(_with(path, value)).recipe_hash != parse_recipe(BASE).recipe_hash


def test_recipe_hash_changes_with_modality_specific_fields() -> None:
    a = {"modality": "array", "array": {"shape": [2, 3], "dtype": "float32"}}
    hashes = {
        parse_recipe(a).recipe_hash,
        parse_recipe({**a, "array": {"shape": [3, 2], "dtype": "float32"}}).recipe_hash,
        parse_recipe({**a, "array": {"shape": [2, 3], "dtype": "uint8"}}).recipe_hash,
        parse_recipe({"modality": "table", "table": {"label_column": "y"}}).recipe_hash,
        parse_recipe({"modality": "table", "table": {"label_column": "z"}}).recipe_hash,
    }
    assert len(hashes) == 5


def test_recipe_hash_stable_for_equal_recipes_and_ignores_auto_train() -> None:
    h = parse_recipe(BASE).recipe_hash
    assert len(h) == 64 and int(h, 16) >= 0
    reordered = dict(reversed(list(BASE.items())))
    assert parse_recipe(reordered).recipe_hash == h
    # auto_train tells the orchestrator what to do next; it must not reprocess the data.
    assert parse_recipe({**BASE, "auto_train": True}).recipe_hash == h
    a = {"modality": "array", "array": {"shape": [2], "dtype": "f4"}}
    b = {"modality": "array", "array": {"shape": [2], "dtype": "float32"}}
    assert parse_recipe(a).recipe_hash == parse_recipe(b).recipe_hash


def test_recipe_hash_changes_with_code_version(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.datasets import recipe_model
    from pipeline.datasets.preprocess.image import ImagePreprocessor

    # The image preprocessor's version is the one the hash uses.
    assert ImagePreprocessor.code_version == parse_recipe(BASE).code_version
    before = parse_recipe(BASE).recipe_hash
    monkeypatch.setitem(recipe_model.CODE_VERSIONS, "image", "image-999")
    assert parse_recipe(BASE).recipe_hash != before
    monkeypatch.undo()
    assert parse_recipe(BASE).recipe_hash == before
    monkeypatch.setattr(recipe_model, "RECIPE_HASH_FORMAT", "other")
    assert parse_recipe(BASE).recipe_hash != before


# ---- labels and splits -----------------------------------------------------------------------


def test_label_for_parent_dir_and_none() -> None:
    r = parse_recipe(BASE)
    assert r.label_for("digits/3/0001.png") == "3"
    assert r.label_for("digits/train/7/x.png") == "train"  # ImageFolder: the first folder
    assert r.label_for("digits/loose.png") is None
    none = parse_recipe(_with("labels.rule", "none"))
    assert none.label_for("digits/3/0001.png") is None


def test_sidecar_labels(tmp_path: Path) -> None:
    r = parse_recipe(_with("labels", {"rule": "sidecar", "file": "labels.csv"}))
    ds = tmp_path / "scans"
    ds.mkdir()
    (ds / "labels.csv").write_text("path,label\n./a/1.png,cat\nb/2.png, dog \n\n")
    sidecar = load_sidecar(ds, r)
    assert sidecar == {"a/1.png": "cat", "b/2.png": "dog"}
    assert r.label_for("scans/a/1.png", sidecar) == "cat"
    assert r.label_for("scans/b/2.png", sidecar) == "dog"
    assert r.label_for("scans/c/3.png", sidecar) is None
    assert r.is_sidecar("scans/labels.csv") and not r.is_sidecar("scans/a/labels.csv")
    assert load_sidecar(ds, parse_recipe(BASE)) == {}
    (ds / "labels.csv").write_text("path,label\na/1.png\n")
    with pytest.raises(SidecarError, match=r"labels\.csv: line 2: expected 'path,label'"):
        load_sidecar(ds, r)
    (ds / "labels.csv").unlink()
    with pytest.raises(SidecarError, match="labels sidecar not found"):
        load_sidecar(ds, r)


def test_split_of_is_deterministic_and_close_to_the_fraction() -> None:
    keys = [f"{i:032x}" for i in range(4000)]
    first = [split_of(k, 0.2) for k in keys]
    assert first == [split_of(k, 0.2) for k in keys]
    share = Counter(first)["val"] / len(keys)
    assert 0.17 < share < 0.23
    assert {split_of(k, 0.0) for k in keys} == {"train"}
    # Raising the fraction only moves samples from train to val, never back.
    assert all(split_of(k, 0.5) == "val" for k, s in zip(keys, first, strict=True) if s == "val")


def test_group_regex_keeps_a_patient_in_one_split() -> None:
    r = parse_recipe(_with("split", {"val_fraction": 0.3, "group_regex": r"patient_(\d+)/"}))
    splits: dict[str, set[str]] = {}
    for p in range(60):
        for s in range(5):
            md5 = f"{p:016x}{s:016x}"
            path = f"xray/patient_{p}/scan_{s}.png"
            assert r.split_key(path, md5) == str(p)
            splits.setdefault(str(p), set()).add(r.split_for(path, md5))
    assert all(len(s) == 1 for s in splits.values())
    assert Counter(next(iter(s)) for s in splits.values()).keys() == {"train", "val"}
    # No match: the md5 decides.
    assert r.split_key("xray/other/scan.png", "abc123") == "abc123"
    assert parse_recipe(BASE).split_key("xray/patient_1/a.png", "ffff") == "ffff"


def test_recipe_is_immutable() -> None:
    r = parse_recipe(BASE)
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen error type
        r.format = "zarr"  # type: ignore[misc]


def test_digits_recipe_round_trips_through_toml() -> None:
    data = tomllib.loads((REPO_RECIPES / "digits.toml").read_text())
    assert (
        parse_recipe(data).recipe_hash
        == load_recipe("digits", recipes_dir=REPO_RECIPES).recipe_hash
    )

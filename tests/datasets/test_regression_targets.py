"""Regression recipes (``task = "regression"``): a table's numeric label column or an array's
numeric sidecar label becomes a float32 target. A non-numeric target is an invalid row or file
with its reason, an unknown task is a RecipeError naming the field, the manifest carries a
target histogram instead of classes, splits stay content-stable, and classification versions
are exactly what they were."""

from __future__ import annotations

import numpy as np
import pytest

from pipeline.datasets.queries import invalid_files
from tests.datasets.conftest import write_recipe

REGRESSION_TABLE = (
    'modality = "table"\ntask = "regression"\n[table]\nlabel_column = "price"\n'
    "[split]\nval_fraction = 0.25\n"
)


def _write_rows(path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("f1,f2,price\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows))


def _rows(n: int, start: int = 0) -> list[tuple[float, float, str]]:
    rng = np.random.default_rng(start)
    return [
        (round(float(a), 3), round(float(b), 3), f"{100 + 10 * a - 3 * b:.2f}")
        for a, b in rng.uniform(-5, 5, size=(n, 2))
    ]


def test_unknown_task_is_a_recipe_error_naming_the_field():
    from pipeline.datasets.recipes import RecipeError, parse_recipe

    with pytest.raises(RecipeError) as err:
        parse_recipe({"modality": "table", "task": "ranking"}, source="recipes/t.toml")
    assert "recipes/t.toml: task: must be one of classification, regression" in str(err.value)
    assert "'ranking'" in str(err.value)


def test_regression_is_refused_for_images_and_for_arrays_without_a_target():
    from pipeline.datasets.recipes import RecipeError, parse_recipe

    with pytest.raises(RecipeError, match=r"task: 'regression' needs modality 'table' or 'array'"):
        parse_recipe({"modality": "image", "task": "regression"})
    with pytest.raises(RecipeError, match=r"task: 'regression' needs a target"):
        parse_recipe(
            {
                "modality": "array",
                "task": "regression",
                "array": {"shape": [3]},
                "labels": {"rule": "none"},
            }
        )


def test_classification_recipes_keep_their_recipe_hash():
    """The task field must not move the hash (and with it every version id) of old recipes."""
    from pipeline.datasets.recipes import parse_recipe

    old = parse_recipe({"modality": "table"})
    explicit = parse_recipe({"modality": "table", "task": "classification"})
    regression = parse_recipe({"modality": "table", "task": "regression"})
    assert "task" not in old.canonical()
    assert old.recipe_hash == explicit.recipe_hash != regression.recipe_hash


def test_non_numeric_target_is_an_invalid_row_with_a_reason():
    from pipeline.datasets.preprocess.table import rows_to_samples
    from pipeline.datasets.recipes import TableSpec

    spec = TableSpec(label_column="y")
    rows = [(2, ["1.0", "3.5"]), (3, ["2.0", "cheap"]), (4, ["3.0", "inf"]), (5, ["4.0", "7"])]
    out = rows_to_samples(["x", "y"], rows, spec, regression=True)
    assert [s.label for s in out.samples] == ["3.5", "7.0"]
    assert out.invalid_rows == [
        (3, "line 3: target column 'y' is not a finite number: 'cheap'"),
        (4, "line 4: target column 'y' is not a finite number: 'inf'"),
    ]
    # Classification keeps any label text as a class name.
    assert len(rows_to_samples(["x", "y"], rows, spec).samples) == 4


def test_table_regression_version_reads_float32_targets_and_a_histogram(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(home, "prices", REGRESSION_TABLE)
    rows = _rows(200) + [(1.0, 2.0, "n/a")]
    _write_rows(home / "lake" / "prices" / "all.csv", rows)
    report = run_build("prices", workers=1, store=store)
    v = report.version
    assert v.samples == 200
    assert [r["reason"] for r in invalid_files(v.version_id, store=store)] == [
        "line 202: target column 'price' is not a finite number: 'n/a'"
    ]
    r = open_version("prices", store=store)
    assert r.task == "regression" and r.classes == []
    y = r.labels()
    assert y.dtype == np.float32
    expected = {float(np.float32(c)) for _, _, c in rows[:200]}
    assert set(y.tolist()) <= expected and len(set(y.tolist())) > 150
    x, yb = r.split("val").get_batch([0, 1, 2])
    assert yb.dtype == np.float32 and x.dtype == np.float32
    # The target of each row is its own (f1, f2 → price), whatever the split.
    for i in range(len(r)):
        xi, yi = r[i]
        assert yi == pytest.approx(100 + 10 * float(xi[0]) - 3 * float(xi[1]), abs=0.02)
    target = r.manifest["target"]
    assert len(target["bins"]) == 21
    assert sum(target["train"]["counts"]) == v.train and sum(target["val"]["counts"]) == v.val
    assert target["train"]["min"] >= target["bins"][0]
    assert r.manifest["counts"]["per_split"]["train"]["classes"] == {}
    # Store-less (a training container) reads the same floats.
    r2 = open_version("prices", data_root=home / "data")
    assert np.array_equal(r2.labels(), y)


def test_regression_splits_stay_content_stable_when_rows_are_appended(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(home, "prices", REGRESSION_TABLE)
    csv = home / "lake" / "prices" / "all.csv"
    first = _rows(150)
    _write_rows(csv, first)
    run_build("prices", workers=1, store=store)
    before = _splits(open_version("prices", store=store))
    _write_rows(csv, first + _rows(80, start=7))
    run_build("prices", workers=1, store=store)
    after = _splits(open_version("prices", store=store))
    assert len(after) > len(before)
    assert {k: after[k] for k in before} == before


def _splits(reader) -> dict[tuple, str]:
    x, y = reader.get_batch(np.arange(len(reader)))
    return {
        (*map(float, x[i]), float(y[i])): reader.metadata(i)["split"] for i in range(len(reader))
    }


def test_array_regression_takes_numeric_sidecar_targets(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(
        home,
        "arr",
        'modality = "array"\ntask = "regression"\n[array]\nshape = [3]\n'
        '[labels]\nrule = "sidecar"\nfile = "labels.csv"\n',
    )
    lake = home / "lake" / "arr"
    lake.mkdir(parents=True)
    lines = ["path,label"]
    for i in range(12):
        np.save(lake / f"a{i}.npy", np.full(3, i, dtype=np.float32))
        lines.append(f"a{i}.npy,{i * 1.5}")
    np.save(lake / "bad.npy", np.full(3, 99, dtype=np.float32))
    lines.append("bad.npy,heavy")
    (lake / "labels.csv").write_text("\n".join(lines) + "\n")
    report = run_build("arr", workers=1, store=store)
    assert report.version.samples == 12
    assert [
        (r["path"], r["reason"]) for r in invalid_files(report.version.version_id, store=store)
    ] == [("arr/bad.npy", "target 'heavy' is not a finite number (task = 'regression')")]
    r = open_version("arr", store=store)
    assert r.labels().dtype == np.float32
    for i in range(len(r)):
        x, y = r[i]
        assert y == pytest.approx(float(x[0]) * 1.5)


def test_classification_table_versions_are_unchanged(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(home, "cls", 'modality = "table"\n[table]\nlabel_column = "price"\n')
    _write_rows(home / "lake" / "cls" / "all.csv", [(1.0, 2.0, "a"), (2.0, 3.0, "b")] * 10)
    run_build("cls", workers=1, store=store)
    r = open_version("cls", store=store)
    assert r.task == "classification" and r.classes == ["a", "b"]
    assert r.labels().dtype == np.int64 and r.get_batch([0])[1].dtype == np.int64
    assert "task" not in r.manifest and "target" not in r.manifest


def test_the_train_dag_does_not_refuse_a_regression_version_for_having_no_class():
    from pipeline.orchestration.refusals import version_label_problem

    version = {"tag": "p_v1", "dataset": "p", "samples": 9, "invalid": 0}
    target = {"bins": [0.0, 1.0], "train": {"n": 7, "counts": [7]}, "val": {"n": 2}}
    regression = {**version, "manifest": {"task": "regression", "classes": [], "target": target}}
    assert version_label_problem(regression) is None
    empty = {"bins": [], "train": {"n": 0, "counts": []}, "val": {"n": 0}}
    no_targets = {**version, "manifest": {"task": "regression", "classes": [], "target": empty}}
    assert "no labels" in version_label_problem(no_targets)
    assert "no labels" in version_label_problem({**version, "manifest": {"classes": []}})

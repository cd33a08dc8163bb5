"""Table rows are split one by one, by a row key (the recipe's id_column, else a hash of the
row's features), not by the file's md5: one CSV gives a validation split, appending rows keeps
every existing row's split, identical rows never straddle the split, and with an id column
the split follows the id."""

from __future__ import annotations

import random

import numpy as np
import pytest

from tests.datasets.conftest import write_recipe

TABLE = (
    'modality = "table"\n[table]\nlabel_column = "label"\n{extra}\n[split]\nval_fraction = 0.2\n'
)


def _rows(n: int, seed: int = 0, start: int = 0) -> list[tuple[int, float, float, str]]:
    rng = random.Random(seed)
    return [
        (start + i, round(rng.uniform(-5, 5), 3), round(rng.uniform(-5, 5), 3), rng.choice("ab"))
        for i in range(n)
    ]


def _write_csv(path, rows, *, with_id: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    head = "id,f1,f2,label\n" if with_id else "f1,f2,label\n"
    body = "".join((f"{i},{a},{b},{c}\n" if with_id else f"{a},{b},{c}\n") for i, a, b, c in rows)
    path.write_text(head + body)


def _splits_by_line(reader) -> dict[int, tuple[str, tuple[float, ...]]]:
    x, _ = reader.get_batch(np.arange(len(reader)))
    out = {}
    for i in range(len(reader)):
        m = reader.metadata(i)
        out[m["line"]] = (m["split"], tuple(float(v) for v in x[i]))
    return out


def test_one_csv_gets_a_validation_split_near_the_recipes_fraction(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.checks import check_leakage
    from pipeline.datasets.reader import open_version

    write_recipe(home, "rows", TABLE.format(extra=""))
    _write_csv(home / "lake" / "rows" / "all.csv", _rows(500))
    v = run_build("rows", workers=1, store=store).version
    assert v.samples == 500
    assert 0.14 <= v.val / v.samples <= 0.26, (v.train, v.val)
    r = open_version("rows", store=store)
    assert len(r.split("val")) == v.val and len(r.split("train")) == v.train
    assert check_leakage(r) == []  # one file in both splits is not leakage for a table


def test_appending_rows_keeps_every_existing_rows_split(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(home, "rows", TABLE.format(extra=""))
    path = home / "lake" / "rows" / "all.csv"
    rows = _rows(300)
    _write_csv(path, rows)
    run_build("rows", workers=1, store=store)
    before = _splits_by_line(open_version("rows", store=store))
    _write_csv(path, rows + _rows(200, seed=1, start=300))
    v2 = run_build("rows", workers=1, store=store).version
    assert v2 is not None and v2.samples == 500
    after = _splits_by_line(open_version("rows", store=store))
    assert {line: after[line] for line in before} == before
    assert {s for s, _ in after.values()} == {"train", "val"}


def test_identical_rows_never_straddle_the_split(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.reader import open_version

    write_recipe(home, "rows", TABLE.format(extra=""))
    rows = _rows(100)
    _write_csv(home / "lake" / "rows" / "a.csv", rows + rows[:40])  # 40 rows twice in a file
    _write_csv(home / "lake" / "rows" / "b.csv", list(reversed(rows[20:80])))  # and in another
    run_build("rows", workers=1, store=store)
    r = open_version("rows", store=store)
    x, _ = r.get_batch(np.arange(len(r)))
    split_of_content: dict[bytes, set[str]] = {}
    for i in range(len(r)):
        split_of_content.setdefault(x[i].tobytes(), set()).add(r.metadata(i)["split"])
    assert len(split_of_content) == 100
    assert all(len(s) == 1 for s in split_of_content.values())
    assert {next(iter(s)) for s in split_of_content.values()} == {"train", "val"}


def test_with_an_id_column_the_split_follows_the_id(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.checks import check_leakage
    from pipeline.datasets.queries import get_version
    from pipeline.datasets.reader import open_version

    write_recipe(home, "rows", TABLE.format(extra='id_column = "id"'))
    path = home / "lake" / "rows" / "all.csv"
    rows = _rows(300)
    _write_csv(path, rows, with_id=True)
    run_build("rows", workers=1, store=store)
    r = open_version("rows", store=store)
    assert tuple(r.sample_shape) == (2,)  # the id is not a feature
    x, _ = r.get_batch(np.arange(len(r)))
    by_id = {}
    for i in range(len(r)):
        line = r.metadata(i)["line"]
        by_id[rows[line - 2][0]] = r.metadata(i)["split"]
    assert set(by_id.values()) == {"train", "val"}

    # The same records, corrected values, another order, one without an id: each id keeps
    # its split whatever its features now are; the row without an id is invalid, named.
    fixed = [(i, a + 100, b - 100, c) for i, a, b, c in rows]
    random.Random(3).shuffle(fixed)
    _write_csv(path, fixed, with_id=True)
    text = path.read_text().splitlines()
    text[5] = "," + text[5].split(",", 1)[1]
    path.write_text("\n".join(text) + "\n")
    v2 = run_build("rows", workers=1, store=store).version
    assert v2.samples == 299 and v2.invalid == 1
    r2 = open_version("rows", store=store)
    content = path.read_text().splitlines()
    for i in range(len(r2)):
        m = r2.metadata(i)
        row_id = int(content[m["line"] - 1].split(",")[0])
        assert m["split"] == by_id[row_id]
    (bad,) = get_version(v2.tag, store=store)["invalid_files"]
    assert bad["line"] == 6 and "missing id in column 'id'" in bad["reason"]
    assert check_leakage(r2) == []


def test_an_id_column_the_file_lacks_makes_the_file_invalid(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.queries import get_version

    write_recipe(home, "rows", TABLE.format(extra='id_column = "record"'))
    _write_csv(home / "lake" / "rows" / "all.csv", _rows(10))
    report = run_build("rows", workers=1, store=store)
    assert report.invalid == 1
    ledger_invalid = get_version(report.version.tag, store=store)["invalid_files"]
    assert "missing column(s) 'record'" in ledger_invalid[0]["reason"]


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ('id_column = "label"', "table.id_column", "must not be the label column"),
        (
            'id_column = "f1"\nfeature_columns = ["f1", "f2"]',
            "table.feature_columns",
            "must not contain the id column",
        ),
        ('id_column = ""', "table.id_column", "at least 1 character"),
    ],
)
def test_a_bad_id_column_is_a_recipe_error_naming_the_field(home, extra, field, message):
    from pipeline.datasets.recipes import RecipeError, load_recipe

    write_recipe(home, "rows", TABLE.format(extra=extra))
    with pytest.raises(RecipeError) as info:
        load_recipe("rows")
    assert field in str(info.value) and message in str(info.value)


def test_row_keys_ignore_position_and_spelling_and_follow_the_id(tmp_path):
    from pipeline.datasets.preprocess.table import rows_to_samples
    from pipeline.datasets.recipes import TableSpec

    spec = TableSpec(label_column="label")
    header = ["f1", "f2", "label"]
    result = rows_to_samples(
        header, [(2, ["1", "2", "a"]), (3, ["1.0", "2e0", "b"]), (4, ["3", "4", "a"])], spec
    )
    k = [s.key for s in result.samples]
    assert k[0] == k[1] != k[2]  # the features decide, not the line or the label

    spec = TableSpec(label_column="label", id_column="id")
    header = ["id", "f1", "label"]
    result = rows_to_samples(
        header,
        [(2, ["x1", "5", "a"]), (3, ["x2", "6", "a"]), (4, ["x3", "5", "b"]), (5, [" ", "7", "a"])],
        spec,
    )
    assert [s.key for s in result.samples] == ["id:x1", "id:x2", "id:x1"]  # x3 = x1's content
    assert [s.x.tolist() for s in result.samples] == [[5.0], [6.0], [5.0]]
    assert result.invalid_rows == [(5, "line 5: missing id in column 'id'")]

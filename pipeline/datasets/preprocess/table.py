"""Table preprocessor: each row of a CSV (or Parquet) file → one float32 (F,) sample + label.

Whole-file problems (not UTF-8, no header, a missing column) raise InvalidInput. Row problems
(a missing label, an empty or non-numeric or non-finite feature, a wrong field count) put that
row in ``invalid_rows`` with its line number and reason, and the other rows are kept.
CSV line numbers count the header as line 1; Parquet has no lines, so its rows are numbered
from 1. Blank CSV lines are skipped.

Each sample carries its row key (``Decoded.key``), which decides its split: ``id:<value>`` of
the recipe's ``id_column`` (a row without a value is invalid), else ``row:<sha256 of the
float32 features>``. Neither depends on the file's md5 or the row's position, so a row keeps
its split when rows are appended to the file, and identical rows never straddle the split
(under an id column, a row identical to an earlier one of the file takes that row's key).
"""

from __future__ import annotations

import csv
import hashlib
import math
from collections.abc import Iterable, Sequence

import numpy as np

from pipeline.datasets.preprocess.base import Decoded, DecodeResult, InvalidInput
from pipeline.datasets.recipe_model import CODE_VERSIONS, Recipe, TableSpec

CODE_VERSION = CODE_VERSIONS["table"]  # bumped in recipe_model.py: part of recipe_hash


class TablePreprocessor:
    name = "table"
    code_version = CODE_VERSION

    def decode(self, abspath: str, recipe: Recipe) -> DecodeResult:
        assert recipe.table is not None
        if abspath.lower().endswith(".parquet"):
            header, rows = _parquet_rows(abspath)
        else:
            header, rows = _csv_rows(abspath)
        return rows_to_samples(header, rows, recipe.table, regression=recipe.is_regression)


def _csv_rows(abspath: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    rows: list[tuple[int, list[str]]] = []
    try:
        with open(abspath, encoding="utf-8-sig", newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if header is None:
                raise InvalidInput("empty CSV file (no header row)")
            for row in reader:
                if not row or all(not c.strip() for c in row):
                    continue
                rows.append((reader.line_num, row))
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    except csv.Error as exc:
        raise InvalidInput(f"not a readable CSV file: {exc}") from None
    except OSError as exc:
        raise InvalidInput(f"unreadable file: {exc.strerror or exc}") from None
    return [c.strip() for c in header], rows


def _parquet_rows(abspath: str) -> tuple[list[str], list[tuple[int, list[object]]]]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InvalidInput("Parquet needs pyarrow, which is not installed") from None
    try:
        table = pq.read_table(abspath)
    except Exception as exc:  # pyarrow raises its own ArrowInvalid/OSError family
        raise InvalidInput(f"not a readable Parquet file: {exc}") from None
    columns = [table.column(i).to_pylist() for i in range(table.num_columns)]
    rows = [(i + 1, [col[i] for col in columns]) for i in range(table.num_rows)]
    return list(table.column_names), rows


def rows_to_samples(
    header: Sequence[str],
    rows: Iterable[tuple[int, Sequence[object]]],
    spec: TableSpec,
    *,
    regression: bool = False,
) -> DecodeResult:
    """``regression``: the label must be a finite number; it is kept as the shortest text of
    its float32 value (``target_text``), so ``151`` and ``151.0`` are one target."""
    label_col, id_col = spec.label_column, spec.id_column
    features = (
        spec.feature_columns
        if spec.feature_columns is not None
        else [c for c in header if c not in (label_col, id_col)]
    )
    keys = [label_col] + ([id_col] if id_col is not None else [])
    missing = [c for c in [*keys, *features] if c not in header]
    if missing:
        raise InvalidInput(
            f"missing column(s) {', '.join(map(repr, missing))} (header: {', '.join(header)})"
        )
    if not features:
        raise InvalidInput("no feature columns besides the label column")
    index = {name: i for i, name in enumerate(header)}
    label_i, feat_i = index[label_col], [index[c] for c in features]
    id_i = index[id_col] if id_col is not None else None
    samples: list[Decoded] = []
    invalid: list[tuple[int, str]] = []
    key_of_content: dict[bytes, str] = {}  # id mode: the first key of each feature content
    for line, row in rows:
        if len(row) != len(header):
            invalid.append((line, f"line {line}: {len(row)} fields, header has {len(header)}"))
            continue
        label = row[label_i]
        label = "" if label is None else str(label).strip()
        if not label:
            invalid.append((line, f"line {line}: missing label in column {label_col!r}"))
            continue
        if regression:
            target = target_text(label)
            if target is None:
                invalid.append(
                    (
                        line,
                        f"line {line}: target column {label_col!r} is not a finite number: {label!r}",
                    )
                )
                continue
            label = target
        row_id = None
        if id_i is not None:
            row_id = "" if row[id_i] is None else str(row[id_i]).strip()
            if not row_id:
                invalid.append((line, f"line {line}: missing id in column {id_col!r}"))
                continue
        x = np.empty(len(feat_i), dtype=np.float32)
        problem = None
        for k, (name, i) in enumerate(zip(features, feat_i, strict=True)):
            value = row[i]
            if value is None or (isinstance(value, str) and not value.strip()):
                problem = f"line {line}: column {name!r} is empty"
                break
            try:
                number = float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
            except (TypeError, ValueError):
                problem = f"line {line}: column {name!r} is not a number: {value!r}"
                break
            if not math.isfinite(number):
                problem = f"line {line}: column {name!r} is not a finite number: {value!r}"
                break
            x[k] = number
        if problem:
            invalid.append((line, problem))
            continue
        content = hashlib.sha256(x.tobytes()).digest()
        if row_id is None:
            key = "row:" + content.hex()
        else:
            key = key_of_content.setdefault(content, "id:" + row_id)
        samples.append(Decoded(x, label=label, row=line, key=key))
    return DecodeResult(samples, invalid)


def target_text(value: object) -> str | None:
    """A regression target as the shortest text of its float32 value, or None when it is not a
    finite number. Stored as text like a class name, so the version id, the leaves and the diff
    treat targets like labels; the reader turns it back into float32."""
    try:
        with np.errstate(over="ignore"):  # past float32's range is inf, refused below
            number = np.float32(float(value.strip() if isinstance(value, str) else value))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    if not np.isfinite(number):
        return None
    return str(number)

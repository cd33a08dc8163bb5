"""A regression version shows a target histogram, not class counts: ``laketrain show`` and the
UI's version page (and its JSON) read the histogram the commit put in the manifest."""

from __future__ import annotations

import json
import re

import numpy as np
from typer.testing import CliRunner

from tests.datasets.conftest import write_recipe

RECIPE = (
    'modality = "table"\ntask = "regression"\n[table]\nlabel_column = "price"\n'
    "[split]\nval_fraction = 0.25\n"
)


def _build(store, home):
    from pipeline.datasets.build import run_build

    write_recipe(home, "prices", RECIPE)
    folder = home / "lake" / "prices"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(3)
    rows = "".join(f"{a:.3f},{100 + 50 * a:.2f}\n" for a in rng.uniform(0, 1, 120))
    (folder / "all.csv").write_text("f1,price\n" + rows)
    return run_build("prices", workers=1, store=store).version


def test_show_prints_a_target_histogram_for_a_regression_version(store, home):
    from pipeline.cli import app

    v = _build(store, home)
    result = CliRunner().invoke(app, ["show", v.tag], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(r"┃ target +┃", out) and not re.search(r"┃ class +┃", out), out
    # 20 bins from the smallest to the largest price, half-open but the last one closed.
    bins = re.findall(r"│ (\[[0-9.]+, [0-9.]+[)\]]) +│ +(\d+) │ +(\d+) │", out)
    assert len(bins) == 20, out
    assert all(b[0].endswith(")") for b in bins[:-1]) and bins[-1][0].endswith("]")
    assert sum(int(t) for _, t, _ in bins) == v.train
    assert sum(int(x) for _, _, x in bins) == v.val
    shown = json.loads(
        CliRunner().invoke(app, ["show", v.tag, "--json"], catch_exceptions=False).output
    )
    target = shown["manifest"]["target"]
    assert sum(target["train"]["counts"]) == v.train and sum(target["val"]["counts"]) == v.val


def test_version_page_draws_the_target_histogram(store, home):
    from fastapi.testclient import TestClient

    from pipeline.ui.app import create_app

    v = _build(store, home)
    client = TestClient(create_app(lambda: None, get_store=lambda: store))
    page = client.get(f"/versions/{v.version_id}")
    assert page.status_code == 200, page.text[:2000]
    assert "Target histogram" in page.text and "Classes and splits" not in page.text
    assert "(unlabelled)" not in page.text
    assert page.text.count("<title>[") == 40  # train and val bar of each of 20 bins
    api = client.get(f"/api/versions/{v.version_id}").json()
    assert api["task"] == "regression"
    assert sum(c["total"] for c in api["classes"]) == v.samples
    assert len(api["classes"]) == 20 and api["classes"][-1]["label"].endswith("]")


def test_a_classification_version_page_keeps_its_class_counts(store, home):
    """The regression branch must leave classification pages as they were (the strict
    template once failed with a 500 on them for want of ``v.task``)."""
    from fastapi.testclient import TestClient

    from pipeline.datasets.build import run_build
    from pipeline.ui.app import create_app

    write_recipe(home, "kinds", 'modality = "table"\n[table]\nlabel_column = "kind"\n')
    folder = home / "lake" / "kinds"
    folder.mkdir(parents=True)
    (folder / "all.csv").write_text(
        "f1,kind\n" + "".join(f"{i},{'ab'[i % 2]}\n" for i in range(40))
    )
    v = run_build("kinds", workers=1, store=store).version
    client = TestClient(create_app(lambda: None, get_store=lambda: store))
    page = client.get(f"/versions/{v.version_id}")
    assert page.status_code == 200, page.text[:2000]
    assert "Classes and splits" in page.text and "Target histogram" not in page.text
    api = client.get(f"/api/versions/{v.version_id}").json()
    assert [c["label"] for c in api["classes"]] == ["a", "b"]
    assert sum(c["total"] for c in api["classes"]) == 40

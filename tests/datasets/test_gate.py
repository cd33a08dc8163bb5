"""The quality gate: a recipe's [quality] rules, a version they fail published quarantined
(listed, shown, diffed, exported; never latest, kept by gc), and approve / reject releasing or
keeping it, on SQLite and PostgreSQL, through the Python API and the `laketrain` entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.datasets.conftest import SMALL_IMAGE_RECIPE, image_lake, write_jpeg, write_recipe

HOLD = SMALL_IMAGE_RECIPE + "\n[quality]\nmin_val_samples = 1000\napproval = 'on_failure'\n"


def _build(store, dataset: str = "pets"):
    from pipeline.datasets.build import run_build

    return run_build(dataset, workers=1, store=store).version


def _head_file(home: Path, dataset: str = "pets") -> dict:
    return json.loads((home / "data" / "datasets" / dataset / "HEAD").read_text())


def _held(store, home: Path):
    """A committed version A (no rules), then B built under a failing rule: held."""
    image_lake(home, per_class=3)
    a = _build(store)
    write_recipe(home, "pets", HOLD)
    write_jpeg(home / "lake" / "pets" / "cat" / "new.jpg", seed=4242)
    b = _build(store)
    assert a is not None and b is not None and a.version_id != b.version_id
    return a, b


def _reviews(store, version_id: str) -> list[dict]:
    from pipeline.datasets.quality.review import history

    with store.session() as s:
        return history(s, version_id)


# --- rules --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("quality", "field", "words"),
    [
        ({"max_label_conflict": 0}, "quality.max_label_conflict", "unknown key"),
        ({"max_invalid_fraction": 1.5}, "quality.max_invalid_fraction", "less than or equal to 1"),
        ({"max_label_drift": -0.1}, "quality.max_label_drift", "greater than or equal to 0"),
        ({"min_val_samples": -1}, "quality.min_val_samples", "greater than or equal to 0"),
        ({"max_label_conflicts": True}, "quality.max_label_conflicts", "not a boolean"),
        (
            {"max_cross_split_near_duplicates": "a"},
            "quality.max_cross_split_near_duplicates",
            "integer",
        ),
        ({"near_duplicate_distance": 65}, "quality.near_duplicate_distance", "less than or equal"),
        ({"approval": "sometimes"}, "quality.approval", "never, on_failure, always"),
    ],
)
def test_a_bad_quality_rule_is_refused_naming_the_file_and_field(quality, field, words):
    from pipeline.datasets.recipes import RecipeError, parse_recipe

    with pytest.raises(RecipeError) as err:
        parse_recipe({"modality": "image", "quality": quality}, source="recipes/pets.toml")
    assert f"recipes/pets.toml: {field}: " in str(err.value)
    assert words in str(err.value)


def test_quality_rules_do_not_change_the_recipe_hash():
    from pipeline.datasets.recipes import parse_recipe

    plain = parse_recipe({"modality": "image"})
    ruled = parse_recipe(
        {"modality": "image", "quality": {"max_label_conflicts": 0, "approval": "always"}}
    )
    assert ruled.quality.max_label_conflicts == 0
    assert plain.recipe_hash == ruled.recipe_hash


def test_the_gate_names_each_failed_rule_with_its_value_and_limit():
    from pipeline.datasets.quality.gate import judge
    from pipeline.datasets.quality.rules import QualityRules

    metrics = {"invalid_fraction": 0.25, "label_conflicts": 3, "val_samples": 2, "label_drift": 0.0}
    rules = QualityRules(
        max_invalid_fraction=0.1, max_label_conflicts=3, min_val_samples=5, max_label_drift=0.5
    )
    verdict = judge(metrics, rules)
    assert [f.rule for f in verdict.failures] == ["max_invalid_fraction", "min_val_samples"]
    assert "invalid_fraction = 0.25 > max_invalid_fraction = 0.1" in verdict.reasons()[0]
    assert "val_samples = 2 < min_val_samples = 5" in verdict.reasons()[1]
    assert verdict.quarantined and not verdict.needs_approval  # approval "never": blocked
    assert judge(metrics, QualityRules(max_label_conflicts=3)).passed


def test_a_rule_the_report_cannot_answer_fails_closed_and_approval_modes():
    from pipeline.datasets.quality.gate import judge
    from pipeline.datasets.quality.rules import QualityRules

    verdict = judge(None, QualityRules(max_label_conflicts=0))
    assert verdict.quarantined and "cannot be checked" in verdict.reasons()[0]
    assert not judge(None, QualityRules()).quarantined  # no rule: nothing to check
    always = judge({}, QualityRules(approval="always"))
    assert always.passed and always.quarantined and always.needs_approval
    on_failure = judge({"val_samples": 1}, QualityRules(min_val_samples=2, approval="on_failure"))
    assert on_failure.needs_approval


# --- quarantine ---------------------------------------------------------------------------


def test_a_failing_rule_publishes_a_quarantined_version_and_latest_stays(store, home, tmp_path):
    from pipeline.datasets import queries
    from pipeline.datasets.export import export_version, open_ref
    from pipeline.datasets.reader import open_version

    a, b = _held(store, home)
    assert b.status == "quarantined" and b.head_move is None
    assert b.gate["needs_approval"] and "val_samples" in b.gate["reasons"][0]
    # latest: the store, the reader with a store, and the HEAD file for store-less readers
    assert queries.get_version("latest", dataset="pets", store=store)["version_id"] == a.version_id
    assert open_version("pets", "latest", store=store).version_id == a.version_id
    assert _head_file(home)["version_id"] == a.version_id
    # listed, shown, diffed and exported like any version
    listed = {v["version_id"]: v for v in queries.list_versions("pets", store=store)}
    assert listed[b.version_id]["status"] == "quarantined" and not listed[b.version_id]["is_head"]
    shown = queries.get_version(b.tag, store=store)
    assert shown["status"] == "quarantined"
    assert queries.diff_versions(a.tag, b.tag, store=store)["added"]
    reader = open_ref(b.version_id[:12])
    assert len(reader) == b.samples
    export_version(reader, tmp_path / "out", fmt="npy")
    assert (tmp_path / "out").is_dir()
    # the reason is recorded, once
    rows = _reviews(store, b.version_id)
    assert [r["decision"] for r in rows] == ["quarantine"]
    assert "val_samples" in rows[0]["reason"] and rows[0]["who"] == "quality gate"


def test_a_first_version_held_by_the_gate_is_not_latest_for_a_reader_without_a_store(
    store, home, monkeypatch
):
    """No HEAD file yet (nothing was ever approved): the store-less reader must not fall back
    to the newest folder, which is the held version."""
    from pipeline.datasets.manifest import VersionNotFound
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=3)
    write_recipe(home, "pets", HOLD)
    held = _build(store)
    assert held is not None and held.status == "quarantined"
    from pipeline.settings import get_settings

    monkeypatch.delenv("METADATA_DB_URL", raising=False)  # a trainer without a store
    get_settings.cache_clear()
    with pytest.raises(VersionNotFound, match="no head yet"):
        open_version("pets", "latest", data_root=home / "data", store=None)
    assert open_version("pets", held.version_id, data_root=home / "data").version_id == (
        held.version_id
    )


def test_rebuilding_an_unchanged_lake_keeps_the_version_held_without_a_new_record(store, home):
    from pipeline.datasets import queries

    a, b = _held(store, home)
    again = _build(store)
    assert again is not None and again.version_id == b.version_id
    assert again.status == "quarantined" and again.gate["again"]
    assert queries.get_version("latest", dataset="pets", store=store)["version_id"] == a.version_id
    assert len(_reviews(store, b.version_id)) == 1


def test_approval_publishes_the_held_version_as_latest(store, home):
    from pipeline.datasets import queries
    from pipeline.datasets.quality.review import approve

    a, b = _held(store, home)
    out = approve(b.tag, who="alice", reason="val is small on purpose")
    assert out.head_moved and out.status == "committed"
    assert out.event_extra() == {
        "dataset": "pets",
        "version_id": b.version_id,
        "tag": b.tag,
        "samples": b.samples,
        "added": b.added,
        "removed": b.removed,
    }
    assert queries.get_version("latest", dataset="pets", store=store)["version_id"] == b.version_id
    assert _head_file(home)["version_id"] == b.version_id
    assert queries.head_history("pets", store=store)[0]["reason"] == "approved"
    last = _reviews(store, b.version_id)[-1]
    assert (last["decision"], last["who"], last["reason"]) == (
        "approve",
        "alice",
        "val is small on purpose",
    )
    # a second approval (a retried task, a second click) changes nothing
    assert approve(b.tag, who="bob").decision == "none"
    assert _build(store) is None  # the lake's version is the head now


def test_a_rejected_version_stays_quarantined_and_is_not_asked_again(store, home):
    from pipeline.datasets import queries
    from pipeline.datasets.quality.review import ReviewError, reject

    a, b = _held(store, home)
    with pytest.raises(ReviewError, match="reason"):
        reject(b.tag, who="alice", reason="  ")
    out = reject(b.tag, who="alice", reason="labels look wrong")
    assert out.status == "quarantined" and not out.head_moved
    assert queries.get_version(b.tag, store=store)["status"] == "quarantined"
    assert queries.get_version("latest", dataset="pets", store=store)["version_id"] == a.version_id
    again = _build(store)
    assert again.status == "quarantined" and again.gate["standing"] == "reject"
    assert not again.gate["needs_approval"]
    with pytest.raises(ReviewError, match="not quarantined"):
        reject(a.tag, who="alice", reason="too late")


def test_approving_a_version_the_lake_moved_away_from_commits_it_without_moving_latest(store, home):
    from pipeline.datasets import queries
    from pipeline.datasets.quality.review import approve

    a, b = _held(store, home)
    (home / "lake" / "pets" / "cat" / "new.jpg").unlink()  # back to A's content
    assert _build(store) is None  # the head already is A
    out = approve(b.tag, who="alice")
    assert out.status == "committed" and not out.head_moved and out.event_extra() is None
    assert queries.get_version("latest", dataset="pets", store=store)["version_id"] == a.version_id
    assert [r["decision"] for r in _reviews(store, b.version_id)] == [
        "quarantine",
        "superseded",
        "approve",
    ]


def test_gc_keeps_a_quarantined_version_whole(store, home):
    from pipeline.datasets.gc import collect
    from pipeline.datasets.reader import open_version

    _, b = _held(store, home)
    plan = collect(keep_last=None, apply=True, min_age_s=0)
    assert not [p for p in plan.leftovers if b.version_id in p]
    assert len(open_version("pets", b.version_id, store=store)) == b.samples


# --- the entry point ----------------------------------------------------------------------


def _laketrain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env={**os.environ, "COLUMNS": "200"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_quality_approve_and_reject_through_the_entry_point(store, home):
    a, b = _held(store, home)
    q = _laketrain("quality", b.tag, "--json")
    assert q.returncode == 0, q.stderr
    shown = json.loads(q.stdout)
    assert shown["status"] == "quarantined" and shown["gate"]["quarantined"]
    assert any("val_samples" in r for r in shown["held_for"])
    text = _laketrain("quality", b.tag)
    assert text.returncode == 0 and "quarantined because:" in text.stdout
    listing = _laketrain("versions", "pets")
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if b.version_id[:12] in line)
    assert "quarantined" in row

    no_reason = _laketrain("reject", b.tag)
    assert no_reason.returncode == 2 and "--reason" in no_reason.stderr
    rejected = _laketrain("reject", b.tag, "--reason", "blurry", "--by", "carol")
    assert rejected.returncode == 0, rejected.stderr
    assert "stays quarantined" in rejected.stdout

    approved = _laketrain("approve", b.version_id[:12], "--json")
    assert approved.returncode == 0, approved.stderr
    out = json.loads(approved.stdout)
    assert out["head_moved"] and out["who"]  # the OS user
    reviews = json.loads(_laketrain("quality", b.tag, "--json").stdout)["reviews"]
    assert [(r["decision"], r["who"]) for r in reviews][:2] == [
        ("quarantine", "quality gate"),
        ("reject", "carol"),
    ]
    assert reviews[2]["decision"] == "approve"
    latest = json.loads(_laketrain("show", "latest", "--dataset", "pets", "--json").stdout)
    assert latest["version_id"] == b.version_id

    refused = _laketrain("reject", a.tag, "--reason", "x")
    assert refused.returncode == 1 and "not quarantined" in refused.stderr

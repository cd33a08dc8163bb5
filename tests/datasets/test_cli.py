"""The datasets CLI end to end, in-process, against the store on both backends."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from tests.datasets.conftest import image_lake, write_jpeg

runner = CliRunner()


def _run(*args: str) -> str:
    from pipeline.cli import app

    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_build_versions_show_diff_contains_export_gc(store, home, tmp_path):
    from pipeline.cli import app

    image_lake(home, per_class=3)
    (home / "lake" / "pets" / "dog" / "notes.jpg").write_text("not a picture")
    out = _run("build", "pets", "--workers", "1")
    assert "published pets_v" in out
    assert "no change" in _run("build", "pets", "--workers", "1")
    write_jpeg(home / "lake" / "pets" / "cat" / "new.jpg", seed=31)
    report = json.loads(_run("build", "pets", "--workers", "1", "--json"))
    assert report["decoded"] == 1 and report["version"]["added"] == 1

    versions = json.loads(_run("versions", "pets", "--json"))
    assert len(versions) == 2 and versions[0]["parent_id"] == versions[1]["version_id"]
    table = _run("versions")
    assert versions[0]["short_id"] in table and versions[1]["short_id"] in table

    shown = _run("show", versions[0]["tag"])
    assert (
        "pets/dog/notes.jpg" in shown
        and "not an image file" in shown
        and versions[1]["tag"] in shown
    )
    shown_json = json.loads(_run("show", versions[0]["short_id"], "--json"))
    assert shown_json["invalid_files"][0]["path"] == "pets/dog/notes.jpg"
    assert shown_json["counts"]["samples"] == 7

    d = json.loads(_run("diff", versions[1]["short_id"], versions[0]["short_id"], "--json"))
    assert (
        d["counts"] == {"added": 1, "removed": 0, "changed": 0}
        and d["added"][0]["path"] == "pets/cat/new.jpg"
    )
    assert "+ pets/cat/new.jpg" in _run("diff", versions[1]["tag"], versions[0]["tag"])

    md5 = d["added"][0]["md5"]
    holders = json.loads(_run("contains", md5, "--json"))
    assert [h["version_id"] for h in holders] == [versions[0]["version_id"]]
    assert len(json.loads(_run("contains", "pets/cat/000.jpg", "--json"))) == 2
    missing = runner.invoke(app, ["contains", "pets/cat/none.jpg"])
    assert missing.exit_code == 1 and "no version contains" in missing.output

    dest = tmp_path / "exported"
    assert "exported 7 samples" in _run(
        "export", versions[0]["short_id"], str(dest), "--format", "npy"
    )
    assert (dest / "x.npy").is_file() and (dest / "metadata.jsonl").is_file()

    dry = json.loads(_run("gc", "--keep-last", "1", "--min-age", "0", "--json"))
    assert not dry["applied"] and [v["version_id"] for v in dry["versions"]] == [
        versions[1]["version_id"]
    ]
    assert "dry run" in _run("gc", "--keep-last", "1", "--min-age", "0")
    assert len(json.loads(_run("versions", "--json"))) == 2
    _run("gc", "--keep-last", "1", "--min-age", "0", "--apply")
    assert len(json.loads(_run("versions", "--json"))) == 1


def test_unknown_version_and_bad_recipe_fail_with_a_message(store, home):
    from pipeline.cli import app

    image_lake(home, per_class=1)
    result = runner.invoke(app, ["show", "deadbeef"])
    assert result.exit_code == 2 and "no committed version" in result.output
    (home / "recipes" / "pets.toml").write_text('modality = "video"\n')
    result = runner.invoke(app, ["build", "pets"])
    assert result.exit_code == 2 and "modality" in result.output and "image" in result.output


def test_a_dataset_name_that_is_not_a_lake_folder_is_refused_for_its_name(store, home):
    """`build ../etc` must fail on the name itself, before any recipe or lake path is built
    from it; nothing is written outside the lake, and the ledger stays empty."""
    from pipeline.cli import app

    image_lake(home, per_class=1)
    (home / "etc.toml").write_text('modality = "image"\n')  # a recipe `../etc` would reach
    for name, why in [
        ("../etc", "without '/'"),
        ("..", "not '.' or '..'"),
        ("pets/cat", "without '/'"),
        (".pets", "must not start with '.' or '_'"),
        ("_staging", "must not start with '.' or '_'"),
    ]:
        result = runner.invoke(app, ["build", name])
        assert result.exit_code == 2, (name, result.output)
        flat = " ".join(result.output.split())  # rich wraps long lines
        assert f"dataset name {name!r}" in flat and why in flat, (name, flat)
    assert json.loads(_run("files", "--json")) == []  # refused before any scan

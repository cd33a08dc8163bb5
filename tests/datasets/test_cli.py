"""The datasets CLI end to end, in-process, against the store on both backends."""

from __future__ import annotations

import json
import os
import subprocess
import sys

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


# ---- the CLI as a user meets it: latest, unknown datasets, file arguments, 80 columns ---------


def _fails(*args: str) -> str:
    from pipeline.cli import app

    result = runner.invoke(app, list(args))
    assert result.exit_code != 0, result.output
    return " ".join(result.output.split())


def _two_pets_versions(home) -> list[dict]:
    image_lake(home, per_class=2)
    _run("build", "pets", "--workers", "1")
    write_jpeg(home / "lake" / "pets" / "cat" / "new.jpg", seed=41)
    _run("build", "pets", "--workers", "1")
    return json.loads(_run("versions", "pets", "--json"))


def test_latest_takes_dataset_or_infers_it_from_the_store_or_the_other_version(store, home):
    old, new = _two_pets_versions(home)[::-1]
    # One dataset with versions: 'latest' is its head, without --dataset.
    assert json.loads(_run("show", "latest", "--json"))["version_id"] == new["version_id"]
    d = json.loads(_run("diff", old["version_id"][:12], "latest", "--json"))
    assert d["counts"]["added"] == 1 and d["b"]["version_id"] == new["version_id"]

    image_lake(home, dataset="birds", per_class=2, classes=("owl", "tit"), seed0=500)
    _run("build", "birds", "--workers", "1")
    message = _fails("show", "latest")
    assert "--dataset" in message and "birds, pets" in message
    assert json.loads(_run("show", "latest", "--dataset", "pets", "--json"))["tag"] == new["tag"]
    # The other argument names the dataset.
    d = json.loads(_run("diff", old["tag"], "latest", "--json"))
    assert d["b"]["version_id"] == new["version_id"]
    d = json.loads(_run("diff", "latest", old["tag"], "--json"))
    assert d["a"]["version_id"] == new["version_id"]


def test_versions_of_an_unknown_dataset_fails_listing_the_known_ones(store, home):
    from pipeline.cli import app

    _two_pets_versions(home)
    (home / "lake" / "birds" / "owl").mkdir(parents=True)  # a lake folder, never built
    result = runner.invoke(app, ["versions", "cats"])
    assert result.exit_code == 2
    assert "unknown dataset 'cats'; known datasets: birds, pets" in " ".join(result.output.split())
    assert "0 version(s) of birds" in _run("versions", "birds")  # known, no version yet


def test_contains_takes_a_path_in_the_dataset_folder_in_the_lake_or_on_disk(
    store, home, monkeypatch
):
    versions = _two_pets_versions(home)
    lake = home / "lake"
    want = [v["version_id"] for v in versions]

    def holders(*args: str) -> list[str]:
        return [r["version_id"] for r in json.loads(_run("contains", *args, "--json"))]

    assert holders("pets/cat/000.jpg") == want
    assert holders("cat/000.jpg", "--dataset", "pets") == want
    assert holders("cat/000.jpg") == want  # the only dataset
    assert holders(str(lake / "pets" / "cat" / "000.jpg")) == want
    monkeypatch.chdir(home)
    assert holders("lake/pets/cat/000.jpg") == want  # like var/lake/... from the repo root
    assert holders("./lake/pets/cat/000.jpg") == want
    message = _fails("contains", str(home / "elsewhere.jpg"))
    assert "is not inside the lake" in message


def test_contains_says_why_a_rejected_file_is_in_no_version(store, home):
    from pipeline.cli import app

    image_lake(home, per_class=2)
    (home / "lake" / "pets" / "dog" / "notes.jpg").write_text("not a picture")
    _run("build", "pets", "--workers", "1")
    result = runner.invoke(app, ["contains", "dog/notes.jpg", "--dataset", "pets"])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert text.startswith("rejected: not an image file") and "pets/dog/notes.jpg" in text
    assert "no version contains" not in text
    missing = runner.invoke(app, ["contains", "pets/dog/none.jpg"])
    assert missing.exit_code == 1 and "no version contains pets/dog/none.jpg" in missing.output


def _cli_80(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env={**os.environ, "COLUMNS": "80"},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_versions_and_contains_fit_80_columns_with_whole_short_ids(store, home):
    from pipeline.cli import app

    versions = _two_pets_versions(home)
    runner.invoke(app, ["gc", "--keep-last", "1", "--min-age", "0", "--apply"])
    image_lake(home, dataset="birds", per_class=2, classes=("owl", "tit"), seed0=500)
    _run("build", "birds", "--workers", "1")
    everything = json.loads(_run("versions", "--all", "--json"))
    assert {len(v["version_id"]) for v in everything} == {64}  # --json keeps full ids

    listing = _cli_80("versions", "--all")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, listing.stdout
    for v in everything:
        row = next(line for line in lines if v["version_id"][:12] in line)
        assert v["dataset"] in row
    assert any("deleted" in line for line in lines)

    md5 = json.loads(_run("contains", "pets/cat/000.jpg", "--json"))[0]["md5"]
    for arg in ("pets/cat/000.jpg", md5):
        out = _cli_80("contains", arg)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, out.stdout
        assert any(versions[0]["version_id"][:12] in line for line in lines), out.stdout
    assert any(
        md5[:12] in line for line in _cli_80("contains", "pets/cat/000.jpg").stdout.splitlines()
    )


def test_messages_to_a_pipe_are_never_wrapped(store, home):
    image_lake(home, per_class=1)
    _run("build", "pets", "--workers", "1")
    ref = "no-such-version-" + "x" * 90
    out = _cli_80("show", ref)
    assert out.returncode == 2
    assert len(out.stderr.splitlines()) == 1 and ref in out.stderr, out.stderr
    deep = "pets/" + "/".join(["deeper"] * 15) + "/none.jpg"
    out = _cli_80("contains", deep)
    assert out.returncode == 1
    assert out.stdout.splitlines() == [f"no version contains {deep}"], out.stdout

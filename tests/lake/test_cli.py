"""The ledger commands through the real `laketrain` entry point, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.lake.conftest import write


def laketrain(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
    }
    env.pop("METADATA_DB_URL", None)
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_scan_json_and_files_listing(lt_env):
    write(lt_env / "lake" / "ds" / "cat" / "a.png", b"a")
    write(lt_env / "lake" / "ds" / "dog" / "b.png", b"bb")
    (lt_env / "lake" / "ds" / "escape").symlink_to("/etc/hostname")
    out = laketrain(lt_env, "scan", "--json")
    assert out.returncode == 0, out.stderr
    summary = json.loads(out.stdout)
    assert (summary["new"], summary["refused"], summary["changed_datasets"]) == (2, 1, ["ds"])
    assert {f["path"] for f in summary["new_files"]} == {"ds/cat/a.png", "ds/dog/b.png"}

    listed = json.loads(laketrain(lt_env, "files", "--json", "--path", "ds/cat/*").stdout)
    assert [r["path"] for r in listed] == ["ds/cat/a.png"]
    refused = json.loads(laketrain(lt_env, "files", "--json", "--status", "refused").stdout)
    assert [(r["path"], r["error"]) for r in refused] == [
        ("ds/escape", "symlink target lies outside the lake")
    ]
    by_md5 = json.loads(laketrain(lt_env, "files", "--json", "--md5", listed[0]["md5"][:6]).stdout)
    assert [r["path"] for r in by_md5] == ["ds/cat/a.png"]

    human = laketrain(lt_env, "scan")
    assert human.returncode == 0 and "unchanged" in human.stdout


def test_bad_options_fail_with_a_clear_message(lt_env):
    out = laketrain(lt_env, "files", "--status", "weird")
    assert out.returncode == 2 and "--status must be one of" in out.stderr
    out = laketrain(lt_env, "scan", "../etc")
    assert out.returncode == 2 and "dataset must be a first-level lake folder name" in out.stderr


def test_sample_lake_writes_real_digits_and_photos(lt_env):
    out = laketrain(lt_env, "sample-lake")
    assert out.returncode == 0, out.stderr
    digits = sorted((lt_env / "lake" / "digits").rglob("*.png"))
    assert len(digits) == 1797
    assert {p.parent.name for p in digits} == {str(i) for i in range(10)}
    from PIL import Image

    with Image.open(digits[0]) as im:
        assert im.size == (8, 8) and im.mode == "L"
    photos = list((lt_env / "lake" / "photos").rglob("*.jpg"))
    assert len(photos) >= 2
    again = laketrain(lt_env, "sample-lake")
    assert "already has data" in again.stdout


COMMANDS = (
    "db",
    "sample-lake",
    "scan",
    "files",
    "build",
    "versions",
    "show",
    "diff",
    "contains",
    "export",
    "gc",
    "train",
)


def test_every_command_is_offered_with_its_help(lt_env):
    top = laketrain(lt_env, "--help")
    assert top.returncode == 0, top.stderr
    for name in COMMANDS:
        assert f" {name} " in top.stdout, name
    # Each command's own help from the same app, in this process: a subprocess per command
    # cost a full CLI start-up each (~2 s apiece on 2 busy cores) for the same typer app.
    from typer.testing import CliRunner

    from pipeline.cli_app import app

    runner = CliRunner()
    for name in COMMANDS:
        out = runner.invoke(app, [name, "--help"], env={"COLUMNS": "120"})
        assert out.exit_code == 0, (name, out.output)
        assert "usage" in out.output.lower(), name


_MODULES_AT_EXIT = (
    "import atexit, os, sys\n"
    "out = os.environ['LT_TEST_MODULES']\n"
    "atexit.register(lambda: open(out, 'w').write('\\n'.join(sorted(sys.modules))))\n"
    "from pipeline.cli import main\n"
    "main()\n"
)


def _modules_of(home: Path, *args: str) -> set[str]:
    listing = home / "modules.txt"
    env = {
        **os.environ,
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
        "LT_TEST_MODULES": str(listing),
    }
    env.pop("METADATA_DB_URL", None)
    out = subprocess.run(
        [sys.executable, "-c", _MODULES_AT_EXIT, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return {m.split(".")[0] for m in listing.read_text().split()} | set(listing.read_text().split())


def test_a_scan_of_a_store_at_head_loads_no_heavy_module(lt_env):
    """Start-up was most of `laketrain scan` of an unchanged lake; these imports were it."""
    write(lt_env / "lake" / "ds" / "a" / "1.png", b"1")
    assert laketrain(lt_env, "scan").returncode == 0  # creates and migrates the store
    heavy = {"sqlalchemy", "alembic", "pydantic_settings", "numpy", "torch", "rich.progress"}
    assert _modules_of(lt_env, "scan", "--json") & (heavy | {"rich"}) == set()
    assert _modules_of(lt_env, "scan") & heavy == set()  # rich prints the table, no bar

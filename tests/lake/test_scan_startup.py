"""`laketrain scan` of an unchanged lake is mostly start-up: the lean entry keeps pydantic,
typer, click, rich and SQLAlchemy out of it, and what it prints is what rich printed."""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.cli import lean_scan_args
from pipeline.redact import redact_url
from pipeline.scan_command import SCAN_COUNTS, plain_table
from pipeline.settings import _has_credentials
from tests.lake.conftest import write
from tests.lake.test_cli import _modules_of, laketrain

NOT_ON_THE_SCAN_PATH = {
    "pydantic",
    "typer",
    "click",
    "rich",
    "sqlalchemy",
    "alembic",
    # Settings without credentials in them need no masking (pipeline.settings._has_credentials).
    "pipeline.redact",
}


def test_an_unchanged_scan_loads_no_pydantic_typer_rich_or_sqlalchemy(lt_env):
    write(lt_env / "lake" / "ds" / "a" / "1.png", b"1")
    first = laketrain(lt_env, "scan")  # creates and migrates the store
    assert first.returncode == 0, first.stderr
    for args in (["scan"], ["scan", "--json"], ["scan", "ds", "--no-wait"]):
        assert _modules_of(lt_env, *args) & NOT_ON_THE_SCAN_PATH == set(), args
    # Everything else still goes through typer: its help lists the scan options.
    helped = laketrain(lt_env, "scan", "--help")
    assert helped.returncode == 0 and "--no-wait" in helped.stdout


def test_the_plain_table_is_what_rich_writes_off_a_terminal(lt_env):
    write(lt_env / "lake" / "ds" / "a" / "1.png", b"1")
    write(lt_env / "lake" / "ds" / "a" / "2.png", b"22")
    laketrain(lt_env, "scan")
    out = laketrain(lt_env, "scan", "ds")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == f"scan 2 of {lt_env / 'lake'} / ds"
    assert "│ unchanged  │ 2 │" in lines
    assert lines[-1].startswith("0.0 MB hashed in ")
    assert out.stdout == _rich(lines[0], _rows(out.stdout)) + lines[-1] + "\n"


def _rows(text: str) -> list[tuple[str, str]]:
    rows = [line.strip("│ ").split(" │ ") for line in text.splitlines() if line.startswith("│")]
    assert [k.strip() for k, _ in rows] == list(SCAN_COUNTS)
    return [(k.strip(), v.strip()) for k, v in rows]


def _rich(title: str, rows: list[tuple[str, str]]) -> str:
    from rich.table import Table

    from pipeline.console import _make_console

    console = _make_console()
    console.file = io.StringIO()
    table = Table(title=title, show_header=False)
    table.add_column("what")
    table.add_column("files", justify="right")
    for key, count in rows:
        table.add_row(key, count)
    console.print(table)
    return console.file.getvalue()


@pytest.mark.parametrize(
    "title",
    [
        "scan 1 of x",
        "scan 12 of s3://bucket/prefix / ds",
        "scan 3 of /a/lake/with a title far wider than the eighty columns of a pipe/" + "x" * 40,
        "scan 4 of /lake/ünïcode/データ",
    ],
)
@pytest.mark.parametrize("count", ["0", "1234567", "9" * 30])
def test_plain_table_matches_rich(monkeypatch, title, count):
    monkeypatch.delenv("COLUMNS", raising=False)
    rows = [(key, count if key == "unchanged" else "0") for key in SCAN_COUNTS]
    assert plain_table(title, rows) == _rich(title, rows)


def test_a_table_too_wide_for_columns_is_left_to_rich(monkeypatch):
    monkeypatch.setenv("COLUMNS", "20")
    assert plain_table("t", [(key, "20000") for key in SCAN_COUNTS]) is None


@pytest.mark.parametrize(
    ("argv", "parsed"),
    [
        (["scan"], (None, False, True)),
        (["scan", "--no-wait", "ds", "--json"], ("ds", True, False)),
        (["scan", "--no-wait", "--wait"], (None, False, True)),
        (["scan", "--help"], None),
        (["scan", "a", "b"], None),
        (["scan", "--", "ds"], None),
        (["scan", "--jsn"], None),
        (["files"], None),
        ([], None),
    ],
)
def test_only_a_plain_scan_line_skips_typer(argv, parsed):
    assert lean_scan_args(argv) == parsed


def test_a_store_failure_under_the_lean_scan_is_one_line(lt_env):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    write(lt_env / "lake" / "ds" / "a" / "1.png", b"1")
    env = {
        **os.environ,
        "LAKE_DIR": str(lt_env / "lake"),
        "METADATA_DB_URL": f"postgresql+psycopg://lt:hunter2-pw@127.0.0.1:{port}/lt",
    }
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "scan"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr
    assert "retry `laketrain scan`" in out.stderr and "hunter2-pw" not in out.stderr


# URL-ish text: the characters that make a URL carry credentials, and a few that do not.
_URLISH = st.text(alphabet="ab:/@?&;=.-_ %\t", max_size=40) | st.sampled_from(
    [
        "s3://bucket/prefix",
        "s3://AKIA:secret@bucket/p",
        "s3://AKIA@bucket",
        "file:///var/objects",
        "file://user:pw@localhost/x",
        "postgresql://u:p@h/db",
        "s3://b/p?password=x",
        "s3://b/p?a=1&token=t",
        "s3://b/p;secret=s",
        "user:pw@host/db",
    ]
)


@settings(max_examples=500, deadline=None)
@given(prefix=st.sampled_from(["", "s3://", "file://", "postgresql+psycopg://"]), text=_URLISH)
def test_the_settings_credential_check_is_redact_url_s(prefix, text):
    """The settings check skips pipeline.redact for text with nothing to mask; it must say
    exactly what comparing with redact_url says."""
    value = prefix + text
    assert _has_credentials(value) == (redact_url(value) != value)

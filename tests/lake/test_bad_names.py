"""File names that are not valid UTF-8: the one file is refused with its reason (its path
escaped), the rest of the lake is scanned and built, on SQLite and PostgreSQL."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from pipeline.lake.scan import scan
from pipeline.lake.walk import NOT_UTF8_REASON

BAD = b"bad\xff.png"


def png_bytes(seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def write_raw(lake: Path, rel: bytes, data: bytes) -> None:
    """Write a lake file under a name given as raw bytes, back-dated so it is settled."""
    path = os.path.join(os.fsencode(lake), rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)
    t = os.stat(path).st_mtime_ns - 3600 * 10**9
    os.utime(path, ns=(t, t))


def bad_lake(lake: Path) -> None:
    for i in range(3):
        write_raw(lake, f"pics/cat/{i}.png".encode(), png_bytes(i))
        write_raw(lake, f"pics/dog/{i}.png".encode(), png_bytes(10 + i))
    write_raw(lake, b"pics/cat/" + BAD, png_bytes(99))  # a real PNG, only its name is bad
    write_raw(lake, b"pics/d\xfeg/1.png", png_bytes(98))  # a folder with a bad name
    write_raw(lake, b"\xfe.png", png_bytes(97))  # a loose file at the top


def test_a_name_that_is_not_utf8_is_refused_alone_and_the_scan_goes_on(store, lake):
    bad_lake(lake)
    result = scan(lake, store=store, workers=1)
    assert sorted(c.path for c in result.new) == sorted(
        f"pics/{c}/{i}.png" for c in ("cat", "dog") for i in range(3)
    )
    refused = dict(result.refused)
    assert refused["pics/cat/bad\\xff.png"] == NOT_UTF8_REASON
    assert refused["pics/d\\xfeg/1.png"] == NOT_UTF8_REASON
    assert "\\xfe.png" in refused
    json.dumps(result.to_json()).encode("utf-8")  # every path is printable

    from pipeline.lake.ledger_query import list_files

    rows = {r["path"]: r for r in list_files(store=store)}
    assert rows["pics/cat/bad\\xff.png"]["status"] == "refused"
    assert rows["pics/cat/bad\\xff.png"]["error"] == NOT_UTF8_REASON
    # A rescan finds the same refused rows again: nothing is taken for deleted or new.
    again = scan(lake, store=store, workers=1)
    assert not again.has_content_changes and again.unchanged == 6
    assert len(again.refused) == 3


def test_an_escaped_name_that_is_also_a_real_file_name_does_not_stop_the_scan(store, lake):
    write_raw(lake, b"pics/cat/" + BAD, png_bytes(1))
    write_raw(lake, b"pics/cat/bad\\xff.png", png_bytes(2))  # literally backslash-x-f-f
    result = scan(lake, store=store, workers=1)
    assert [c.path for c in result.new] == ["pics/cat/bad\\xff.png"]
    assert [p for p, _ in result.refused] == ["pics/cat/bad\\xff.png"]
    assert scan(lake, store=store, workers=1).unchanged == 1


def _cli(home: Path, db_url: str, *args: str | bytes) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
        "METADATA_DB_URL": db_url,
    }
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_laketrain_scan_files_and_build_succeed_next_to_a_bad_name(store, lt_env, db_url):
    bad_lake(lt_env / "lake")
    out = _cli(lt_env, db_url, "scan")
    assert out.returncode == 0, out.stderr
    assert "pics/cat/bad\\xff.png" in out.stdout

    out = _cli(lt_env, db_url, "build", "pics", "--workers", "1", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["version"]["samples"] == 6

    from pipeline.datasets.queries import get_version

    info = get_version("latest", "pics", store=store)
    invalid = {r["path"]: r["reason"] for r in info["invalid_files"]}
    assert invalid["pics/cat/bad\\xff.png"] == NOT_UTF8_REASON
    assert invalid["pics/d\\xfeg/1.png"] == NOT_UTF8_REASON

    # The raw name typed on the command line finds its escaped ledger row.
    out = _cli(lt_env, db_url, "files", "--json", "--path", os.fsdecode(b"pics/cat/" + BAD))
    assert out.returncode == 0, out.stderr
    assert [r["status"] for r in json.loads(out.stdout)] == ["refused"]


def test_a_hashing_error_of_any_kind_is_that_files_verdict_naming_it():
    """Not only OSError: whatever one file raises (here a NUL byte in its path) becomes that
    file's `unreadable` reason instead of stopping the scan with no file named."""
    from pipeline.lake.hashing import _hash_one

    res = _hash_one(("pics/cat/odd.png", "/nonexistent/odd\x00.png"))
    assert res.path == "pics/cat/odd.png" and res.md5 is None
    assert res.error is not None and "ValueError" in res.error

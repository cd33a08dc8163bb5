"""The helpers every benchmark shares: the report (printed, written only when asked), the
figures table and back-dating generated files."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench import _baselines, _results


def test_report_prints_and_writes_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(_results, "RESULTS", results)
    _results.report("bench/x.py", "dry figures", write=False)
    assert capsys.readouterr().out == "dry figures\n"
    assert not results.exists()
    _results.report("bench/x.py", "real figures", write=True)
    assert capsys.readouterr().out == "real figures\n"
    assert "## bench/x.py" in results.read_text() and "real figures" in results.read_text()


def test_figures_table_is_a_two_column_markdown_table() -> None:
    assert _results.figures_table([("a", "1 s"), ("b", "2x")]) == (
        "| measure | figure |\n|---|---|\n| a | 1 s |\n| b | 2x |"
    )


def test_backdate_moves_mtimes_into_the_past(tmp_path: Path) -> None:
    files = [tmp_path / "a" / f"{i}.bin" for i in range(3)]
    files[0].parent.mkdir()
    for f in files:
        f.write_bytes(b"x")
    _baselines.backdate(files, seconds=7200)
    now = time.time()
    assert all(7000 < now - os.stat(f).st_mtime < 7400 for f in files)

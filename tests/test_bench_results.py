"""bench/_results.py: one section rewritten, the others kept, the machine named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import _results


def test_write_section_replaces_only_its_own_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(_results, "RESULTS", results)
    _results.write_section("bench/a.py", "first a")
    _results.write_section("bench/b.py", "only b")
    _results.write_section("bench/a.py", "second a", where="NVIDIA H200 (borrowed)")
    text = results.read_text()
    assert "first a" not in text and "second a" in text and "only b" in text
    a_section = text.split("## bench/a.py\n", 1)[1].split("## ", 1)[0]
    b_section = text.split("## bench/b.py\n", 1)[1]
    assert "NVIDIA H200 (borrowed)_" in a_section  # the figures' machine, not this one
    assert _results.machine() in b_section
    assert text.index("## bench/a.py") < text.index("## bench/b.py")  # order kept

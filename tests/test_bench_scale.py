"""bench/scale.py runs end to end at a tiny size (a smoke run: every step, every assertion of
the script on what each build returned; the figures themselves are not checked)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _scale(work: Path, *args: str, timeout: int) -> subprocess.CompletedProcess[str]:
    """bench/scale.py with ``args``, its work folder ``work``, writing nothing to RESULTS."""
    return subprocess.run(
        [sys.executable, "bench/scale.py", *args, "--work", str(work), "--no-write"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_scale_bench_runs_every_step_at_a_tiny_size(tmp_path: Path) -> None:
    work = tmp_path / "scale"
    proc = _scale(work, "--samples", "300", "--add", "10", "--workers", "1", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for row in ("**incremental, end to end (target <= 5 s)**", "no-change rebuild / bare walk",
                "the same walk split over 1 processes", "floor of an increment here",
                "the split walk listing each folder through a descriptor",
                "**diff of the two consecutive versions (target <= 1 s)**",
                "**contains by md5 (target <= 50 ms)**", "peak RSS",
                "+10 files at random places among each class folder's files",
                "**the same drop: bytes / first version's (target <= 1 %)**"):  # fmt: skip
        assert row in proc.stdout
    # The interleaved drop wrote new leaves inside the version (not only at its folders' ends).
    assert re.search(r"; [1-9]\d* new leaves of the version's \d+", proc.stdout), proc.stdout
    assert not work.exists()  # the work folder is removed afterwards


def test_scale_bench_refuses_more_files_to_add_than_samples_before_it_builds(
    tmp_path: Path,
) -> None:
    """The drop at random places names each new file after an existing one: --add above
    --samples would fail only after the full build, so it is refused at once."""
    work = tmp_path / "scale"
    proc = _scale(work, "--samples", "100", "--add", "101", timeout=120)
    assert proc.returncode == 2 and "--add must be at most --samples" in proc.stderr
    assert not work.exists()  # nothing was made

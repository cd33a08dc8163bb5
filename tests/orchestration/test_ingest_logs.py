"""The ingest task logs name every rejected file (path and reason): the task bodies run on a
real lake and store, their log records captured."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from pipeline.orchestration import ingest_tasks

RECIPE = 'modality = "image"\n[image]\nsize = 8\nchannels = 1\n[labels]\nrule = "parent_dir"\n'


def png(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8), dtype=np.uint8)
    Image.fromarray(pixels, mode="L").save(path)


def good_lake(home: Path) -> None:
    (home / "recipes").mkdir(exist_ok=True)
    (home / "recipes" / "digits.toml").write_text(RECIPE)
    for i in range(6):
        png(home / "lake" / "digits" / str(i % 2) / f"{i:04d}.png", i)


def ingest(caplog: pytest.LogCaptureFixture) -> dict[str, str]:
    """scan, plan, process and commit as the DAG runs them; each task's log text."""
    logs = {}
    with caplog.at_level(logging.INFO, logger="laketrain.orchestration"):
        caplog.clear()
        datasets = ingest_tasks.scan_lake()["datasets"]
        logs["scan"] = caplog.text
        caplog.clear()
        shards = ingest_tasks.plan_shards(datasets)
        segments = []
        for shard in shards:
            segments.append(ingest_tasks.process_shard(shard))
        logs["process"] = caplog.text
        for name in datasets:
            caplog.clear()
            ingest_tasks.commit_dataset(name, segments)
            logs[f"commit {name}"] = caplog.text
    return logs


def test_a_corrupt_and_an_empty_png_are_named_with_their_reasons(
    store, lt_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good_lake(lt_env)
    first = ingest(caplog)
    assert "committed version" in first["commit digits"]
    (lt_env / "lake" / "digits" / "1" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    (lt_env / "lake" / "digits" / "1" / "empty.png").write_bytes(b"")
    logs = ingest(caplog)
    for task in ("process", "commit digits"):
        for name in ("digits/1/corrupt.png", "digits/1/empty.png"):
            line = next((ln for ln in logs[task].splitlines() if name in ln), None)
            assert line is not None, (task, logs[task])
            assert f"invalid file: {name}: " in line
            assert len(line.split(f"{name}: ", 1)[1].strip()) > 3  # a reason, not nothing
    assert "nothing changed" in logs["commit digits"]
    # The next scan knows them as invalid and names them too.
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="laketrain.orchestration"):
        ingest_tasks.scan_lake()
    assert "invalid file: digits/1/corrupt.png: " in caplog.text
    assert "invalid file: digits/1/empty.png: " in caplog.text


def test_the_list_is_capped_with_a_count_of_the_rest(
    store, lt_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    good_lake(lt_env)
    for i in range(53):
        (lt_env / "lake" / "digits" / "0" / f"bad{i:02d}.png").write_bytes(b"junk %d" % i)
    logs = ingest(caplog)
    named = [ln for ln in logs["commit digits"].splitlines() if "invalid file: " in ln]
    assert len(named) == 50
    assert "... and 3 more invalid files" in logs["commit digits"]
    assert "... and 3 more invalid files" in logs["process"]


def test_the_commit_log_carries_the_versions_quality_summary(
    store, lt_env: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from pipeline.datasets.quality.report import QualityReport
    from pipeline.datasets.queries import get_version

    good_lake(lt_env)
    logs = ingest(caplog)
    version = get_version("latest", "digits")
    summary = QualityReport.from_dict(version["manifest"]["quality"]).summary_line()
    assert f"dataset digits: quality: {summary}" in logs["commit digits"]

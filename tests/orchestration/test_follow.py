"""``make run``'s follow-along lines, from real run rows and real versions in a store."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
from PIL import Image

from pipeline.orchestration import follow


def png(path: Path, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8), dtype=np.uint8)
    Image.fromarray(pixels, mode="L").save(path)


def test_a_failed_run_prints_its_error_not_none_values(store) -> None:
    from pipeline.runs import get_run, record_run_finished, record_run_started

    record_run_started("train-r1", "digits", "v" * 64, {"epochs": 1}, store=store)
    record_run_finished(
        "train-r1",
        "failed",
        error="batch_size: 64 does not fit in GPU memory\nlower the batch size",
        store=store,
    )
    line = follow.run_result_line("train-r1", get_run("train-r1", store=store))
    assert line == (
        "      run train-r1: failed: batch_size: 64 does not fit in GPU memory lower the batch size"
    )
    assert "None" not in line


def test_a_run_refused_before_it_was_recorded_prints_the_task_error() -> None:
    line = follow.run_result_line(
        "train-r2", None, "resolve: train: unknown conf key(s) 'epoch' (did you mean 'epochs'?)"
    )
    assert line == (
        "      run train-r2: failed: resolve: train: unknown conf key(s) 'epoch'"
        " (did you mean 'epochs'?)"
    )
    assert "skipped" in follow.run_result_line("train-r3", None, dag_state="success")


def test_a_succeeded_run_prints_its_metric_rounded(store) -> None:
    from pipeline.runs import get_run, record_run_finished, record_run_started

    record_run_started("train-r4", "digits", "v" * 64, {"epochs": 1}, store=store)
    record_run_finished(
        "train-r4",
        "succeeded",
        best_metric=0.9817708333333334,
        metric_name="val_accuracy",
        checkpoint_url="file:///x/train-r4/step-66",
        store=store,
    )
    line = follow.run_result_line("train-r4", get_run("train-r4", store=store))
    assert line == (
        "      run train-r4: succeeded, val_accuracy=0.9818, checkpoint file:///x/train-r4/step-66"
    )
    assert follow.metric(0.012345678) == "0.01235" and follow.metric(3) == "3"


def test_each_ingest_prints_only_the_versions_not_printed_before(store, lt_env: Path) -> None:
    from pipeline.datasets.build import build

    lines: list[str] = []
    follower = follow.Follower(
        api=None, env=dict(os.environ), log=lines.append, since=datetime.now(UTC)
    )
    for i in range(4):
        png(lt_env / "lake" / "digits" / str(i % 2) / f"{i}.png", i)
    first = build("digits", workers=1)
    follower._print_versions()
    assert lines == [f"      version {first.tag}: 4 samples (+4 -0)"]
    follower._print_versions()  # an ingest that committed nothing
    assert len(lines) == 1
    png(lt_env / "lake" / "digits" / "1" / "9.png", 9)
    png(lt_env / "lake" / "other" / "a" / "1.png", 10)
    second, other = build("digits", workers=1), build("other", workers=1)
    follower._print_versions()
    assert lines[1:] == [
        f"      version {second.tag}: 5 samples (+1 -0)",
        f"      version {other.tag}: 1 samples (+1 -0)",
    ]


def test_versions_from_before_this_make_run_are_not_news(store, lt_env: Path) -> None:
    from pipeline.datasets.build import build

    for i in range(2):
        png(lt_env / "lake" / "digits" / "0" / f"{i}.png", i)
    build("digits", workers=1)
    lines: list[str] = []
    later = datetime.now(UTC) + timedelta(seconds=1)
    follow.Follower(api=None, env=dict(os.environ), log=lines.append, since=later)._print_versions()
    assert lines == []

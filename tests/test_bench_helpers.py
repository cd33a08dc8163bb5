"""The helpers every benchmark shares: the report (printed, written only when asked), the
figures table and back-dating generated files."""

from __future__ import annotations

import os
import sys
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


def test_split_walk_covers_a_tree_of_any_depth_and_fails_loudly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Files at every level, fewer folders than four per process at the top: the walk opens
    # levels until it can deal folders out, statting the files above them itself. Which
    # folders each (forked) process walked goes to a log file, appended to by all of them.
    tree = tmp_path / "tree"
    leaves = [f"{top}/{sub}" for top in "abc" for sub in "wxyz"]  # 12 folders, two down
    for d in [*leaves, "c/z/deeper"]:
        (tree / d).mkdir(parents=True)
        (tree / d / "f.bin").write_bytes(b"x")
    for top in "abc":
        (tree / top / "mid.bin").write_bytes(b"x")
    (tree / "top.bin").write_bytes(b"x")
    log = tmp_path / "walked.log"
    real = _baselines.bare_walk

    def logged(root: Path, **kw: bool) -> float:
        with open(log, "a") as fh:
            fh.write(f"{os.getpid()} {root.relative_to(tree)}\n")
        return real(root, **kw)

    monkeypatch.setattr(_baselines, "bare_walk", logged)
    for processes in (2, 3):
        log.write_text("")
        assert _baselines.bare_walk_split(tree, processes) > 0
        walked = [line.split() for line in log.read_text().splitlines()]
        # Two levels opened (3 folders, then 12 >= 4 a process): each of the 12 walked once,
        # subfolders included, dealt out over `processes` processes.
        assert sorted(folder for _pid, folder in walked) == leaves
        assert len({pid for pid, _folder in walked}) == processes
    with pytest.raises(FileNotFoundError):
        _baselines.bare_walk_split(tmp_path / "missing", 2)


_dirs_opened: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if event == "open" and isinstance(args[0], str) and args[2] & os.O_DIRECTORY:
        _dirs_opened.append(args[0])


sys.addaudithook(_audit)


def test_the_walk_by_descriptor_lists_each_folder_through_its_own(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    folders = ["a", "a/b", "a/b/c", "d"]
    for d in folders:
        (tree / d).mkdir(parents=True)
        (tree / d / "f.bin").write_bytes(b"x")
    _dirs_opened.clear()
    _baselines.bare_walk(tree)
    assert not _dirs_opened  # by path: os.scandir of each folder's name
    _baselines.bare_walk(tree, by_descriptor=True)
    opened = sorted(os.path.relpath(p, tree) for p in _dirs_opened)
    assert opened == sorted([".", *folders])
    with pytest.raises(FileNotFoundError):
        _baselines.bare_walk(tmp_path / "missing", by_descriptor=True)


def test_parallel_decode_loop_raises_when_a_process_fails(tmp_path: Path) -> None:
    from PIL import Image

    from bench.build import pillow_loop_parallel

    paths = []
    for i in range(4):
        p = tmp_path / f"{i}.jpg"
        Image.new("RGB", (120, 100), (i * 40, 0, 0)).save(p, format="JPEG")
        paths.append(p)
    assert pillow_loop_parallel(paths, 2) > 0
    paths[1].write_bytes(b"not a jpeg")  # every second file is the child's share
    with pytest.raises(RuntimeError, match="1 of 1 forked process"):
        pillow_loop_parallel(paths, 2)


def test_paired_timing_takes_turns_and_reports_per_round_ratios(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench import ui

    # A clock that only the timed functions move: "rows" costs 2 units, "chunked" 3.
    now = [0.0]
    calls: list[str] = []

    def timed(name: str, cost: float):
        def go() -> None:
            calls.append(name)
            now[0] += cost

        return go

    monkeypatch.setattr(ui.time, "perf_counter", lambda: now[0])
    ms, ratios = ui.paired_ms({"rows": timed("rows", 2), "chunked": timed("chunked", 3)}, 4)
    # One warm-up call each, then rounds in alternating order.
    assert calls == ["rows", "chunked"] + ["rows", "chunked", "chunked", "rows"] * 2
    assert ms == {"rows": 2000.0, "chunked": 3000.0}
    assert ratios == [1.5] * 4
    assert _results.quartiles([0.5, 1.0, 1.5, 2.0, 4.0]) == (0.75, 1.5, 3.0)
    assert _results.quartiles([1.2]) == (1.2, 1.2, 1.2)


def test_against_older_takes_turns_and_reports_median_ratios(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    import argparse

    from bench import build

    this, older = Path(build.__file__).resolve().parents[1], tmp_path / "older"
    calls: list[Path] = []
    walls = iter([8.0, 10.0, 10.0, 8.0, 9.0, 9.0])  # per call, in call order

    def one_full_build(tree: Path, data: Path, workers: int) -> dict:
        calls.append(tree)
        new = tree == this
        wall = next(walls)
        return {"wall": wall, "seconds": {"process": 6.0 if new else 8.0, "commit": 1.0}}

    monkeypatch.setattr(build, "_one_full_build", one_full_build)
    text = build.against_older(older, argparse.Namespace(pairs=3, workers=2))
    assert calls == [this, older, older, this, this, older]  # the order alternates
    # Per round this / older: 8/10, 8/10, 9/9.
    assert "| full build | **0.80x** (0.80-1.00) |" in text
    assert "| process phase | **0.75x** (0.75-0.75) |" in text
    assert "| commit | **1.00x** (1.00-1.00) |" in text


def test_one_full_build_builds_the_lake_with_the_given_tree(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bench import build

    monkeypatch.setattr(build, "WORK", tmp_path)
    build.make_images(tmp_path / "lake", 12, w=64, h=48)
    for p in build.make_images(tmp_path / "lake", 4, start=100, w=64, h=48):
        target = tmp_path / "lake" / "warmup" / p.relative_to(tmp_path / "lake" / "bench")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, target)
    (tmp_path / "recipes").mkdir()
    for name in ("bench", "warmup"):
        (tmp_path / "recipes" / f"{name}.toml").write_text(build.RECIPE)
    tree = Path(build.__file__).resolve().parents[1]
    got = build._one_full_build(tree, tmp_path / "data", 1)
    assert got["samples"] == 12 and got["wall"] > 0 and set(got["seconds"]) >= {"process"}
    assert not (tmp_path / "data").exists()  # each build's store goes with it
    with pytest.raises(SystemExit, match="failed"):
        build._one_full_build(tmp_path / "no-tree", tmp_path / "data", 1)


@pytest.mark.parametrize("pairs", ["0", "-1"])
def test_build_refuses_fewer_than_one_pair_before_it_builds_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], pairs: str
) -> None:
    from bench import build

    monkeypatch.setattr(build, "measure", lambda *a: pytest.fail("measured despite --pairs"))
    monkeypatch.setattr(sys, "argv", ["build.py", "--pairs", pairs, "--no-write"])
    with pytest.raises(SystemExit) as exit_:
        build.main()
    assert exit_.value.code == 2 and "--pairs must be at least 1" in capsys.readouterr().err

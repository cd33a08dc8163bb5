"""Ledger scan benchmark: cold scan, no-change rescan and +200-file rescan of 20,000 ~30 KB
files, each beside a baseline measured in the same run (MEASURED.md explains the baselines).

Targets: cold scan >= 0.65x a 2-process hashlib pool; no-change rescan <= 0.15 s;
rescan after +200 files <= 0.25 s.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import write_section  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "scan"


def make_files(root: Path, count: int, size: int, start: int = 0) -> list[Path]:
    paths = []
    rng = os.urandom(size + count)  # shared random pool; each file gets a distinct window
    for i in range(start, start + count):
        p = root / "ds" / f"{i % 100:02d}" / f"f{i:06d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(i.to_bytes(8, "little") + rng[i - start : i - start + size - 8])
        paths.append(p)
    old = time.time() - 3600
    for p in paths:
        os.utime(p, (old, old))
    return paths


def md5_path(p: str) -> str:
    h = hashlib.md5()
    with open(p, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def hashlib_loop(paths: list[str]) -> float:
    t = time.perf_counter()
    for p in paths:
        md5_path(p)
    return time.perf_counter() - t


def hashlib_pool(paths: list[str], workers: int = 2) -> float:
    t = time.perf_counter()
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(md5_path, paths, chunksize=256))
    return time.perf_counter() - t


def bare_walk(root: Path) -> float:
    t = time.perf_counter()
    stack = [str(root)]
    n = 0
    while stack:
        for e in os.scandir(stack.pop()):
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            else:
                e.stat(follow_symlinks=False)
                n += 1
    return time.perf_counter() - t


def timed_scan(lake: Path, store, workers: int):
    from pipeline.lake.scan import scan

    t = time.perf_counter()
    result = scan(lake, store=store, workers=workers, settle_seconds=0)
    return time.perf_counter() - t, result


def median_of(fn, repeat: int) -> float:
    return statistics.median(fn() for _ in range(repeat))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=30_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()

    from pipeline.metadata.store import MetadataStore

    shutil.rmtree(WORK, ignore_errors=True)
    lake = WORK / "lake"
    paths = [str(p) for p in make_files(lake, args.files, args.size)]
    total_mb = args.files * args.size / 1e6

    hashlib_loop(paths)  # warm the page cache so every contender reads from memory
    loop_s = hashlib_loop(paths)
    pool_s = hashlib_pool(paths)
    store = MetadataStore(f"sqlite:///{WORK / 'metadata.db'}")
    cold_s, cold = timed_scan(lake, store, args.workers)
    assert len(cold.new) == args.files, "cold scan must record every file"

    walk_s = median_of(lambda: bare_walk(lake), 5)
    rescans = []
    for _ in range(5):
        s, r = timed_scan(lake, store, args.workers)
        assert r.unchanged == args.files and not r.has_content_changes
        rescans.append(s)
    rescan_s = statistics.median(rescans)

    make_files(lake, 200, args.size, start=args.files)
    plus_s, plus = timed_scan(lake, store, args.workers)
    assert len(plus.new) == 200

    dvc_lines = []
    if shutil.which("dvc"):
        dvc_lines = run_dvc(lake)

    rows = [
        (
            "cold scan (empty ledger)",
            f"{args.files / cold_s:,.0f} files/s ({total_mb / cold_s:,.0f} MB/s)",
        ),
        ("baseline: hashlib loop, 1 process", f"{args.files / loop_s:,.0f} files/s"),
        ("baseline: hashlib pool, 2 processes", f"{args.files / pool_s:,.0f} files/s"),
        ("cold scan / 2-process pool", f"{pool_s / cold_s:.2f}x (target >= 0.65x)"),
        ("cold scan / hashlib loop", f"{loop_s / cold_s:.2f}x"),
        ("no-change rescan", f"{rescan_s * 1000:.0f} ms (target <= 150 ms)"),
        ("baseline: bare os.scandir + stat walk", f"{walk_s * 1000:.0f} ms"),
        ("no-change rescan / bare walk", f"{rescan_s / walk_s:.1f}x the walk"),
        ("rescan after +200 files", f"{plus_s * 1000:.0f} ms (target <= 250 ms)"),
        *dvc_lines,
    ]
    body = f"{args.files:,} files of {args.size:,} bytes, {args.workers} hash workers, SQLite ledger.\n\n"
    body += "| measure | figure |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    print(body)
    if not args.no_write:
        write_section("bench/scan.py", body)


def run_dvc(lake: Path) -> list[tuple[str, str]]:
    repo = WORK / "dvc"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(lake, repo / "data")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=repo, check=True)
    t = time.perf_counter()
    subprocess.run(["dvc", "add", "-q", "data"], cwd=repo, check=True)
    add_s = time.perf_counter() - t
    t = time.perf_counter()
    subprocess.run(["dvc", "status", "-q"], cwd=repo)
    status_s = time.perf_counter() - t
    return [("dvc add (cold)", f"{add_s:.2f} s"), ("dvc status (no change)", f"{status_s:.2f} s")]


if __name__ == "__main__":
    main()

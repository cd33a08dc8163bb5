"""Ledger scan benchmark: cold scan, no-change rescan and +200-file rescan of 20,000 ~30 KB
files, each beside a baseline measured in the same run (MEASURED.md explains the baselines);
then `laketrain scan` of the unchanged files as a whole process, beside `dvc status` on a copy
of the same files when dvc is installed (``--dvc PATH``, or `dvc` on PATH), and beside the same
command run from an older checkout when one is given (``--against DIR``, e.g. the tree of
``git archive <commit> | tar -x -C DIR``), pair by pair, so a start-up change has a ratio.

Targets: cold scan >= 0.65x a 2-process hashlib pool; no-change rescan <= 0.15 s;
rescan after +200 files <= 0.25 s; the whole `laketrain scan` process <= 0.3 s.

``--million``: a 1,000,000-file lake (1,000 folders of 64-byte files, under bench/_work,
deleted afterwards unless ``--keep``): no-change rescan <= 2.5x a bare os.scandir + stat walk,
peak RSS no higher than before (717 MB). Each step runs in a process of its own so that its
peak RSS is its own. It takes minutes.
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
from bench._baselines import backdate, bare_walk  # noqa: E402
from bench._results import figures_table, report, write_section  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "scan"


def make_files(root: Path, count: int, size: int, start: int = 0) -> list[Path]:
    paths = []
    rng = os.urandom(size + count)  # shared random pool; each file gets a distinct window
    for i in range(start, start + count):
        p = root / "ds" / f"{i % 100:02d}" / f"f{i:06d}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(i.to_bytes(8, "little") + rng[i - start : i - start + size - 8])
        paths.append(p)
    backdate(paths)
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
    ap.add_argument("--cli-runs", type=int, default=25, help="whole-process runs per command")
    ap.add_argument("--dvc", default=shutil.which("dvc"), help="a dvc executable to compare")
    ap.add_argument(
        "--against", help="an older checkout: its `laketrain scan` interleaved with this one's"
    )
    ap.add_argument("--million", action="store_true", help="the 1,000,000-file lake instead")
    ap.add_argument("--million-files", type=int, default=1_000_000)
    ap.add_argument("--keep", action="store_true", help="keep the million-file lake")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--lake", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.dvc and os.path.exists(args.dvc):
        args.dvc = os.path.abspath(args.dvc)  # dvc runs in its own repo folder
    if args.child:
        return child(args.child, Path(args.lake), args.workers)
    if args.million:
        from bench.scan_million import run_million

        return run_million(args, write_section)

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

    cli_lines = whole_process(lake, args)

    make_files(lake, 200, args.size, start=args.files)
    plus_s, plus = timed_scan(lake, store, args.workers)
    assert len(plus.new) == 200

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
        *cli_lines,
    ]
    body = f"{args.files:,} files of {args.size:,} bytes, {args.workers} hash workers, SQLite ledger.\n\n"
    body += figures_table(rows)
    body += (
        "\n\nWhole process: `python -m pipeline.cli scan` from exec to exit (imports, settings, "
        "the migration check, the scan, the table); wall time, and CPU time (user + system, "
        "from wait4), medians of the runs. Each round runs, one after the other, the scan, a "
        "bare os.scandir + stat walk of the same tree as a `python -c` process, the scan with "
        "this environment's bytecode setting, `python -c pass`, and, when given, the older "
        "checkout's scan and `dvc status` on a copy of the same files; ratios are medians "
        "of the per-round ratios. Bytecode is cached under bench/_work (PYTHONPYCACHEPREFIX), "
        "as an installed laketrain has it; the baselines run the same way. The entry runs a "
        "plain `scan` line without typer, click or pydantic, and off a terminal writes the "
        "table without rich; a SQLite store at head is scanned without SQLAlchemy or Alembic "
        "(docs/scan.md). The in-process rescans above go through a MetadataStore handle "
        "(SQLAlchemy session). The machine is shared with other work: absolute times drift "
        "with its load; compare ratios measured in the same run."
    )
    report("bench/scan.py", body, write=not args.no_write)


def cli_env(lake: Path) -> dict[str, str]:
    return {
        **os.environ,
        "LAKE_DIR": str(lake),
        "DATA_ROOT": str(WORK / "data"),
        "METADATA_DB_URL": f"sqlite:///{WORK / 'metadata.db'}",
        "SETTLE_SECONDS": "0",
    }


def cached_bytecode(env: dict[str, str]) -> dict[str, str]:
    """``env`` with Python's bytecode cached under bench/_work, as an installed laketrain has
    it (pip compiles modules at install). Without it, an environment that sets
    PYTHONDONTWRITEBYTECODE (this machine's does) compiles every project module at each start."""
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = str(WORK / "pycache")
    return out


# The bare walk as a process of its own: interpreter start-up plus what any rescan must do.
BARE_WALK = """import os, sys
stack = [sys.argv[1]]
while stack:
    with os.scandir(stack.pop()) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            else:
                e.stat(follow_symlinks=False)
"""


def run_once(cmd: list[str], *, cwd: Path | None = None, env=None) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process from start to exit."""
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[:3]} exited with {proc.returncode}")
    return wall, usage.ru_utime + usage.ru_stime


def whole_process(lake: Path, args: argparse.Namespace) -> list[tuple[str, str]]:
    """`laketrain scan` of the unchanged lake from process start to exit (median of
    ``--cli-runs``), interleaved run by run with a bare os.scandir + stat walk of the same
    tree as a process of its own, with the same scan in this environment as it is (bytecode
    not cached), with `dvc status` on a copy of the same files and with the older checkout's
    `laketrain scan` (``--against``). The ratio to the bare-walk process is taken pair by
    pair: the machine is shared, and a load that slows one slows the other."""
    scan_cmd = [sys.executable, "-m", "pipeline.cli", "scan"]
    walk_cmd = [sys.executable, "-c", BARE_WALK, str(lake)]
    pass_cmd = [sys.executable, "-c", "pass"]
    here = Path(__file__).resolve().parents[1]
    plain_env = cli_env(lake)
    env = cached_bytecode(plain_env)
    repo, dvc_cold = prepare_dvc(lake, args.dvc) if args.dvc else (None, 0.0)
    older = Path(args.against).resolve() if args.against else None
    for tree in (here, older) if older is not None else (here,):  # warm-up, and a check
        done = subprocess.run(scan_cmd, cwd=tree, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit(f"`laketrain scan` in {tree} failed: {done.stderr.strip()}")
    run_once(walk_cmd, env=env)  # its bytecode cache too
    run_once(pass_cmd, env=env)
    runs: dict[str, list[tuple[float, float]]] = {
        k: [] for k in ("ours", "plain", "walk", "pass", "before", "dvc")
    }
    load = os.getloadavg()[0]
    for _ in range(args.cli_runs):
        runs["ours"].append(run_once(scan_cmd, cwd=here, env=env))
        runs["walk"].append(run_once(walk_cmd, env=env))
        runs["plain"].append(run_once(scan_cmd, cwd=here, env=plain_env))
        runs["pass"].append(run_once(pass_cmd, env=env))
        if older is not None:
            runs["before"].append(run_once(scan_cmd, cwd=older, env=env))
        if repo is not None:
            runs["dvc"].append(run_once([args.dvc, "status", "-q"], cwd=repo))
    load = (load + os.getloadavg()[0]) / 2

    def wall(key: str) -> float:
        return statistics.median(w for w, _ in runs[key])

    def cpu(key: str) -> float:
        return statistics.median(c for _, c in runs[key])

    def pairs(key: str, at: int = 0) -> float:
        return statistics.median(
            a[at] / b[at] for a, b in zip(runs["ours"], runs[key], strict=True)
        )

    n = len(runs["ours"])
    rows = [
        (
            "**`laketrain scan`, unchanged, whole process**",
            f"**{wall('ours'):.3f} s** wall, median of {n} (target <= 0.3 s); "
            f"CPU {cpu('ours'):.3f} s",
        ),
        (
            "baseline: bare os.scandir + stat walk of the same tree, as a process",
            f"{wall('walk'):.3f} s wall; CPU {cpu('walk'):.3f} s",
        ),
        (
            "**`laketrain scan` / bare-walk process**",
            f"**{pairs('walk'):.2f}x** wall, {pairs('walk', 1):.2f}x CPU (pairwise medians)",
        ),
        (
            "baseline: `python -c pass` (interpreter start-up)",
            f"{wall('pass'):.3f} s wall; CPU {cpu('pass'):.3f} s",
        ),
        (
            "`laketrain scan`, bytecode not cached (this environment as it is)",
            f"{wall('plain'):.3f} s wall; CPU {cpu('plain'):.3f} s",
        ),
        (
            "the machine's load during these runs (2 cores)",
            f"load average {load:.1f}; the bare walk's wall / CPU {wall('walk') / cpu('walk'):.2f}"
            " (1.00: no run waited for a core)",
        ),
    ]
    if older is not None:
        rows += [
            (
                "baseline: the older checkout's `laketrain scan`",
                f"{wall('before'):.3f} s wall; CPU {cpu('before'):.3f} s",
            ),
            (
                "`laketrain scan` / the older checkout's",
                f"{pairs('before'):.2f}x wall, {pairs('before', 1):.2f}x CPU (pairwise medians)",
            ),
        ]
    if repo is None:
        rows.append(("`dvc status`, same files", "not measured: dvc is not installed (--dvc PATH)"))
        return rows
    rows += [
        ("`dvc status`, same files, no change, whole process", f"{wall('dvc'):.3f} s"),
        ("`laketrain scan` / `dvc status`", f"{pairs('dvc'):.2f}x (pairwise median)"),
        ("`dvc add` of the same files, cold (for contrast)", f"{dvc_cold:.2f} s"),
    ]
    return rows


def prepare_dvc(lake: Path, dvc: str) -> tuple[Path, float]:
    repo = WORK / "dvc"
    shutil.rmtree(repo, ignore_errors=True)
    shutil.copytree(lake, repo / "data")
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([dvc, "init", "-q"], cwd=repo, check=True)
    t = time.perf_counter()
    subprocess.run([dvc, "add", "-q", "data"], cwd=repo, check=True)
    return repo, time.perf_counter() - t


def child(op: str, lake: Path, workers: int) -> None:
    """One step of --million in a process of its own: prints seconds and peak RSS (MB)."""
    import json
    import resource

    if op == "walk":
        seconds, extra = bare_walk(lake), {}
    else:
        from pipeline.lake.scan import scan

        t = time.perf_counter()
        result = scan(lake, workers=workers, settle_seconds=0)
        seconds, extra = time.perf_counter() - t, result.summary()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # The largest of the processes it forked and reaped: the walk's shares, the hash pool.
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        json.dumps(
            {"seconds": seconds, "rss_mb": rss, "children_rss_mb": children, "summary": extra}
        )
    )


if __name__ == "__main__":
    main()

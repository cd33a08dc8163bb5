"""Dataset build benchmark: the full build of N JPEG images (default 5,000; median of three,
each on a fresh store) against the incremental build after adding 1 % more (median of three),
plus a no-change rebuild. Baselines measured in the same run: a plain Pillow decode loop over
the same files (what any build must at least pay), in one process and split over the worker
count (the ceiling of the machine's cores).

Targets (issue 12, benchmarks 1 and 5): incremental build <= 3 % of the full build time, and
full-build throughput >= 1.7x the one-process Pillow loop's, at both sizes. The build decodes in
a process pool: the CPU time of its workers over the process phase's wall time says how many
cores it kept busy.

Run at two source sizes (``--sizes``), both built with a 96x96 RGB recipe (center_crop), in 10
class folders, SQLite store under bench/_work/build: 320x240 crops (small thumbnails, where the
per-file bookkeeping weighs most) and 1024x768 crops (a common photo size; still small for a
camera). The pixels are real photo content (scikit-learn's sample photos, tiled with mirrors
where the crop is larger than a photo), q90, with a distinct corner stamp per file.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._baselines import backdate, in_processes  # noqa: E402
from bench._results import quartiles, report  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "build"
RECIPE = 'modality = "image"\n[image]\nsize = 96\nchannels = 3\nresize = "center_crop"\n[split]\nval_fraction = 0.2\n'


def _canvas(w: int, h: int):
    """The sample photos side by side, mirrored and tiled until the canvas holds a w x h crop
    with room to move: real photo texture at its native resolution (upscaling would make the
    files smoother, smaller and cheaper to decode than real photos of that size)."""
    import numpy as np
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    ph = min(p.shape[0] for p in photos)
    strip = np.concatenate([p[:ph] for p in photos], axis=1)
    reps_y = -(-(h + 64) // ph)
    reps_x = -(-(w + 64) // strip.shape[1])
    rows = [strip if i % 2 == 0 else strip[::-1] for i in range(reps_y)]
    tile = np.concatenate(rows, axis=0)
    return np.concatenate([tile if i % 2 == 0 else tile[:, ::-1] for i in range(reps_x)], axis=1)


def make_images(
    lake: Path, count: int, start: int = 0, *, classes: int = 10, w: int = 320, h: int = 240
) -> list[Path]:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    big = None if all(p.shape[0] > h and p.shape[1] > w for p in photos) else _canvas(w, h)
    paths = []
    for i in range(start, start + count):
        rng = np.random.default_rng(i)
        photo = photos[i % len(photos)] if big is None else big
        y = int(rng.integers(0, photo.shape[0] - h))
        x = int(rng.integers(0, photo.shape[1] - w))
        crop = photo[y : y + h, x : x + w].copy()
        crop[:8, :8] = [i % 256, (i // 256) % 256, 255]  # distinct content per file
        p = lake / "bench" / f"c{i % classes}" / f"img{i:06d}.jpg"
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".part")
        Image.fromarray(crop).save(tmp, format="JPEG", quality=90)
        os.replace(tmp, p)
        paths.append(p)
    backdate(paths)
    return paths


def setup_env(work: Path, recipe: str | None = RECIPE) -> None:
    """Point the settings at ``work`` (lake, data, SQLite store); with ``recipe``, write it as
    the `bench` dataset's."""
    os.environ.update(
        {
            "LAKETRAIN_HOME": str(work),
            "LAKE_DIR": str(work / "lake"),
            "DATA_ROOT": str(work / "data"),
            "METADATA_DB_URL": f"sqlite:///{work / 'data' / 'metadata.db'}",
            "SETTLE_SECONDS": "0",
        }
    )
    (work / "recipes").mkdir(parents=True, exist_ok=True)
    if recipe is not None:
        (work / "recipes" / "bench.toml").write_text(recipe)


def pillow_loop(paths: list[Path]) -> float:
    """Baseline: decode + resize every file once with Pillow (draft mode, like the build)."""
    from PIL import Image

    t = time.perf_counter()
    for p in paths:
        with Image.open(p) as img:
            img.draft("RGB", (96, 96))
            img.convert("RGB").resize((96, 96))
    return time.perf_counter() - t


def pillow_loop_parallel(paths: list[Path], processes: int) -> float:
    """The same loop split over ``processes`` forked processes (every ``processes``-th file
    each): what the machine's cores can decode at most, the ceiling of any build's decode."""
    if processes < 2:
        return pillow_loop(paths)
    t = time.perf_counter()
    in_processes(lambda k: pillow_loop(paths[k::processes]), processes)
    return time.perf_counter() - t


def use_store(data: Path) -> None:
    """Point the settings at a fresh DATA_ROOT and store, then build the tiny warm-up dataset
    there, so that one-time costs of a fresh process or store (imports, Pillow's plugin
    registry, migrations, SQLAlchemy statement caches) count in no measured build: an ingest
    worker is a long-running process."""
    from pipeline.datasets.build import run_build
    from pipeline.metadata.store import forget_store
    from pipeline.settings import get_settings

    url = f"sqlite:///{data / 'metadata.db'}"
    forget_store(url)  # an earlier size's store at this path was deleted with its folder
    os.environ["DATA_ROOT"] = str(data)
    os.environ["METADATA_DB_URL"] = url
    get_settings.cache_clear()
    run_build("warmup", workers=1)


def _cpu() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed_build(workers: int):
    """(wall seconds, report); the report gets ``cores``: CPU seconds of this process and its
    (reaped) workers over the build's wall time."""
    from pipeline.datasets.build import run_build

    cpu = _cpu()
    t = time.perf_counter()
    report = run_build("bench", workers=workers)
    wall = time.perf_counter() - t
    report.cores = (_cpu() - cpu) / wall
    return wall, report


def measure(w: int, h: int, args: argparse.Namespace) -> tuple[str, float]:
    """One source size: the full builds, the no-change rebuild and three 1 % increments.
    Returns the markdown block and the incremental / full ratio."""
    shutil.rmtree(WORK, ignore_errors=True)
    setup_env(WORK)
    paths = make_images(WORK / "lake", args.images, w=w, h=h)
    extra = max(1, args.images // 100)
    mb = sum(p.stat().st_size for p in paths) / 1e6

    pillow_loop(paths)  # warm the page cache for every contender
    base_s = pillow_loop(paths)
    par_s = pillow_loop_parallel(paths, args.workers)

    # A separate tiny dataset for the warm-up builds (use_store).
    (WORK / "recipes" / "warmup.toml").write_text(RECIPE)
    for p in make_images(WORK / "lake", 20, start=10_000_000):
        target = WORK / "lake" / "warmup" / p.relative_to(WORK / "lake" / "bench")
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(p, target)
    # Full builds, median of three: each on a fresh store and DATA_ROOT (a second build on the
    # same store would decode nothing); the last one's store is the one the increments grow.
    fulls = []
    for k in range(args.full_runs):
        data = WORK / ("data" if k == args.full_runs - 1 else f"data-full{k}")
        use_store(data)
        fulls.append(timed_build(args.workers))
        assert fulls[-1][1].version is not None and fulls[-1][1].version.samples == args.images, (
            fulls[-1][1].to_dict()
        )
        if data.name != "data":
            shutil.rmtree(data)
    full_s = sorted(t for t, _ in fulls)[len(fulls) // 2]
    full = next(r for t, r in fulls if t == full_s)
    none_s, none = timed_build(args.workers)
    assert none.version is None and none.decoded == 0
    # Three increments of 1 % each (the dataset grows 3 %; negligible), median reported:
    # this machine is shared and noisy.
    incs = []
    for k in range(3):
        make_images(WORK / "lake", extra, start=args.images + k * extra, w=w, h=h)
        inc_s, inc = timed_build(args.workers)
        assert inc.decoded == extra and inc.version.added == extra, inc.to_dict()
        incs.append((inc_s, inc))
    inc_all = ", ".join(f"{t * 1000:.0f}" for t, _ in incs)
    incs.sort(key=lambda t: t[0])
    inc_s, inc = incs[1]
    phases = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in inc.seconds.items())
    full_phases = ", ".join(f"{k} {v:.2f} s" for k, v in full.seconds.items())

    ratio = inc_s / full_s
    # The most a build of these files could reach here: its own scan, plan and commit (it
    # cannot decode before the plan, nor publish before the decode) plus a decode as fast as
    # the parallel loop, with nothing else per file (no md5, segment write or quality hash).
    fixed_s = full.seconds["scan"] + full.seconds["plan"] + full.seconds["commit"]
    bound = base_s / (par_s + fixed_s)
    # What any incremental build pays at this speed: the new files' decode (at the full
    # build's per-file rate) plus the per-file bookkeeping of a self-contained version.
    decode_s = full.seconds["process"] / args.images * extra
    book_s = inc.seconds["scan"] + inc.seconds["plan"] + inc.seconds["commit"]
    samples = inc.version.samples
    rows = [
        (
            f"full build (scan + decode + publish), median of {args.full_runs}",
            f"{full_s:.2f} s ({args.images / full_s:,.0f} images/s): {full_phases}; all runs "
            + ", ".join(f"{t:.2f}" for t, _ in fulls)
            + " s",
        ),
        (
            "baseline: Pillow decode loop (draft + resize), 1 process",
            f"{base_s:.2f} s ({args.images / base_s:,.0f} images/s)",
        ),
        (
            f"baseline: the same loop in {args.workers} processes (the machine's ceiling)",
            f"{par_s:.2f} s = {base_s / par_s:.2f}x the 1-process loop",
        ),
        (
            "bound: the build's scan + plan + commit with a decode at the parallel loop's speed",
            f"{par_s + fixed_s:.2f} s = {bound:.2f}x the 1-process loop",
        ),
        (
            "**full build / Pillow loop** (target >= 1.7x)",
            f"**{base_s / full_s:.2f}x** the loop's throughput "
            f"{'MET' if base_s / full_s >= 1.7 else 'MISSED'}; cores kept busy over the whole "
            f"build: {full.cores:.2f} of {os.cpu_count()}",
        ),
        (
            f"incremental build (+{extra} files, 1 %), median of 3",
            f"{inc_s * 1000:.0f} ms, {inc.decoded} decoded: {phases}; all runs {inc_all} ms",
        ),
        (
            "**incremental / full**",
            f"**{ratio * 100:.2f} %** (target <= 3 %) {'MET' if ratio <= 0.03 else 'MISSED'}",
        ),
        ("no-change rebuild", f"{none_s * 1000:.0f} ms, {none.decoded} decoded, no version"),
        (
            "per file: decode + segment write (full build, process phase, wall)",
            f"{full.seconds['process'] / args.images * 1e6:.0f} µs",
        ),
        (
            f"per sample: scan + plan + commit bookkeeping (incremental build, {samples:,} samples)",
            f"{book_s / samples * 1e6:.1f} µs (scan {inc.seconds['scan'] / samples * 1e6:.1f}, "
            f"commit {inc.seconds['commit'] / samples * 1e6:.1f}) = {book_s / full_s * 100:.2f} % of the full build",
        ),
        (
            f"the {extra} new files' decode at the full build's rate",
            f"{decode_s * 1000:.0f} ms = {decode_s / full_s * 100:.2f} % of the full build",
        ),
    ]
    block = (
        f"**{w}x{h} sources** ({mb / args.images * 1000:.0f} KB per file on average, {mb:,.0f} MB "
        f"in all), {args.workers} worker processes:\n\n"
        + "| measure | figure |\n|---|---|\n"
        + "\n".join(f"| {a} | {b} |" for a, b in rows)
        + "\n"
    )
    # What the target leaves for the O(files) bookkeeping once the new files are decoded.
    budget_us = max(0.0, 0.03 * full_s - decode_s) / samples * 1e6
    block += (
        f"\nAt this size the target leaves {budget_us:.1f} µs of bookkeeping per sample "
        f"(3 % of the full build, less the new files' decode); the build spends "
        f"{book_s / samples * 1e6:.1f}, of which the scan alone (stat every file, "
        f"compare with the ledger) takes {inc.seconds['scan'] / samples * 1e6:.1f}.\n"
    )
    if args.against:
        block += "\n" + against_older(Path(args.against), args)
    print(block, flush=True)
    return block, ratio, base_s / full_s


def _one_full_build(tree: Path, data: Path, workers: int) -> dict:
    """A full build of the lake by ``tree``'s pipeline, in a process of its own, on a fresh
    DATA_ROOT (bench/_full_build_once.py)."""
    shutil.rmtree(data, ignore_errors=True)
    helper = Path(__file__).resolve().parent / "_full_build_once.py"
    command = [sys.executable, str(helper), "--tree", str(tree), "--work", str(WORK)]
    command += ["--data", str(data), "--workers", str(workers)]
    try:
        done = subprocess.run(command, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"a full build by {tree} failed:\n{exc.stderr[-2000:]}") from None
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def against_older(older: Path, args: argparse.Namespace) -> str:
    """Full builds of the same lake by this checkout and by ``older``, in turns (the order
    alternating each round), each in a fresh process on a fresh store: the machine's load moves
    both alike, so the median of the per-round ratios says what a change did, where the
    absolute figures of runs minutes apart cannot."""
    this = Path(__file__).resolve().parents[1]
    ratios: dict[str, list[float]] = {"wall": [], "process": [], "commit": []}
    for k in range(args.pairs):
        trees = [this, older] if k % 2 == 0 else [older, this]
        got = {tree: _one_full_build(tree, WORK / "data-against", args.workers) for tree in trees}
        new, old = got[this], got[older]
        ratios["wall"].append(new["wall"] / old["wall"])
        for phase in ("process", "commit"):
            ratios[phase].append(new["seconds"][phase] / old["seconds"][phase])
    lines = [
        f"Against an older checkout (`--against {older.name}`), {args.pairs} rounds of one "
        "full build each, in turns, each in a fresh process on a fresh store (this / older; "
        "median, quartiles):\n",
        "| measure | this / older |",
        "|---|---|",
    ]
    for name, label in (("wall", "full build"), ("process", "process phase"), ("commit", "commit")):
        q1, q2, q3 = quartiles(ratios[name])
        lines.append(f"| {label} | **{q2:.2f}x** ({q1:.2f}-{q3:.2f}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--sizes",
        default="320x240,1024x768",
        help="source JPEG sizes to measure, WxH, comma-separated",
    )
    ap.add_argument(
        "--full-runs",
        type=int,
        default=3,
        help="full builds, each on a fresh store; the median is reported",
    )
    ap.add_argument(
        "--against",
        help="an older checkout: its full builds of the same lake interleaved with this one's",
    )
    ap.add_argument("--pairs", type=int, default=5, help="rounds of --against")
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()
    if args.pairs < 1:
        ap.error("--pairs must be at least 1")
    if args.against and not (Path(args.against) / "pipeline").is_dir():
        ap.error(f"--against {args.against}: no pipeline package there")
    sizes = [tuple(int(v) for v in size.lower().split("x")) for size in args.sizes.split(",")]

    measured = [measure(w, h, args) for w, h in sizes]
    blocks = [block for block, _, _ in measured]
    missed = [
        f"{w}x{h} (incremental)"
        for (w, h), (_, ratio, _) in zip(sizes, measured, strict=True)
        if ratio > 0.03
    ] + [
        f"{w}x{h} (throughput)"
        for (w, h), (_, _, speed) in zip(sizes, measured, strict=True)
        if speed < 1.7
    ]
    body = (
        f"{args.images:,} JPEG images (q90 crops of real photos) → a 96x96 RGB npy version, "
        "SQLite store; the target applies to each source size.\n\n" + "\n".join(blocks)
    )
    body += (
        (f"\nMissed at {', '.join(missed)}. " if missed else "\nMet at every size measured. ")
        + "A version is a chunk tree (issue 12), and an incremental build is a delta commit: it "
        "reads the ledger's change set since the head, re-cuts only the head leaves the changed "
        "paths fall in, sums the other leaves' stored summaries for the counts and mean/std, and "
        "computes version_id in numpy from the leaves' codes (the reused ones sliced from the "
        "head's digest); a no-change rebuild stops at the change set. What an incremental build "
        "still costs: the scan (a stat of every file), the decode of the new files, the "
        "near-duplicate index's lookup, every leaf's summary and version_id's sort over every "
        "sample, and the commit's fixed cost (store transaction, file syncs, manifest). The "
        "full build costs the decode of every file, spread over "
        "the worker processes. A one-shard increment is decoded in threads (hashlib and Pillow "
        "release the GIL). The machine is shared with other jobs: the cores-busy figure says how "
        "much of its two cores the build got. The bound row is what the build would reach "
        "with nothing per file but the decode, run as fast as the parallel loop, and its own "
        "scan, plan and commit: where it is below 1.7x, no per-file saving meets the throughput "
        "target on this machine.\n"
    )
    report("bench/build.py", body, write=not args.no_write)


if __name__ == "__main__":
    main()

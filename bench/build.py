"""Dataset build benchmark: the full build of N JPEG images (default 5,000; median of three,
each on a fresh store) against the incremental build after adding 1 % more (median of three),
plus a no-change rebuild. Baseline measured in the same run: a plain Pillow decode loop over
the same files (what any build must at least pay).

Target: incremental build <= 3 % of the full build time.

Images are 320x240 crops of scikit-learn's sample photos (real JPEG content, q90), in 10
class folders, built with a 96x96 RGB recipe (center_crop); the store is SQLite under bench/_work/build.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import write_section  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "build"
RECIPE = 'modality = "image"\n[image]\nsize = 96\nchannels = 3\nresize = "center_crop"\n[split]\nval_fraction = 0.2\n'


def make_images(
    lake: Path, count: int, start: int = 0, *, classes: int = 10, w: int = 320, h: int = 240
) -> list[Path]:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_sample_images

    photos = load_sample_images().images
    paths = []
    for i in range(start, start + count):
        rng = np.random.default_rng(i)
        photo = photos[i % len(photos)]
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
    old = time.time() - 3600
    for p in paths:
        os.utime(p, (old, old))
    return paths


def setup_env(work: Path) -> None:
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
    (work / "recipes" / "bench.toml").write_text(RECIPE)


def pillow_loop(paths: list[Path]) -> float:
    """Baseline: decode + resize every file once with Pillow (draft mode, like the build)."""
    from PIL import Image

    t = time.perf_counter()
    for p in paths:
        with Image.open(p) as img:
            img.draft("RGB", (64, 64))
            img.convert("RGB").resize((64, 64))
    return time.perf_counter() - t


def use_store(data: Path) -> None:
    """Point the settings at a fresh DATA_ROOT and store, then build the tiny warm-up dataset
    there, so that one-time costs of a fresh process or store (imports, Pillow's plugin
    registry, migrations, SQLAlchemy statement caches) count in no measured build: an ingest
    worker is a long-running process."""
    from pipeline.datasets.build import run_build
    from pipeline.settings import get_settings

    os.environ["DATA_ROOT"] = str(data)
    os.environ["METADATA_DB_URL"] = f"sqlite:///{data / 'metadata.db'}"
    get_settings.cache_clear()
    run_build("warmup", workers=1)


def timed_build(workers: int):
    from pipeline.datasets.build import run_build

    t = time.perf_counter()
    report = run_build("bench", workers=workers)
    return time.perf_counter() - t, report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    ap.add_argument(
        "--full-runs",
        type=int,
        default=3,
        help="full builds, each on a fresh store; the median is reported",
    )
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()

    shutil.rmtree(WORK, ignore_errors=True)
    setup_env(WORK)
    paths = make_images(WORK / "lake", args.images)
    extra = max(1, args.images // 100)

    pillow_loop(paths)  # warm the page cache for every contender
    base_s = pillow_loop(paths)

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
        make_images(WORK / "lake", extra, start=args.images + k * extra)
        inc_s, inc = timed_build(args.workers)
        assert inc.decoded == extra and inc.version.added == extra, inc.to_dict()
        incs.append((inc_s, inc))
    inc_all = ", ".join(f"{t * 1000:.0f}" for t, _ in incs)
    incs.sort(key=lambda t: t[0])
    inc_s, inc = incs[1]
    phases = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in inc.seconds.items())
    full_phases = ", ".join(f"{k} {v:.2f} s" for k, v in full.seconds.items())

    ratio = inc_s / full_s
    # What any incremental build pays at this speed: the new files' decode (at the full
    # build's per-file rate) plus the per-file bookkeeping of a self-contained version.
    decode_s = full.seconds["process"] / args.images * extra
    book_s = inc.seconds["scan"] + inc.seconds["plan"] + inc.seconds["commit"]
    rows = [
        (
            f"full build (scan + decode + publish), median of {args.full_runs}",
            f"{full_s:.2f} s ({args.images / full_s:,.0f} images/s): {full_phases}; all runs "
            + ", ".join(f"{t:.2f}" for t, _ in fulls)
            + " s",
        ),
        (
            "baseline: Pillow decode loop, 1 process",
            f"{base_s:.2f} s ({args.images / base_s:,.0f} images/s)",
        ),
        ("full build / Pillow loop", f"{base_s / full_s:.2f}x the loop's throughput"),
        (
            f"incremental build (+{extra} files, 1 %), median of 3",
            f"{inc_s * 1000:.0f} ms, {inc.decoded} decoded: {phases}; all runs {inc_all} ms",
        ),
        (
            "incremental / full",
            f"{ratio * 100:.2f} % (target <= 3 %) {'OK' if ratio <= 0.03 else 'MISSED'}",
        ),
        ("no-change rebuild", f"{none_s * 1000:.0f} ms, {none.decoded} decoded, no version"),
        (
            "per sample: decode + segment write (full build, process phase)",
            f"{full.seconds['process'] / args.images * 1e6:.0f} µs wall",
        ),
        (
            "per sample: scan + commit bookkeeping (incremental build)",
            f"{(inc.seconds['scan'] + inc.seconds['commit']) / inc.version.samples * 1e6:.0f} µs wall",
        ),
        (
            f"floor part 1: decoding the {extra} new files at the full build's rate",
            f"{decode_s * 1000:.0f} ms = {decode_s / full_s * 100:.2f} % of the full build",
        ),
        (
            f"floor part 2: O(files) bookkeeping of the incremental build (scan + plan + commit, {inc.version.samples:,} samples)",
            f"{book_s * 1000:.0f} ms = {book_s / full_s * 100:.2f} % of the full build",
        ),
    ]
    body = (
        f"{args.images:,} JPEG images (320x240 photo crops, q90) → 96x96 RGB npy version, "
        f"{args.workers} worker processes, SQLite store.\n\n"
    )
    body += "| measure | figure |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
    body += (
        "\n\nEvery build stats every file and writes a self-contained version (one metadata line, "
        "one index entry and one `version_samples` row per sample), so an incremental build "
        "costs O(files) bookkeeping plus O(new files) decoding. The ratio is the bookkeeping "
        "per sample over the decode cost per sample: the larger the source images, the smaller it is. "
        f"Here the bookkeeping alone is {book_s / inc.version.samples * 1e6:.1f} µs per sample (commit "
        f"{inc.seconds['commit'] / inc.version.samples * 1e6:.1f}) "
        f"against {full.seconds['process'] / args.images * 1e6:.0f} µs of decode per sample in the full build, "
        f"so at these costs 1 % new files cannot take less than {(decode_s + book_s) / full_s * 100:.1f} % of the "
        f"full build; 3 % would need the whole bookkeeping under "
        f"{max(0.0, 0.03 * full_s - decode_s) / inc.version.samples * 1e6:.1f} µs per sample, of which the "
        f"ledger scan (lake/scan.py, bench/scan.py) alone takes {inc.seconds['scan'] / inc.version.samples * 1e6:.1f}. "
        "The bookkeeping is: the scan (stat every file, read the ledger, mark "
        "every row seen), then in commit one read of the ledger and of the recipe's processed rows, "
        "the sample list and its content-addressed id, the train mean/std from per-content sums, the "
        "version's files (metadata.jsonl, four index arrays, manifest; one batch of syncs) and one "
        "`version_samples` row per sample; all of it through the DBAPI cursor, none of it per-row ORM."
    )
    print(body)
    if not args.no_write:
        write_section("bench/build.py", body)


if __name__ == "__main__":
    main()

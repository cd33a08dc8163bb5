"""Reading a version from an ``s3://`` DATA_ROOT, against baselines measured in the same run
(a part of ``bench/s3.py``, which runs it and writes the figures).

moto measures behaviour, not S3's speed, so the figures are requests and ratios:

- **cold**: ``open_version`` with an empty cache, then every sample read once (``get_batch``),
  against a bare parallel boto3 download of the version's segment files (as many at once as
  the cache downloads, ``FETCH_THREADS``) and the same read from the local copies.
  Target: >= 0.8x. Beside it, the floor: a bare GET of every object the cold open asked for,
  nothing checked or written, which is what the number of objects alone costs. The version is
  published with a pack per chunk node (pipeline/datasets/chunkpack.py), so those objects are
  the HEAD object, the manifest, one pack per node and the segment files.
- **warm**: every sample read with ``get_batch`` in random batches of 64 from a reader over
  the warm cache, against the local reader over the build's own files. Target: >= 0.95x
  (the same memory-mapped reads).
- the S3 requests of a cold open and of a warm open (a botocore event hook counts them).

A real ``moto_server`` on a free loopback port; N (default 3,000) random 3x64x64 images.
"""

from __future__ import annotations

import hashlib
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


def _entries(folder: Path) -> int:
    """Files and folders under ``folder``: each one was created once (temp names renamed into
    place are the same files)."""
    return sum(len(dirs) + len(files) for _root, dirs, files in os.walk(folder))


def _create_cost(folder: Path, n: int = 200) -> float:
    """Seconds to create one empty file here: on some disks the dearest step of a cold open."""
    folder.mkdir(parents=True)
    clock = time.perf_counter()
    for i in range(n):
        os.close(os.open(folder / f"f{i}", os.O_CREAT | os.O_WRONLY, 0o644))
    cost = (time.perf_counter() - clock) / n
    shutil.rmtree(folder)
    return cost


def measure(images: int) -> tuple[str, list[tuple[str, str]], str]:
    """Build a version of ``images`` samples on an s3:// DATA_ROOT, then time and count its
    reads; (what was measured, the figure rows, a note on a missed target or "")."""
    from pipeline.storage.cache import FETCH_THREADS

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
        from botocore.config import Config

        client = boto3.session.Session().client(
            "s3", config=Config(max_pool_connections=2 * FETCH_THREADS)
        )
        client.create_bucket(Bucket="bench")
        _lake(work, images)
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
        keys_asked: list[str] = []  # every object key the reader's client asks for
        events = s3_store().client.meta.events
        events.register("before-call.s3", counter)
        events.register(
            "before-parameter-build.s3",
            lambda params=None, **_kw: keys_asked.append((params or {}).get("Key") or ""),
        )

        # The cold baseline: a bare parallel download of the segment files, as many at once
        # as the cache fetches, then the same read from those local files.
        bare_dir = work / "bare"
        keys = [
            f"data/{seg['path']}/{name}"
            for seg in local.manifest["segments"]
            for name in ("x.npy", "y.npy")
        ]

        def fetch_one(key: str) -> None:
            (bare_dir / key).parent.mkdir(parents=True, exist_ok=True)
            client.download_file("bench", key, str(bare_dir / key))

        def bare() -> float:
            shutil.rmtree(bare_dir, ignore_errors=True)
            clock = time.perf_counter()
            with ThreadPoolExecutor(FETCH_THREADS) as pool:
                list(pool.map(fetch_one, keys))
            return time.perf_counter() - clock + _read_all(local)

        def stream_one(key: str) -> None:
            (bare_dir / key).parent.mkdir(parents=True, exist_ok=True)
            body = client.get_object(Bucket="bench", Key=key)["Body"]
            with open(bare_dir / key, "wb") as fh:
                for chunk in body.iter_chunks(1 << 20):
                    fh.write(chunk)

        def bare_stream() -> float:
            """The stricter baseline: one plain GET per file streamed to disk (no HEAD, no
            transfer manager, nothing checked), then the same read."""
            shutil.rmtree(bare_dir, ignore_errors=True)
            clock = time.perf_counter()
            with ThreadPoolExecutor(FETCH_THREADS) as pool:
                list(pool.map(stream_one, keys))
            return time.perf_counter() - clock + _read_all(local)

        def cold() -> tuple[float, int]:
            os.environ["LAKETRAIN_CACHE_DIR"] = str(work / "cache-read")
            shutil.rmtree(work / "cache-read", ignore_errors=True)
            get_settings.cache_clear()
            keys_asked.clear()
            before = counter.n
            clock = time.perf_counter()
            reader = open_version("bench", "latest")
            opened = time.perf_counter() - clock
            return opened + _read_all(reader), counter.n - before

        def every_object(objects: list[str]) -> float:
            """A bare GET of every object the cold open asked for, no cache, no check, no
            write, all at once: what the number of objects alone costs."""
            clock = time.perf_counter()
            with ThreadPoolExecutor(FETCH_THREADS) as pool:
                list(
                    pool.map(
                        lambda k: client.get_object(Bucket="bench", Key=k)["Body"].read(), objects
                    )
                )
            return time.perf_counter() - clock

        bare_runs, stream_runs, cold_runs, floor_runs = [], [], [], []
        for _ in range(5):  # interleaved: load that comes and goes hits them alike
            stream_runs.append(bare_stream())
            bare_runs.append(bare())
            cold_runs.append(cold())
            floor_runs.append(every_object(list(keys_asked)))
        bare_s, (cold_s, cold_requests), floor_s = min(bare_runs), min(cold_runs), min(floor_runs)
        stream_s = min(stream_runs)
        # What the check the baselines skip costs here: sha256 over the segment files' bytes.
        blobs = [(bare_dir / k).read_bytes() for k in keys]
        clock = time.perf_counter()
        for blob in blobs:
            hashlib.sha256(blob).digest()
        hash_s = time.perf_counter() - clock
        created, bare_created = _entries(work / "cache-read"), _entries(bare_dir)
        create_s = _create_cost(work / "create-probe")
        n_objects = len(keys_asked)
        before = counter.n
        warm_reader = open_version("bench", "latest")
        warm_requests = counter.n - before
        warm_s = local_s = float("inf")
        for seed in range(5):  # interleaved: load that comes and goes hits both alike
            warm_s = min(warm_s, _read_all(warm_reader, seed))
            local_s = min(local_s, _read_all(local, seed))
        n = len(local)
        cold_ratio, warm_ratio = bare_s / cold_s, local_s / warm_s
        stream_ratio = stream_s / cold_s
        n_segments = len(local.manifest["segments"])
        what = (
            f"A version of {n:,} samples in {n_segments} segments ({len(keys)} segment files, "
            f"{sum(os.path.getsize(bare_dir / k) for k in keys) / 2**20:.0f} MB) on an s3:// "
            f"DATA_ROOT, {FETCH_THREADS} downloads at a time on both sides"
        )
        rows = [
            (
                "S3 requests: cold open / warm open",
                f"{cold_requests} / {warm_requests}",
            ),
            (
                "cold open + read everything",
                f"{cold_s:.3f} s; bare download of the segment files + the same read "
                f"{bare_s:.3f} s",
            ),
            (
                "files and folders created: cold open / baseline",
                f"{created} / {bare_created}; creating one file here: {create_s * 1000:.2f} ms",
            ),
            (
                f"bare GET of the {n_objects} objects the cold open asked for (no cache)",
                f"{floor_s:.3f} s = {bare_s / floor_s:.2f}x the cold baseline",
            ),
            (
                "**cold open + read / bare parallel download + read**",
                f"**{cold_ratio:.2f}x** (target >= 0.8x) "
                + ("OK" if cold_ratio >= 0.8 else "MISSED"),
            ),
            (
                "cold open + read / bare parallel plain GETs streamed to files + read "
                f"({stream_s:.3f} s; the stricter baseline: no HEAD, no checksum)",
                f"**{stream_ratio:.2f}x** " + ("OK" if stream_ratio >= 0.8 else "below 0.8x"),
            ),
            (
                "sha256 of the segment files' bytes, one thread (the check the cold open makes "
                "and no baseline does)",
                f"{hash_s:.3f} s = {hash_s / max(cold_s - stream_s, 1e-9):.0%} of the gap to "
                "the stricter baseline",
            ),
            (
                "**warm read / local reader**",
                f"**{warm_ratio:.2f}x** (target >= 0.95x) "
                + ("OK" if warm_ratio >= 0.95 else "MISSED"),
            ),
        ]
        note = ""
        if cold_ratio < 0.8:
            note = (
                f"The cold open misses: it needs {n_objects} objects (the HEAD object, the "
                f"manifest, {n_objects - 2 - len(keys)} chunk files: one pack per chunk node, "
                f"holding the node and its leaves' indexes, and the {len(keys)} segment files), "
                f"the baseline {len(keys)}. A bare GET of those {n_objects} objects alone, with "
                f"nothing checked or written, takes {floor_s / bare_s:.2f}x the baseline's time; "
                f"the open itself is {floor_s / cold_s:.2f}x that floor, and creates {created} "
                f"files and folders, the baseline {bare_created}, at {create_s * 1000:.2f} ms "
                "each on this disk."
            )
        return what, rows, note
    finally:
        proc.kill()
        shutil.rmtree(work, ignore_errors=True)

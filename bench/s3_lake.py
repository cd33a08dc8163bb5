"""Scanning an ``s3://`` lake, against bare boto3 doing the same work in the same run (a part
of ``bench/s3.py``, which runs it and writes the figures).

moto measures behaviour, not S3's speed, so the figures are requests and ratios:

- **no-change rescan** of N objects (default 20,000): the S3 requests it makes (LISTs only,
  no GET) and its time against a bare paginated ListObjectsV2 of the same prefix.
  Target: <= 1.5x.
- **cold scan** (every object new): its time against a plain concurrent boto3 GET + md5 loop
  over the same keys, with the same number of threads (16). Target: >= 0.8x.

A real ``moto_server`` on a free loopback port; N objects of 1 KiB spread over 20 datasets.
The requests are counted by a botocore event hook on every client the scan creates. The fill
(PUTs from many threads) is not measured.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.s3_read import Counter, _moto, s3_bench_env  # noqa: E402

THREADS = 16
FILL_THREADS = 32


def measure(objects: int) -> tuple[str, list[tuple[str, str]], str]:
    """Fill a lake of ``objects`` objects, then time and count its scans; (what was measured,
    the figure rows, a note on a missed target or "")."""
    work = Path(tempfile.mkdtemp(prefix="lt-bench-s3lake-"))
    proc, endpoint = _moto()
    try:
        s3_bench_env(
            endpoint,
            work,
            LAKE_DIR="s3://bench/lake",
            DATA_ROOT=str(work / "data"),
            METADATA_DB_URL=f"sqlite:///{work / 'meta.db'}",
        )
        import boto3
        from botocore.config import Config

        from pipeline.lake.scan import scan
        from pipeline.metadata.store import MetadataStore
        from pipeline.settings import get_settings
        from pipeline.storage.listing import LakeReader

        get_settings.cache_clear()
        client = boto3.session.Session().client(
            "s3", config=Config(max_pool_connections=FILL_THREADS)
        )
        client.create_bucket(Bucket="bench")
        keys = [f"lake/ds{i % 20:02d}/c{i % 7}/{i:06d}.bin" for i in range(objects)]
        body = os.urandom(1024 + objects)
        clock = time.perf_counter()
        with ThreadPoolExecutor(FILL_THREADS) as pool:
            list(
                pool.map(
                    lambda ik: client.put_object(
                        Bucket="bench", Key=ik[1], Body=body[ik[0] : ik[0] + 1024]
                    ),
                    enumerate(keys),
                )
            )
        print(f"filled {objects:,} objects in {time.perf_counter() - clock:.1f} s", flush=True)

        counter = Counter()
        ops: dict[str, int] = {}
        init = LakeReader.__init__

        def counted_init(self, store=None) -> None:
            init(self, store)

            def count(event_name: str, **_kw) -> None:
                counter()
                op = event_name.rsplit(".", 1)[-1]
                ops[op] = ops.get(op, 0) + 1

            self.store.client.meta.events.register("before-call.s3", count)

        LakeReader.__init__ = counted_init  # type: ignore[method-assign]
        store = MetadataStore(os.environ["METADATA_DB_URL"])

        def bare_get_md5() -> float:
            def one(key: str) -> str:
                digest = hashlib.md5()
                resp = client.get_object(Bucket="bench", Key=key)["Body"]
                for chunk in resp.iter_chunks(1 << 20):
                    digest.update(chunk)
                return digest.hexdigest()

            clock = time.perf_counter()
            with ThreadPoolExecutor(THREADS) as pool:
                list(pool.map(one, keys))
            return time.perf_counter() - clock

        def bare_list() -> float:
            clock = time.perf_counter()
            n = 0
            for page in client.get_paginator("list_objects_v2").paginate(
                Bucket="bench", Prefix="lake/"
            ):
                n += len(page.get("Contents", []))
            assert n == len(keys)
            return time.perf_counter() - clock

        # Two of each, interleaved, the best of each: a cold scan needs an empty ledger, so
        # the first one runs against a store of its own, the second fills the bench's store.
        colds, bares = [], []
        for scan_store in (MetadataStore(f"sqlite:///{work / 'meta-first.db'}"), store):
            bares.append(bare_get_md5())
            clock = time.perf_counter()
            cold = scan(store=scan_store)
            colds.append(time.perf_counter() - clock)
            assert len(cold.new) == len(keys), cold.summary()
            if scan_store is not store:
                scan_store.dispose()
        cold_s, bare_cold = min(colds), min(bares)

        rescans, lists = [], []
        for _ in range(3):  # interleaved, so that load that comes and goes hits both alike
            lists.append(bare_list())
            ops.clear()
            before = counter.n
            clock = time.perf_counter()
            again = scan(store=store)
            rescans.append(time.perf_counter() - clock)
            assert again.unchanged == len(keys) and not again.has_content_changes
            requests = counter.n - before
        rescan_s, list_s = min(rescans), min(lists)
        rescan_ratio, cold_ratio = rescan_s / list_s, bare_cold / cold_s
        by_op = ", ".join(f"{k} {v}" for k, v in sorted(ops.items()))
        store.dispose()
        what = (
            f"{len(keys):,} objects of 1 KiB in 20 datasets; the bare side: boto3 with "
            f"{THREADS} threads where it runs in parallel"
        )
        rows = [
            ("no-change rescan, requests", f"{requests} ({by_op}); {ops.get('GetObject', 0)} GETs"),
            (
                "no-change rescan",
                f"{rescan_s:.3f} s; bare paginated list of the lake prefix {list_s:.3f} s",
            ),
            (
                "**no-change rescan / bare paginated list**",
                f"**{rescan_ratio:.2f}x** (target <= 1.5x) "
                + ("OK" if rescan_ratio <= 1.5 else "MISSED"),
            ),
            ("cold scan", f"{cold_s:.2f} s; bare {THREADS}-thread GET + md5 {bare_cold:.2f} s"),
            (
                f"**cold scan / bare {THREADS}-thread GET + md5**",
                f"**{cold_ratio:.2f}x** (target >= 0.8x) "
                + ("OK" if cold_ratio >= 0.8 else "MISSED"),
            ),
        ]
        notes = []
        if rescan_ratio > 1.5:
            notes.append("The no-change rescan misses its target.")
        if cold_ratio < 0.8:
            notes.append("The cold scan misses its target.")
        return what, rows, " ".join(notes)
    finally:
        proc.kill()
        shutil.rmtree(work, ignore_errors=True)

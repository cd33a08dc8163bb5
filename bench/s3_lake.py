"""Scanning an ``s3://`` lake, against bare boto3 doing the same work in the same run.

moto measures behaviour, not S3's speed, so the figures are requests and ratios:

- **no-change rescan** of N objects (default 20,000): the S3 requests it makes (LISTs only,
  no GET) and its time against a bare paginated ListObjectsV2 of the same prefix.
  Target: <= 1.5x.
- **cold scan** (every object new): its time against a plain concurrent boto3 GET + md5 loop
  over the same keys, with the same number of threads (16). Target: >= 0.8x.

A real ``moto_server`` on a free loopback port; N objects of 1 KiB spread over 20 datasets.
The requests are counted by a botocore event hook on every client the scan creates.

    .venv/bin/python bench/s3_lake.py [--objects 20000]
"""

from __future__ import annotations

import argparse
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

from bench._results import figures_table, write_section  # noqa: E402
from bench.s3_read import Counter, _moto, s3_bench_env  # noqa: E402

THREADS = 16


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--objects", type=int, default=20_000)
    args = ap.parse_args()
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
            "s3", config=Config(max_pool_connections=THREADS * 2)
        )
        client.create_bucket(Bucket="bench")
        keys = [f"lake/ds{i % 20:02d}/c{i % 7}/{i:06d}.bin" for i in range(args.objects)]
        body = os.urandom(1024 + args.objects)
        with ThreadPoolExecutor(THREADS) as pool:
            list(
                pool.map(
                    lambda ik: client.put_object(
                        Bucket="bench", Key=ik[1], Body=body[ik[0] : ik[0] + 1024]
                    ),
                    enumerate(keys),
                )
            )

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

        bare_cold = bare_get_md5()
        clock = time.perf_counter()
        cold = scan(store=store)
        cold_s = time.perf_counter() - clock
        assert len(cold.new) == len(keys), cold.summary()
        bare_cold = min(bare_cold, bare_get_md5())

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
        lines = [
            f"{len(keys):,} objects of 1 KiB in 20 datasets, moto_server on loopback",
            f"no-change rescan: {rescan_s:.3f} s, bare paginated list {list_s:.3f} s: "
            f"{rescan_ratio:.2f}x (target <= 1.5x); {requests} S3 requests ({by_op})",
            f"cold scan: {cold_s:.2f} s, bare {THREADS}-thread GET + md5 {bare_cold:.2f} s: "
            f"{cold_ratio:.2f}x (target >= 0.8x)",
        ]
        print("\n".join(lines))
        write_section(
            "bench/s3_lake.py",
            f"{lines[0]}; moto measures S3 behaviour, not its speed: the requests and the "
            "ratios to a bare boto3 client doing the same work in the same run are the figures.\n\n"
            + figures_table(
                [
                    ("no-change rescan, requests", f"{requests} ({by_op}); 0 GETs"),
                    (
                        "**no-change rescan / bare paginated list**",
                        f"**{rescan_ratio:.2f}x** (target <= 1.5x) "
                        + ("OK" if rescan_ratio <= 1.5 else "MISSED"),
                    ),
                    (
                        f"**cold scan / bare {THREADS}-thread GET + md5**",
                        f"**{cold_ratio:.2f}x** (target >= 0.8x) "
                        + ("OK" if cold_ratio >= 0.8 else "MISSED"),
                    ),
                ]
            ),
        )
        store.dispose()
    finally:
        proc.kill()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""The local runner: scan, plan, process (a process pool) and commit in one call."""

from __future__ import annotations

import time
from collections.abc import Callable

from pipeline.datasets import manifest as mf
from pipeline.datasets.build.committing import (
    commit,
)
from pipeline.datasets.build.planning import plan
from pipeline.datasets.build.published import process
from pipeline.datasets.build.values import (
    BuildReport,
    SegmentRef,
    Shard,
    Version,
    _recipe,
    _settings,
)
from pipeline.datasets.buildlock import build_lock
from pipeline.datasets.dataroot import work_root
from pipeline.datasets.pool import worker_pool
from pipeline.metadata.store import MetadataStore, open_store

# ---- build: all three locally -----------------------------------------------------------------


# A scan of a lake this large (the head's samples; or no head yet, a first build of any size)
# runs in a child process: a million-file scan leaves ~600 MB of freed but unreturned memory
# (pymalloc arenas pinned by a few live objects each), which the build's decode workers would
# inherit through fork and its commit would start from. The child returns it all at exit.
SCAN_IN_CHILD_SAMPLES = 100_000


def _process_in_worker(args: tuple[dict, str]) -> dict:
    shard, url = args
    return process(Shard.from_dict(shard), store=open_store(url)).to_dict()


def _scan_in_worker(args: tuple[str, str, str, bool]) -> dict:
    from pipeline.lake.scan import scan

    lake, dataset, url, wait = args
    return scan(lake, dataset=dataset, store=open_store(url), wait=wait).summary()


def _scan(
    store: MetadataStore, lake: str, dataset: str, wait: bool, lock_fd: int
) -> dict[str, object]:
    from pipeline.datasets.head import head_version
    from pipeline.lake.scan import scan

    with store.session() as session:
        head = head_version(session, dataset)
    if head is not None and head.samples < SCAN_IN_CHILD_SAMPLES:
        return scan(lake, dataset=dataset, store=store, wait=wait).summary()
    with worker_pool(1, close_fds=(lock_fd,)) as pool:
        return pool.submit(_scan_in_worker, (str(lake), dataset, store.url, wait)).result()


def run_build(
    dataset: str,
    *,
    workers: int | None = None,
    store: MetadataStore | None = None,
    scan_first: bool = True,
    max_files: int | None = None,
    max_bytes: int | None = None,
    on_plan: Callable[[list[Shard]], None] | None = None,
    on_shard: Callable[[SegmentRef], None] | None = None,
    wait: bool = True,
    on_wait: Callable[[str], None] | None = None,
) -> BuildReport:
    """Scan the dataset, then plan, process (process pool) and commit; report what was done.
    Another build of the dataset running: wait for it (``on_wait`` gets the message naming its
    pid), or with ``wait=False`` raise BuildBusyError."""
    settings = _settings()
    store = store or open_store()
    workers = workers or settings.hash_workers
    report = BuildReport(dataset, None)
    _recipe(dataset)  # a bad recipe fails before anything else happens
    folder = mf.datasets_root(work_root()) / dataset
    with build_lock(folder, dataset, wait=wait, on_wait=on_wait) as lock_fd:
        clock = time.perf_counter()
        if scan_first:
            # wait=False: a scan of the lake in progress is a busy lock too (ScanBusyError).
            report.scan = _scan(store, settings.lake_dir, dataset, wait, lock_fd)
        report.seconds["scan"] = time.perf_counter() - clock
        clock = time.perf_counter()
        shards = plan(dataset, store=store, max_files=max_files, max_bytes=max_bytes)
        report.seconds["plan"] = time.perf_counter() - clock
        clock = time.perf_counter()
        report.shards = len(shards)
        if on_plan:
            on_plan(shards)
        refs: list[SegmentRef] = []
        if workers <= 1 or len(shards) <= 1:
            for shard in shards:
                refs.append(process(shard, store=store, threads=workers))
                if on_shard:
                    on_shard(refs[-1])
        else:
            # Workers die with this process and close the build lock (pipeline/datasets/pool.py).
            with worker_pool(min(workers, len(shards)), close_fds=(lock_fd,)) as pool:
                for data in pool.map(
                    _process_in_worker, [(s.to_dict(), store.url) for s in shards]
                ):
                    refs.append(SegmentRef.from_dict(data))
                    if on_shard:
                        on_shard(refs[-1])
        report.segments = refs
        report.decoded = sum(r.decoded for r in refs)
        report.invalid = sum(r.invalid for r in refs)
        report.reused_segments = sum(1 for r in refs if r.reused)
        report.seconds["process"] = time.perf_counter() - clock
        clock = time.perf_counter()
        report.version = commit(dataset, refs, store=store)
        report.seconds["commit"] = time.perf_counter() - clock
    return report


def build(
    dataset: str, *, workers: int | None = None, store: MetadataStore | None = None
) -> Version | None:
    """Scan, plan, process and commit locally; the new Version, or None when nothing changed."""
    return run_build(dataset, workers=workers, store=store).version

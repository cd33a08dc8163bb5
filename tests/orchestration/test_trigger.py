"""The lake watcher trigger: stat-only fingerprints, one event per scan, state that survives a
restart. The state store here is a dict behind the same async accessor API the triggerer
injects; the real one is exercised by the end-to-end test."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from pipeline.orchestration.trigger import LakeTrigger, diff_fingerprints, lake_fingerprints


class DictStateStore:
    """Same interface as airflow's AssetStateStoreAccessors for a single asset."""

    def __init__(self) -> None:
        self.data: dict[str, object] = {}
        self.sets = 0

    async def aget(self, key: str, default: object = None) -> object:
        return self.data.get(key, default)

    async def aset(self, key: str, value: object) -> None:
        import json

        self.data[key] = json.loads(json.dumps(value))  # the real store keeps JSON
        self.sets += 1


def drop(lake: Path, rel: str, data: bytes = b"x", age: float = 60.0) -> Path:
    path = lake / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    old = time.time() - age
    os.utime(path, (old, old))
    return path


def make(lake: Path, store: DictStateStore | None, **kw: float) -> LakeTrigger:
    trig = LakeTrigger(
        lake=str(lake), poll_seconds=0.05, settle_seconds=kw.pop("settle", 1.0), **kw
    )
    trig.asset_state_store = store
    return trig


async def poll_and_commit(trig: LakeTrigger):
    event = await trig.poll_once()
    if event is not None:
        await trig._save_state(trig._pending_state)
    return event


def run(coro):
    return asyncio.run(coro)


def test_serialize_round_trips_to_an_equal_trigger(tmp_path: Path) -> None:
    trig = LakeTrigger(lake=str(tmp_path), poll_seconds=3, settle_seconds=1.5, max_defer_seconds=9)
    path, kwargs = trig.serialize()
    assert path == "pipeline.orchestration.trigger.LakeTrigger"
    again = LakeTrigger(**kwargs)
    assert again.serialize() == (path, kwargs)


def test_first_poll_fires_once_with_every_dataset_then_stays_quiet(tmp_path: Path) -> None:
    drop(tmp_path, "digits/0/a.png")
    drop(tmp_path, "digits/1/b.png")
    drop(tmp_path, "photos/c.jpg")
    store = DictStateStore()
    trig = make(tmp_path, store)
    event = run(poll_and_commit(trig))
    assert event is not None
    assert event.payload["datasets"] == ["digits", "photos"]
    assert {c["dataset"]: c["files"] for c in event.payload["changes"]} == {
        "digits": 2,
        "photos": 1,
    }
    assert run(poll_and_commit(trig)) is None


def test_restart_neither_refires_nor_misses_a_file_dropped_while_down(tmp_path: Path) -> None:
    drop(tmp_path, "digits/0/a.png")
    store = DictStateStore()
    assert run(poll_and_commit(make(tmp_path, store))) is not None
    # "restart": a fresh instance with the same persisted state
    assert run(poll_and_commit(make(tmp_path, store))) is None
    drop(tmp_path, "digits/0/new.png")
    event = run(poll_and_commit(make(tmp_path, store)))
    assert event is not None and event.payload["datasets"] == ["digits"]


def test_rewrite_with_restored_mtime_is_seen_through_ctime(tmp_path: Path) -> None:
    path = drop(tmp_path, "digits/0/a.png", b"first")
    st = path.stat()
    trig = make(tmp_path, DictStateStore())
    run(poll_and_commit(trig))
    time.sleep(0.01)
    path.write_bytes(b"other")  # same size
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    event = run(poll_and_commit(trig))
    assert event is not None and event.payload["datasets"] == ["digits"]


def test_deletion_and_new_dataset_are_changes(tmp_path: Path) -> None:
    a = drop(tmp_path, "digits/0/a.png")
    drop(tmp_path, "digits/0/b.png")
    trig = make(tmp_path, DictStateStore())
    run(poll_and_commit(trig))
    a.unlink()
    drop(tmp_path, "tables/t.csv")
    event = run(poll_and_commit(trig))
    changes = {c["dataset"]: (c["previous_files"], c["files"]) for c in event.payload["changes"]}
    assert changes == {"digits": (2, 1), "tables": (0, 1)}


def test_unsettled_file_does_not_fire_until_it_settles(tmp_path: Path) -> None:
    trig = make(tmp_path, DictStateStore(), settle=0.5)
    (tmp_path / "digits").mkdir()
    run(poll_and_commit(trig))
    (tmp_path / "digits" / "fresh.png").write_bytes(b"x")  # mtime = now
    assert run(poll_and_commit(trig)) is None
    time.sleep(0.6)
    event = run(poll_and_commit(trig))
    assert event is not None and event.payload["changes"][0]["files"] == 1


def test_burst_is_held_back_while_files_settle_then_fires_once(tmp_path: Path) -> None:
    drop(tmp_path, "digits/0/a.png")
    trig = make(tmp_path, DictStateStore(), settle=0.4, max_defer_seconds=30)
    run(poll_and_commit(trig))
    drop(tmp_path, "digits/0/b.png")  # settled ...
    (tmp_path / "digits" / "0" / "c.png").write_bytes(b"c")  # ... while another still copies
    assert run(poll_and_commit(trig)) is None
    time.sleep(0.5)
    event = run(poll_and_commit(trig))
    assert event is not None and event.payload["changes"][0]["files"] == 3
    assert run(poll_and_commit(trig)) is None


def test_a_dataset_never_quiet_still_fires_after_max_defer(tmp_path: Path) -> None:
    trig = make(tmp_path, DictStateStore(), settle=30, max_defer_seconds=0.2)
    drop(tmp_path, "digits/0/a.png")
    (tmp_path / "digits" / "0" / "hot.png").write_bytes(b"h")
    assert run(poll_and_commit(trig)) is None
    time.sleep(0.25)
    assert run(poll_and_commit(trig)) is not None


def test_missing_lake_is_waited_for_not_reported_as_all_deleted(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    drop(lake, "digits/0/a.png")
    store = DictStateStore()
    trig = make(lake, store)
    run(poll_and_commit(trig))
    lake.rename(tmp_path / "away")

    async def two_polls() -> list:
        events = []

        async def collect() -> None:
            async for ev in trig.run():
                events.append(ev)

        task = asyncio.create_task(collect())
        await asyncio.sleep(0.3)
        task.cancel()
        return events

    assert run(two_polls()) == []
    assert store.data["fingerprints"]["datasets"]["digits"]["files"] == 1


def test_run_yields_then_persists_state(tmp_path: Path) -> None:
    drop(tmp_path, "digits/0/a.png")
    store = DictStateStore()
    trig = make(tmp_path, store)

    async def first_event():
        gen = trig.run()
        event = await gen.__anext__()
        assert store.sets == 0  # not saved before the event is handed over
        task = asyncio.create_task(gen.__anext__())
        await asyncio.sleep(0.2)
        task.cancel()
        return event

    event = run(first_event())
    assert event.payload["datasets"] == ["digits"]
    assert store.sets == 1


def test_walk_opens_nothing(tmp_path: Path) -> None:
    # A file we cannot read is still fingerprinted: the walk only stats.
    path = drop(tmp_path, "digits/0/secret.png")
    path.chmod(0)
    try:
        fps, settling, unlistable = lake_fingerprints(tmp_path, 1.0)
    finally:
        path.chmod(0o644)
    assert fps["digits"]["files"] == 1 and not settling and not unlistable


def test_diff_fingerprints_reports_only_moved_datasets() -> None:
    prev = {"a": {"fp": "1", "files": 1}, "b": {"fp": "2", "files": 2}}
    cur = {"a": {"fp": "1", "files": 1}, "b": {"fp": "3", "files": 3}, "c": {"fp": "4", "files": 1}}
    assert [c["dataset"] for c in diff_fingerprints(prev, cur)] == ["b", "c"]


@pytest.mark.parametrize("bad", [{"poll_seconds": 0}, {"settle_seconds": -1}])
def test_bad_arguments_are_refused_with_the_name(tmp_path: Path, bad: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        LakeTrigger(lake=str(tmp_path), **bad)

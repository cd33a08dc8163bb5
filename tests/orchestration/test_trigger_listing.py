"""The lake watcher's listing mode, for an s3:// lake without SQS (MinIO in the compose stack):
one LIST pass per poll, a fingerprint per dataset prefix, an event per change and none on a
quiet poll; on a real moto_server, every request recorded by a proxy."""

from __future__ import annotations

import asyncio
import signal

import pytest

from pipeline.orchestration.trigger import LakeTrigger
from tests.lake.test_s3_scan import lake_on
from tests.orchestration.test_trigger import DictStateStore, poll_and_commit


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def s3_lake(moto_server, lt_env, monkeypatch):
    yield from lake_on(moto_server, monkeypatch)


def make(url: str, store: DictStateStore) -> LakeTrigger:
    trig = LakeTrigger(lake=url, poll_seconds=0.05, settle_seconds=5.0)
    trig.asset_state_store = store
    return trig


def test_listing_trigger_fires_once_per_change_and_never_on_a_quiet_poll(s3_lake):
    store = DictStateStore()
    trig = make(s3_lake.url, store)
    s3_lake.put("digits/0/a.png", b"a")
    s3_lake.put("photos/cat/b.jpg", b"b")
    s3_lake.put("photos/.hidden", b"h")

    event = run(poll_and_commit(trig))
    assert event is not None and event.payload["datasets"] == ["digits", "photos"]
    assert event.payload["lake"] == s3_lake.url

    s3_lake.proxy.clear()
    assert run(poll_and_commit(trig)) is None  # nothing changed
    assert s3_lake.proxy.ops() == ["ListObjectsV2"]  # one LIST pass, nothing read

    s3_lake.put("photos/cat/b.jpg", b"B")  # an overwrite (same size): new ETag and time
    event = run(poll_and_commit(trig))
    assert event is not None and event.payload["datasets"] == ["photos"]
    assert run(poll_and_commit(trig)) is None

    s3_lake.put("digits/0/c.tmp", b"partial")  # ignored names move nothing
    s3_lake.put("digits/_staging/d.png", b"d")
    assert run(poll_and_commit(trig)) is None

    s3_lake.delete("digits/0/a.png")
    s3_lake.put("new/x/y.png", b"y")
    event = run(poll_and_commit(trig))
    assert event.payload["datasets"] == ["digits", "new"]
    assert {c["dataset"]: c["files"] for c in event.payload["changes"]} == {"digits": 0, "new": 1}

    # A restarted triggerer (same state store) neither re-fires nor misses a drop.
    assert run(poll_and_commit(make(s3_lake.url, store))) is None
    s3_lake.put("new/x/z.png", b"z")
    assert run(poll_and_commit(make(s3_lake.url, store))).payload["datasets"] == ["new"]
    assert set(s3_lake.proxy.ops()) == {"ListObjectsV2"}


def test_a_paginated_lake_is_one_pass_over_every_page(s3_lake, monkeypatch):
    from pipeline.orchestration.trigger import s3_lake_lines
    from pipeline.storage.listing import LakeReader

    for i in range(12):
        s3_lake.put(f"digits/{i % 3}/{i}.png", bytes([i]))
    reader = LakeReader()
    original = reader.store.client.list_objects_v2
    # Pages of 5 keys (S3's are 1000): the continuation tokens are followed to the end.
    monkeypatch.setattr(
        reader.store.client, "list_objects_v2", lambda **kw: original(**kw, MaxKeys=5)
    )
    lines = s3_lake_lines(s3_lake.url, reader)
    assert sorted(path for path, _ in lines) == sorted(f"digits/{i % 3}/{i}.png" for i in range(12))
    assert s3_lake.proxy.ops() == ["ListObjectsV2"] * 3  # 5 + 5 + 2


def test_an_unreachable_endpoint_is_waited_for_not_taken_for_an_emptied_lake(
    private_moto_server, lt_env, monkeypatch
):
    monkeypatch.setenv("LAKETRAIN_S3_ATTEMPTS", "1")
    lakes = lake_on(private_moto_server, monkeypatch)
    lake = next(lakes)
    try:
        store = DictStateStore()
        lake.put("digits/0/a.png", b"a")
        assert run(poll_and_commit(make(lake.url, store))) is not None
        saved = dict(store.data)
        private_moto_server.process.stop(signal.SIGKILL)
        trig = make(lake.url, store)

        async def one_round() -> list:
            events = []

            async def collect() -> None:
                async for ev in trig.run():
                    events.append(ev)

            task = asyncio.create_task(collect())
            await asyncio.sleep(1.0)
            task.cancel()
            return events

        assert run(one_round()) == []
        assert store.data == saved  # the datasets were not dropped from the state
    finally:
        lakes.close()


def test_the_dag_polls_an_s3_lake_every_30_seconds_by_default(monkeypatch, lt_env):
    from pipeline.orchestration import dagconfig
    from pipeline.settings import get_settings

    monkeypatch.setenv("LAKE_DIR", "s3://bucket/lake")
    monkeypatch.delenv("LAKETRAIN_POLL_SECONDS", raising=False)
    get_settings.cache_clear()
    assert dagconfig.poll_seconds() == 30.0
    monkeypatch.setenv("LAKETRAIN_POLL_SECONDS", "7")
    get_settings.cache_clear()
    assert dagconfig.poll_seconds() == 7.0
    get_settings.cache_clear()


def test_sqs_and_trigger_modules_no_longer_import_each_other():
    import ast
    from pathlib import Path

    import pipeline.orchestration as pkg

    folder = Path(pkg.__file__).parent

    def imported(name: str) -> set[str]:
        tree = ast.parse((folder / f"{name}.py").read_text())
        return {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        }

    assert "pipeline.orchestration.sqs" not in imported("trigger")
    assert "pipeline.orchestration.s3events" in imported("trigger")
    from pipeline.orchestration.sqs import datasets_from_messages

    assert datasets_from_messages.__module__ == "pipeline.orchestration.s3events"

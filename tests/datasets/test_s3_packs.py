"""Node packs on an ``s3://`` DATA_ROOT (a real moto_server): a cold open fetches one pack per
node instead of every leaf's index, a damaged cached pack is fetched again, and a version
published before packs still opens, leaf by leaf."""

from __future__ import annotations

import numpy as np
import pytest

from tests.datasets.conftest import image_lake
from tests.datasets.s3_support import use_s3_data_root


@pytest.fixture
def s3_root(store, lt_env, moto_server, monkeypatch: pytest.MonkeyPatch) -> str:
    image_lake(lt_env, "pets", per_class=12)
    return use_s3_data_root(monkeypatch, lt_env, moto_server.url)


def _gets() -> list[str]:  # the keys the data root's client GETs from now on
    from pipeline.datasets.publish import s3_store

    seen: list[str] = []
    s3_store().client.meta.events.register(
        "before-parameter-build.s3.GetObject",
        lambda params=None, **_kw: seen.append((params or {}).get("Key", "")),
    )
    return seen


def _same_reads(a, b) -> None:
    everything = np.arange(len(a))
    assert len(a) == len(b)
    for x, y in zip(a.get_batch(everything), b.get_batch(everything), strict=True):
        assert np.array_equal(x, y)
    for name in ("train", "val"):
        assert a.split(name).md5s().tolist() == b.split(name).md5s().tolist()
    assert a.labels().tolist() == b.labels().tolist()
    assert a.md5s().tolist() == b.md5s().tolist()


def test_a_version_published_before_packs_still_opens_leaf_by_leaf(
    s3_root, lt_env, store, moto_server, monkeypatch
):
    from pipeline.datasets.build import build, committing
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.reader import open_version

    monkeypatch.setattr(committing, "PACK_ON_S3", False)
    v = build("pets", workers=1)
    assert not [k for k in moto_server.keys("data/chunks/") if k.endswith(".pack")]
    monkeypatch.delenv("METADATA_DB_URL")
    gets = _gets()
    cold = open_version("pets", v.version_id)
    assert "packed" not in cold.manifest["chunks"]
    assert any(k.endswith(".idx") for k in gets) and any(k.endswith(".node.json") for k in gets)
    _same_reads(cold, open_version("pets", v.version_id, data_root=work_root()))


def test_a_packed_version_opens_with_one_get_per_node_and_reads_as_the_local_one(
    s3_root, lt_env, store, moto_server, monkeypatch
):
    from pipeline.datasets.build import build
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.reader import open_version

    v = build("pets", workers=1)
    nodes = open_version("pets", v.version_id, data_root=work_root()).manifest["chunks"]["nodes"]
    packs = [k for k in moto_server.keys("data/chunks/") if k.endswith(".pack")]
    assert sorted(k.rsplit("/", 1)[-1] for k in packs) == sorted(f"{n['hash']}.pack" for n in nodes)
    monkeypatch.delenv("METADATA_DB_URL")
    gets = _gets()
    cold = open_version("pets", v.version_id)
    chunk_gets = [k for k in gets if "/chunks/" in k]
    assert sorted(chunk_gets) == sorted(packs)  # no node file, no leaf index
    _same_reads(cold, open_version("pets", v.version_id, data_root=work_root()))
    assert cold.metadata(0)["path"].startswith("pets/")  # metadata parts come on first use


def test_a_damaged_cached_pack_is_fetched_again_and_reads_right(
    s3_root, lt_env, store, monkeypatch
):
    from pipeline.datasets import chunks as ch
    from pipeline.datasets.build import build
    from pipeline.datasets.chunkpack import PACK_SUFFIX
    from pipeline.datasets.reader import open_version

    v = build("pets", workers=1)
    first = open_version("pets", v.version_id, store=store)
    want = first.get_batch(np.arange(len(first)))[0]
    node = first.manifest["chunks"]["nodes"][0]["hash"]
    pack = ch.chunk_path(first.data_root, node, PACK_SUFFIX)
    del first
    raw = bytearray(pack.read_bytes())
    raw[-1] ^= 0x01  # same size, wrong bytes: its stat changes, so the cache checks it again
    pack.write_bytes(bytes(raw))
    again = open_version("pets", v.version_id, store=store)
    assert again.cache_downloads == 1  # that pack, fetched again
    assert np.array_equal(again.get_batch(np.arange(len(again)))[0], want)
    assert open_version("pets", v.version_id, store=store).cache_downloads == 0


def test_a_record_fetches_its_leafs_part_and_the_next_few_not_every_part(
    s3_root, lt_env, store, moto_server, monkeypatch
):
    from pipeline.datasets import chunks, leafmeta
    from pipeline.datasets.build import build
    from pipeline.datasets.dataroot import work_root
    from pipeline.datasets.reader import open_version

    monkeypatch.setattr(chunks, "LEAF_TARGET", 2)  # many small leaves
    monkeypatch.setattr(chunks, "LEAF_MAX", 4)
    monkeypatch.setattr(chunks, "NODE_TARGET", 4)
    monkeypatch.setattr(leafmeta, "FETCH_WINDOW", 3)
    v = build("pets", workers=1)
    local = open_version("pets", v.version_id, data_root=work_root())
    leaves = local.manifest["chunks"]["leaves"]
    assert leaves > 6
    monkeypatch.delenv("METADATA_DB_URL")
    gets = _gets()

    def part_gets() -> list[str]:
        return [k for k in gets if k.endswith(chunks.META_SUFFIX)]

    cold = open_version("pets", v.version_id)
    assert part_gets() == []  # opening fetches no metadata part
    assert cold.metadata(0) == local.metadata(0)
    assert len(part_gets()) == 3  # the first leaf's part and the next two
    # A part evicted from the cache after its fetch is fetched again when its leaf is read.
    second = cold._leaf_meta._leaves[1]
    (cold.data_root / chunks.chunk_relpath(second.hash, chunks.META_SUFFIX)).unlink()
    first_of_second = cold._leaf_meta._leaves[0].count
    assert cold.metadata(first_of_second) == local.metadata(first_of_second)
    assert len(part_gets()) == 4 and part_gets()[-1].endswith(f"{second.hash}.jsonl")
    n = len(cold)
    assert [cold.metadata(i) for i in range(n)] == [local.metadata(i) for i in range(n)]
    fetched = part_gets()
    assert len(fetched) == leaves + 1  # every part once, the evicted one twice
    assert len(set(fetched)) == leaves

"""process stores each image sample's perceptual hash in segment.json; the commit's
near-duplicate step reads them there, and they are exactly what hashing the stored rows gives."""

from __future__ import annotations

import json

import numpy as np
from PIL import Image

from tests.datasets.conftest import image_lake, write_recipe

RECIPE = (
    'modality = "image"\n\n[image]\nsize = 32\nchannels = 3\nresize = "center_crop"\n\n'
    '[labels]\nrule = "parent_dir"\n'
)


def _segment_infos(home):
    return [json.loads(p.read_text()) for p in (home / "data" / "segments").rglob("segment.json")]


def test_stored_hashes_are_the_hashes_of_the_stored_rows(sqlite_store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.quality.phash import perceptual_hash

    image_lake(home, per_class=6, recipe=RECIPE)
    flat = home / "lake" / "pets" / "cat" / "flat.png"  # one colour: unhashable
    Image.new("RGB", (40, 30), (90, 90, 90)).save(flat)
    report = run_build("pets", workers=1, store=sqlite_store, max_files=5)
    infos = _segment_infos(home)
    assert len(infos) == report.shards == 3
    seen = 0
    for info in infos:
        folder = home / "data" / "segments" / info["recipe_hash"] / info["segment_id"]
        x = np.load(folder / "x.npy")
        rows = [e["row"] for e in info["entries"]]
        hashes, unhashable = perceptual_hash(x[rows])
        for e, h, skip in zip(info["entries"], hashes.tolist(), unhashable.tolist(), strict=True):
            assert e["phash"] == (None if skip else h)
            seen += 1
    assert seen == 13
    assert sum(e["phash"] is None for i in infos for e in i["entries"]) == 1  # the flat one


def test_the_commit_reads_the_stored_hashes(sqlite_store, home):
    """A segment's stored hash is what the commit indexes: change it in segment.json (before
    the commit) and the near-duplicate step finds the pair it now describes."""
    from pipeline.datasets.build import commit, plan, process
    from pipeline.datasets.quality.neardup import _hash_new
    from pipeline.datasets.recipes import load_recipe
    from pipeline.lake.scan import scan

    write_recipe(home, "pets", RECIPE)
    image_lake(home, per_class=4, recipe=RECIPE)
    scan(home / "lake", dataset="pets", store=sqlite_store)
    (shard,) = plan("pets", store=sqlite_store)
    ref = process(shard, store=sqlite_store)
    path = home / "data" / ref.path / "segment.json"
    info = json.loads(path.read_text())
    a, b = info["entries"][0], info["entries"][1]
    assert a["phash"] is not None and b["phash"] is not None and a["phash"] != b["phash"]
    b["phash"] = a["phash"]  # stands for "b's sample looks exactly like a's"
    path.write_text(json.dumps(info, sort_keys=True))

    class _Ps:  # what _hash_new reads of a processed sample
        def __init__(self, e):
            self.md5, self.row, self.segment_id = e["md5"], e["row"], ref.segment_id

    keys, hashes = _hash_new(home / "data", load_recipe("pets"), "image", [_Ps(a), _Ps(b)])
    assert keys == [a["md5"], b["md5"]] and hashes[0] == hashes[1] == np.uint64(a["phash"])
    v = commit("pets", [ref], store=sqlite_store)
    near = json.loads((home / "data" / v.path / "manifest.json").read_text())["quality"][
        "near_duplicates"
    ]
    path_of = {f.md5: f.path for f in shard.files}
    assert near["groups"] == 1, near
    assert sorted(near["listed"][0]["paths"]) == sorted([path_of[a["md5"]], path_of[b["md5"]]])


def test_a_segment_without_stored_hashes_is_hashed_from_its_rows(sqlite_store, home):
    """Segments written before process stored hashes: the commit hashes their rows, as before."""
    from pipeline.datasets.build import plan, process
    from pipeline.datasets.quality.neardup import _hash_new
    from pipeline.datasets.quality.phash import perceptual_hash
    from pipeline.datasets.recipes import load_recipe
    from pipeline.lake.scan import scan

    image_lake(home, per_class=3, recipe=RECIPE)
    scan(home / "lake", dataset="pets", store=sqlite_store)
    (shard,) = plan("pets", store=sqlite_store)
    ref = process(shard, store=sqlite_store)
    folder = home / "data" / ref.path
    info = json.loads((folder / "segment.json").read_text())
    for e in info["entries"]:
        del e["phash"]
    (folder / "segment.json").write_text(json.dumps(info, sort_keys=True))

    class _Ps:
        def __init__(self, e):
            self.md5, self.row, self.segment_id = e["md5"], e["row"], ref.segment_id

    group = [_Ps(e) for e in info["entries"]]
    keys, hashes = _hash_new(home / "data", load_recipe("pets"), "image", group)
    want, skip = perceptual_hash(np.load(folder / "x.npy")[[e["row"] for e in info["entries"]]])
    assert keys == [p.md5 for p, s in zip(group, skip, strict=True) if not s]
    assert hashes.tolist() == want[~skip].tolist() and len(keys) == 6

"""plan bounds a shard's decoded bytes (SHARD_DECODED_MB), not only its files and source bytes,
so a recipe with a large image size makes more, smaller shards instead of one task that runs
out of memory."""

from __future__ import annotations

import pytest

from tests.datasets.conftest import image_lake

RECIPE = (
    'modality = "image"\n\n[image]\nsize = {size}\nchannels = 3\n\n'
    '[labels]\nrule = "parent_dir"\n\n[augment]\ncopies = {copies}\nops = ["hflip"]\n'
)


def _plan(store, home, size: int, copies: int = 0, **kwargs):
    from pipeline.datasets.build import plan
    from pipeline.datasets.recipes import load_recipe
    from pipeline.lake.scan import scan

    image_lake(home, per_class=30, recipe=RECIPE.format(size=size, copies=copies))  # 60 files
    scan(home / "lake", dataset="pets", store=store)
    return load_recipe("pets"), plan("pets", store=store, **kwargs)


def test_a_large_image_size_makes_more_smaller_shards_under_the_default_bound(store, home):
    from pipeline.datasets.shards import shard_decoded_bytes
    from pipeline.settings import get_settings

    bound = get_settings().shard_decoded_mb << 20
    assert bound == 1024 << 20  # the default
    recipe, shards = _plan(store, home, size=4096)
    # 3 x 4096 x 4096 bytes = 48 MiB a file: 21 files fit under 1 GiB, not the 60 (or 512).
    assert [len(s.files) for s in shards] == [21, 21, 18]
    assert all(shard_decoded_bytes(recipe, s.files) <= bound for s in shards)
    assert sorted(f.md5 for s in shards for f in s.files) == sorted(
        {f.md5 for s in shards for f in s.files}
    )


def test_small_images_still_make_one_shard(store, home):
    recipe, shards = _plan(store, home, size=64)
    assert [len(s.files) for s in shards] == [60]


def test_augmented_copies_count_towards_the_bound(store, home, monkeypatch):
    from pipeline.datasets.shards import shard_decoded_bytes
    from pipeline.settings import get_settings

    monkeypatch.setenv("SHARD_DECODED_MB", "16")
    get_settings.cache_clear()
    # 3 x 512 x 512 x (3 copies + 1) = 3 MiB a file: 5 files a shard under 16 MiB.
    recipe, shards = _plan(store, home, size=512, copies=3)
    assert [len(s.files) for s in shards] == [5] * 12
    assert all(shard_decoded_bytes(recipe, s.files) <= 16 << 20 for s in shards)


def test_a_file_above_the_bound_gets_a_shard_of_its_own(store, home):
    recipe, shards = _plan(store, home, size=2048, max_decoded_bytes=1 << 20)
    assert [len(s.files) for s in shards] == [1] * 60


def test_the_bound_must_be_positive(store, home):
    with pytest.raises(ValueError, match="max_decoded_bytes"):
        _plan(store, home, size=16, max_decoded_bytes=0)

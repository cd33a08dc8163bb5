"""Labels from folders follow ImageFolder: the class is the first folder under the dataset."""

from __future__ import annotations

from tests.datasets.conftest import image_lake, write_jpeg


def test_nested_folders_keep_the_class_of_their_first_folder(store, home):
    """`pets/cat/deep/er/x.jpg` is a cat: sub-folders never invent classes."""
    from pipeline.datasets.build import run_build
    from pipeline.datasets.queries import get_version
    from pipeline.datasets.reader import open_version

    image_lake(home, per_class=2)
    write_jpeg(home / "lake" / "pets" / "cat" / "deep" / "x.jpg", seed=71)
    write_jpeg(home / "lake" / "pets" / "dog" / "a" / "b" / "c" / "y.jpg", seed=72)

    v = run_build("pets", workers=1, store=store).version
    assert v is not None
    r = open_version("pets", store=store)
    assert r.classes == ["cat", "dog"]
    labels = {r.metadata(i)["path"]: r.metadata(i)["label"] for i in range(len(r))}
    assert labels["pets/cat/deep/x.jpg"] == "cat"
    assert labels["pets/dog/a/b/c/y.jpg"] == "dog"
    per_split = get_version(v.tag, store=store)["counts"]["per_split"]
    seen = set(per_split["train"]["classes"]) | set(per_split["val"]["classes"])
    assert seen == {"cat", "dog"}

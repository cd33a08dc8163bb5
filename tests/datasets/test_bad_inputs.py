"""A lake mixing good files with the bad-input corpus: the good ones build, each bad one is
listed with its reason, and the lake is byte-for-byte unchanged."""

from __future__ import annotations

from tests.datasets.conftest import tree_digest, write_recipe
from tests.datasets.corpus import corpus_recipe_toml, write_bad_corpus


def test_bad_inputs_are_listed_with_reasons_and_the_lake_is_untouched(store, home):
    from pipeline.datasets.build import run_build
    from pipeline.datasets.queries import get_version
    from pipeline.datasets.reader import open_version
    from pipeline.lake.ledger_query import list_files

    lake = home / "lake"
    expected: dict[str, dict[str, str | None]] = {}
    for modality, dataset in (("image", "imgs"), ("array", "arrs"), ("table", "rows")):
        write_recipe(home, dataset, corpus_recipe_toml(modality))
        expected[dataset] = write_bad_corpus(lake / dataset, modality=modality)
    before = tree_digest(lake)

    for dataset, exp in expected.items():
        report = run_build(dataset, workers=2, store=store, max_files=4)
        v = report.version
        assert v is not None, dataset
        info = get_version(v.tag, store=store)
        invalid = {
            (
                f"{r['path'].split('/', 1)[1]}#{r['line']}"
                if r["line"]
                else r["path"].split("/", 1)[1]
            ): r["reason"]
            for r in info["invalid_files"]
        }
        bad = {k: why for k, why in exp.items() if why is not None}
        good = {k for k, why in exp.items() if why is None}
        assert set(invalid) == set(bad), dataset
        for key, why in bad.items():
            assert why in invalid[key], (key, invalid[key])
        r = open_version(dataset, store=store)
        seen = set()
        for i in range(len(r)):
            meta = r.metadata(i)
            rel = meta["path"].split("/", 1)[1]
            seen.add(f"{rel}#{meta['line']}" if "line" in meta else rel)
        assert seen == good, dataset
        x, _ = r.get_batch(range(len(r)))
        assert x.shape[0] == len(good)

    # The ledger carries the verdict of every bad whole file (not of bad table rows).
    ledger = {f["path"]: f for f in list_files(status="invalid", store=store)}
    whole_files = {
        f"{ds}/{k}"
        for ds, exp in expected.items()
        for k, why in exp.items()
        if why and "#" not in k
    }
    assert set(ledger) == whole_files
    assert all(ledger[p]["error"] for p in ledger)

    # A rebuild does not decode the bad files again.
    for dataset in expected:
        again = run_build(dataset, workers=1, store=store)
        assert again.version is None and again.decoded == 0
    assert tree_digest(lake) == before

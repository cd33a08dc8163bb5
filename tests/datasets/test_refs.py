"""The one version-reference resolver (pipeline/datasets/refs.py): its rules, from the store
(both backends) and from the version folders alone, and that every entry point (queries, the
UI, the reader) answers with it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from pipeline.datasets import manifest as mf
from pipeline.datasets import refs
from pipeline.metadata.datasets import (
    VERSION_COMMITTED,
    VERSION_DELETED,
    DatasetHead,
    DatasetVersion,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def vid(head: str, fill: str) -> str:
    return head + fill * (64 - len(head))


# (dataset, version_id, created_at offset in seconds, status)
A = vid("abcd", "1")
B = vid("abcd", "2")
C = vid("9f", "3")  # the newest created of pets, but not its head
D = vid("abce", "4")  # cats
E = vid("e5e5", "5")  # pets, deleted by gc: no folder
OLD_SMALL = vid("7", "6")  # "old": no head, two versions created at the same second
OLD_BIG = vid("8", "6")
VERSIONS = [
    ("pets", A, 0, VERSION_COMMITTED),
    ("pets", B, 1, VERSION_COMMITTED),
    ("pets", C, 2, VERSION_COMMITTED),
    ("pets", E, 3, VERSION_DELETED),
    ("cats", D, 0, VERSION_COMMITTED),
    ("old", OLD_BIG, 5, VERSION_COMMITTED),
    ("old", OLD_SMALL, 5, VERSION_COMMITTED),
]
HEADS = {"pets": B, "cats": D}  # "old" was built before heads existed


def tag(dataset: str, version_id: str) -> str:
    return mf.tag_for(dataset, version_id, T0)


def write_folders(data_root: Path) -> None:
    for dataset, version_id, dt, status in VERSIONS:
        if status != VERSION_COMMITTED:
            continue
        folder = mf.version_dir(data_root, dataset, version_id)
        folder.mkdir(parents=True)
        manifest = {
            "format_version": 1,
            "dataset": dataset,
            "version_id": version_id,
            "tag": tag(dataset, version_id),
            "created_at": (T0 + timedelta(seconds=dt)).isoformat(),
        }
        (folder / mf.MANIFEST).write_text(json.dumps(manifest))
    for dataset, version_id in HEADS.items():
        mf.write_head(data_root, dataset, {"dataset": dataset, "version_id": version_id})
    # A build in progress: never a version, even with a manifest already written.
    staging = mf.datasets_root(data_root) / "pets" / f"{mf.STAGING_PREFIX}{vid('abcd', '9')}"
    staging.mkdir()
    (staging / mf.MANIFEST).write_text("{}")


def write_rows(store) -> None:
    with store.session() as s:
        for dataset, version_id, dt, status in VERSIONS:
            s.add(
                DatasetVersion(
                    version_id=version_id,
                    dataset=dataset,
                    tag=tag(dataset, version_id),
                    recipe_hash="r" * 64,
                    format="npy",
                    status=status,
                    path=mf.version_relpath(dataset, version_id),
                    manifest_sha256="0" * 64,
                    manifest="{}",
                    created_at=T0 + timedelta(seconds=dt),
                )
            )
        for dataset, version_id in HEADS.items():
            s.add(DatasetHead(dataset=dataset, version_id=version_id, moved_at=T0))


@pytest.fixture(params=["sqlite", "postgresql", "files"])
def lookup(request, tmp_path: Path):
    """``lookup(ref, dataset) -> version_id`` through the store on each backend, or through
    the version folders with no store at all."""
    data_root = tmp_path / "data"
    write_folders(data_root)
    if request.param == "files":
        yield lambda ref, dataset=None: refs.resolve(ref, dataset, data_root=data_root).version_id
        return
    from pipeline.metadata.store import MetadataStore

    url = (
        f"sqlite:///{tmp_path / 'metadata.db'}"
        if request.param == "sqlite"
        else request.getfixturevalue("pg_url")
    )
    store = MetadataStore(url)
    write_rows(store)
    yield lambda ref, dataset=None: refs.resolve(ref, dataset, store=store).version_id
    store.dispose()


def test_a_full_id_names_its_version_in_any_case_and_with_blanks(lookup):
    assert lookup(A, "pets") == A
    assert lookup(f"  {C.upper()} ", "pets") == C


def test_a_unique_prefix_of_four_or_more_digits_names_its_version(lookup):
    assert lookup("abcd1", "pets") == A
    assert lookup("9F33", "pets") == C
    assert lookup(D[:12], "cats") == D


def test_an_ambiguous_prefix_is_an_error_naming_the_matches(lookup):
    with pytest.raises(refs.AmbiguousVersion, match="ambiguous") as exc:
        lookup("abcd", "pets")
    assert tag("pets", A) in str(exc.value) and tag("pets", B) in str(exc.value)


def test_a_prefix_shorter_than_four_digits_is_not_a_prefix(lookup):
    # "9f" matches only C, but a 2-digit name would break as soon as another version came.
    with pytest.raises(refs.VersionNotFound, match="at least 4 hex digits"):
        lookup("9f", "pets")


def test_a_tag_names_its_version(lookup):
    assert lookup(tag("pets", A), "pets") == A
    assert lookup(tag("cats", D), "cats") == D


def test_latest_is_the_head_not_the_newest_created(lookup):
    assert lookup("latest", "pets") == B
    assert lookup(" latest ", "cats") == D


def test_latest_without_a_head_is_the_newest_created_smaller_id_on_a_tie(lookup):
    assert lookup("latest", "old") == OLD_SMALL


def test_latest_needs_a_dataset(lookup):
    with pytest.raises(refs.LatestNeedsDataset):
        lookup("latest")


def test_a_reference_matches_only_within_its_dataset(lookup):
    with pytest.raises(refs.VersionNotFound, match="no (committed )?version of dataset 'pets'"):
        lookup(D[:8], "pets")
    with pytest.raises(refs.VersionNotFound):
        lookup(tag("cats", D), "pets")


def test_unknown_and_empty_references_are_not_found(lookup):
    for ref in ("nope", "ffffffff", vid("f", "0"), ""):
        with pytest.raises(refs.VersionNotFound):
            lookup(ref, "pets")
    with pytest.raises(refs.VersionNotFound):
        lookup("latest", "dogs")


def test_a_staging_folder_is_never_a_version(lookup):
    # Its id shares the prefix "abcd" with A and B only: "abcd9" must name nothing.
    with pytest.raises(refs.VersionNotFound):
        lookup("abcd9", "pets")


def test_deleted_versions_match_only_when_asked_for(tmp_path: Path, store):
    write_rows(store)
    with pytest.raises(refs.VersionNotFound):
        refs.resolve(E[:8], "pets", store=store)
    got = refs.resolve(E[:8], "pets", store=store, include_deleted=True)
    assert (got.version_id, got.status) == (E, VERSION_DELETED)
    # latest is a committed version even for a caller that describes deleted ones.
    assert refs.resolve("latest", "pets", store=store, include_deleted=True).version_id == B


def test_without_a_dataset_the_store_searches_every_dataset(store):
    write_rows(store)
    got = refs.resolve(D[:6], store=store)
    assert (got.dataset, got.version_id, got.tag) == ("cats", D, tag("cats", D))
    assert got.path == f"datasets/cats/{D}"


REFS = [
    (A, "pets"),
    ("abcd1", "pets"),
    ("abcd", "pets"),
    ("9f", "pets"),
    ("9f3", "pets"),
    (tag("pets", C), "pets"),
    ("latest", "pets"),
    ("latest", "old"),
    (D[:8], "pets"),
    ("nope", "pets"),
]


def _answer(fn, ref, dataset):
    from pipeline.ui.errors import NotFound

    try:
        return fn(ref, dataset)
    except (refs.VersionNotFound, NotFound):  # the UI maps the resolver's errors to a 404
        return "no such version"


def test_every_entry_point_resolves_alike(store, tmp_path: Path, monkeypatch):
    """The CLI/API (queries), the UI, the reader with a store and the reader without one
    give the same version (or the same kind of error) for every reference."""
    from pipeline.datasets import queries, reader
    from pipeline.ui.refs import resolve as ui_resolve

    write_rows(store)
    data_root = tmp_path / "files"
    write_folders(data_root)
    # The reader's resolution only: the fake folders have no arrays to open.
    monkeypatch.setattr(reader, "VersionReader", lambda folder, _root: Path(folder).name)

    def ui(ref, dataset):
        with store.session() as s:
            return ui_resolve(store, s, ref, dataset).version_id

    entry_points = {
        "queries": lambda ref, d: queries.resolve_version(ref, d, store=store)["version_id"],
        "ui": ui,
        "reader+store": lambda ref, d: reader.open_version(
            d, ref, data_root=data_root, store=store
        ),
        "reader+files": lambda ref, d: reader.open_version(d, ref, data_root=data_root),
    }
    monkeypatch.delenv("METADATA_DB_URL")
    for ref, dataset in REFS:
        answers = {name: _answer(fn, ref, dataset) for name, fn in entry_points.items()}
        assert len(set(answers.values())) == 1, (ref, dataset, answers)


def test_resolving_from_the_files_loads_no_database_code(tmp_path: Path):
    """A training container without a store resolves from DATA_ROOT alone: SQLAlchemy (a
    third of a second to import) stays unloaded, and the committed status is the store's."""
    import subprocess
    import sys

    from pipeline.metadata.datasets import VERSION_COMMITTED as STORE_COMMITTED

    assert refs.VERSION_COMMITTED == STORE_COMMITTED
    write_folders(tmp_path)
    code = (
        "import sys\n"
        "from pipeline.datasets.reader import open_version\n"
        "from pipeline.datasets.refs import resolve\n"
        f"print(resolve('latest', 'pets', data_root={str(tmp_path)!r}).version_id)\n"
        "assert 'sqlalchemy' not in sys.modules, 'sqlalchemy was imported'\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == B

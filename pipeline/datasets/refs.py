"""The one place a version reference is turned into a version.

The CLI, the Python API (``queries``), the UI, the reader and the train DAG all resolve
through here, so a reference names the same version everywhere. The rules, in order:

1. Surrounding blanks are ignored; an empty reference is an error.
2. ``latest`` is the dataset's **head** (pipeline/datasets/head.py), never "the newest
   created", and needs a dataset. From the store: its ``dataset_heads`` row (a head on a
   version that is no longer committed names nothing). Without a store: the ``HEAD`` file.
   Data from before heads existed (no head row / no HEAD file): the newest created version,
   ties broken by the smaller version id — the same rule the store's fallback uses
   (``head.head_version``).
3. A full version id (64 hex digits, any case).
4. A tag, exactly (``<dataset>_v<YYYYMMDD>_<id[:8]>``).
5. A unique id prefix of at least ``MIN_PREFIX`` hex digits, any case. Two or more matches
   are an error that names them; a shorter prefix is never a prefix (it could only ever
   become ambiguous as versions are added).

Only committed and quarantined versions match (a quarantined one is held by the quality gate:
inspectable, never ``latest``; the train DAG refuses it), except for callers that describe
deleted (gc'd) versions too (the UI's version page: ``include_deleted=True``); ``latest`` is
always a committed version.
With a dataset, only that dataset's versions match. Without a store (a training container),
the version folders under ``DATA_ROOT/datasets/<dataset>/`` are the versions: a folder with a
``manifest.json``, never a staging folder; on an ``s3://`` DATA_ROOT, the prefixes under it
that hold a ``manifest.json`` object (written last by the publisher), and its ``HEAD`` object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pipeline.datasets import manifest as mf
from pipeline.datasets.manifest import VersionNotFound

if TYPE_CHECKING:  # SQLAlchemy only where a store is used: a store-less reader never loads it
    from sqlalchemy.orm import Session

    from pipeline.metadata.datasets import DatasetVersion

# pipeline.metadata.datasets.VERSION_COMMITTED, not imported for the reason above.
VERSION_COMMITTED = "committed"
# A version held by the quality gate (pipeline/datasets/quality/review.py) is matched by id,
# tag and prefix (it can be shown, diffed and exported), never by ``latest``.
VERSION_QUARANTINED = "quarantined"

__all__ = [
    "LATEST",
    "MIN_PREFIX",
    "AmbiguousVersion",
    "LatestNeedsDataset",
    "ResolvedVersion",
    "VersionNotFound",
    "resolve",
    "resolve_on_disk",
    "resolve_row",
]

LATEST = "latest"
# Four hex digits are 65,536 values: below that a prefix is a guess, not a name. The tables
# show 12 (cli_refs.SHORT_ID) and users copy 8 to 12.
MIN_PREFIX = 4
_FULL_ID = re.compile(r"[0-9a-f]{64}")
_PREFIX = re.compile(rf"[0-9a-f]{{{MIN_PREFIX},63}}")
_TAG_ID = re.compile(r".+_v\d{8}_([0-9a-f]{8})")
# How many matches an ambiguity error names.
_SHOW_MATCHES = 5


class AmbiguousVersion(VersionNotFound):
    """A prefix that matches several versions."""


class LatestNeedsDataset(VersionNotFound):
    """``latest`` without a dataset: a request error (the caller must add one)."""


@dataclass(frozen=True)
class ResolvedVersion:
    dataset: str
    version_id: str
    tag: str
    path: str  # the version folder, relative to DATA_ROOT
    status: str = VERSION_COMMITTED


def _clean(ref: str | None) -> str:
    ref = (ref or "").strip()
    if not ref:
        raise VersionNotFound(
            "empty version reference (an id, a unique id prefix, a tag or 'latest')"
        )
    return ref


def _not_found(ref: str, dataset: str | None, *, committed: bool = False) -> VersionNotFound:
    kind = "committed version" if committed else "version"
    where = f" of dataset {dataset!r}" if dataset else ""
    hint = (
        f" (an id prefix needs at least {MIN_PREFIX} hex digits)"
        if re.fullmatch(rf"[0-9a-fA-F]{{1,{MIN_PREFIX - 1}}}", ref)
        else ""
    )
    return VersionNotFound(
        f"no {kind}{where} matches {ref!r}: give an id, a unique id prefix, a tag or 'latest'{hint}"
    )


def _ambiguous(ref: str, names: list[str]) -> AmbiguousVersion:
    shown = ", ".join(names[:_SHOW_MATCHES]) + (", ..." if len(names) > _SHOW_MATCHES else "")
    return AmbiguousVersion(
        f"version prefix {ref!r} is ambiguous: it matches {shown}; give more digits"
    )


def _latest_needs_dataset() -> LatestNeedsDataset:
    return LatestNeedsDataset("'latest' needs a dataset name")


# --- from the store ---------------------------------------------------------------------------


def resolve_row(
    session: Session, ref: str, dataset: str | None = None, *, include_deleted: bool = False
) -> DatasetVersion:
    """The ``dataset_versions`` row ``ref`` names (the module's rules)."""
    from sqlalchemy import select

    from pipeline.datasets.head import head_version
    from pipeline.metadata.datasets import VERSION_COMMITTED, DatasetVersion

    ref = _clean(ref)
    if ref == LATEST:
        if not dataset:
            raise _latest_needs_dataset()
        row = head_version(session, dataset)
        if row is None:
            raise VersionNotFound(f"dataset {dataset!r} has no committed version")
        return row
    scope = select(DatasetVersion)
    if dataset:
        scope = scope.where(DatasetVersion.dataset == dataset)
    if not include_deleted:
        scope = scope.where(DatasetVersion.status.in_((VERSION_COMMITTED, VERSION_QUARANTINED)))
    low = ref.lower()
    if _FULL_ID.fullmatch(low):
        row = session.scalars(scope.where(DatasetVersion.version_id == low)).first()
        if row is not None:
            return row
    row = session.scalars(scope.where(DatasetVersion.tag == ref)).first()
    if row is not None:
        return row
    if _PREFIX.fullmatch(low):
        # A range on the primary key (not LIKE): an index scan on both backends.
        upper = low[:-1] + chr(ord(low[-1]) + 1)
        found = session.scalars(
            scope.where(DatasetVersion.version_id >= low, DatasetVersion.version_id < upper)
            .order_by(DatasetVersion.version_id)
            .limit(_SHOW_MATCHES + 1)
        ).all()
        if len(found) == 1:
            return found[0]
        if found:
            raise _ambiguous(ref, [v.tag for v in found])
    raise _not_found(ref, dataset, committed=not include_deleted)


def _from_row(v: DatasetVersion) -> ResolvedVersion:
    return ResolvedVersion(v.dataset, v.version_id, v.tag, v.path, v.status)


# --- from the files ---------------------------------------------------------------------------


def _version_folders(data_root: Path, dataset: str) -> list[Path]:
    base = mf.datasets_root(data_root) / dataset
    if not base.is_dir():
        raise VersionNotFound(f"dataset {dataset!r} has no versions under {base}")
    folders = sorted(
        p
        for p in base.iterdir()
        if p.is_dir() and not p.name.startswith(".") and (p / mf.MANIFEST).is_file()
    )
    if not folders:
        raise VersionNotFound(f"dataset {dataset!r} has no published versions under {base}")
    return folders


def _manifest_fields(folder: Path) -> dict[str, Any]:
    """tag and created_at of a version folder; {} when its manifest is unreadable (such a
    folder still matches by id, and the reader then names what is wrong with it)."""
    try:
        m = json.loads((folder / mf.MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return m if isinstance(m, dict) else {}


def resolve_on_disk(data_root: Path | str, dataset: str, ref: str) -> Path:
    """The version folder ``ref`` names, from ``DATA_ROOT/datasets/<dataset>/`` alone."""
    ref = _clean(ref)
    if not dataset:
        raise (
            _latest_needs_dataset()
            if ref == LATEST
            else VersionNotFound("resolving a version from the files needs a dataset name")
        )
    data_root = Path(data_root)
    folders = _version_folders(data_root, dataset)
    by_name = {p.name: p for p in folders}
    name = _pick(
        ref,
        dataset,
        sorted(by_name),
        fields=lambda n: _manifest_fields(by_name[n]),
        head=lambda: mf.read_head(data_root, dataset),
        head_where=str(mf.head_path(data_root, dataset)),
        where=str(folders[0].parent),
    )
    return by_name[name]


def resolve_on_s3(remote: str, dataset: str, ref: str) -> str:
    """The version id ``ref`` names, from ``s3://.../datasets/<dataset>/`` alone (its HEAD
    object and its manifests), by the same rules as the files of a local DATA_ROOT."""
    return locate_on_s3(remote, dataset, ref)[0]


def locate_on_s3(remote: str, dataset: str, ref: str) -> tuple[str, tuple[dict, bytes] | None]:
    """``resolve_on_s3``, with the version's manifest and its bytes when resolving read them
    (else None), so that opening the version need not GET them again.

    ``latest`` with a HEAD object costs two GETs and no LIST: HEAD names the version, and
    the GET of its manifest is the proof that it is published (the manifest is written last)
    as well as the read an open needs. Every other reference lists the published versions."""
    from pipeline.datasets import remote_files

    ref = _clean(ref)
    if not dataset:
        raise (
            _latest_needs_dataset()
            if ref == LATEST
            else VersionNotFound("resolving a version from the files needs a dataset name")
        )
    where = remote_files.dataset_url(remote, dataset)
    heads: list[dict | None] = []  # the HEAD object, once read

    def head() -> dict | None:
        if not heads:
            heads.append(remote_files.read_head(remote, dataset))
        return heads[0]

    if ref == LATEST:
        current = head()
        vid = current["version_id"] if current is not None else ""
        if _FULL_ID.fullmatch(vid):  # a HEAD of this laketrain; anything else: the rules below
            try:
                found = remote_files.find_manifest(remote, dataset, vid)
            except mf.ManifestError:
                return vid, None  # published but unreadable: opening it says what is wrong
            if found is None:
                raise VersionNotFound(
                    f"dataset {dataset!r}: {where}/{mf.HEAD} names version {vid}, which is "
                    f"not published under {where}"
                )
            return vid, found
    names = remote_files.version_ids(remote, dataset)
    if not names:
        raise VersionNotFound(f"dataset {dataset!r} has no published versions under {where}")
    read: dict[str, tuple[dict, bytes] | None] = {}

    def fields(name: str) -> dict:
        if name not in read:
            try:
                read[name] = remote_files.find_manifest(remote, dataset, name)
            except mf.ManifestError:
                read[name] = None  # it matches by id only, and opening it names what is wrong
        found = read[name]
        return found[0] if found is not None and isinstance(found[0], dict) else {}

    vid = _pick(
        ref,
        dataset,
        names,
        fields=fields,
        head=head,
        head_where=f"{where}/{mf.HEAD}",
        where=where,
    )
    return vid, read.get(vid)


def _pick(
    ref: str,
    dataset: str,
    names: list[str],
    *,
    fields: Callable[[str], dict[str, Any]],
    head: Callable[[], dict | None],
    head_where: str,
    where: str,
) -> str:
    """The module's rules over published version ids ``names`` (sorted), whose manifests
    ``fields`` reads and whose dataset's HEAD ``head`` reads: one version id."""
    known = set(names)
    if ref == LATEST:
        current = head()
        if current is not None:
            if current["version_id"] not in known:
                raise VersionNotFound(
                    f"dataset {dataset!r}: {head_where} names version "
                    f"{current['version_id']}, which is not published under {where}"
                )
            return current["version_id"]
        # Data from before heads: newest created, the smaller id on a tie (as the store).
        # Only format-1 folders count: every chunked (format 2) version was written by code
        # that keeps a HEAD file, so one without HEAD has no head yet (its only versions are
        # quarantined by the quality gate) and must not become `latest` by being the newest.
        old = [n for n in names if fields(n).get("format_version", 1) == 1]
        if not old:
            raise VersionNotFound(
                f"dataset {dataset!r} has no head yet: no version has been approved as latest"
                " (see `laketrain versions` for quarantined ones)"
            )
        newest = max(fields(n).get("created_at") or "" for n in old)
        return min(n for n in old if (fields(n).get("created_at") or "") == newest)
    low = ref.lower()
    if _FULL_ID.fullmatch(low) and low in known:
        return low
    # A tag carries its id's first 8 digits: read those manifests first, then all of them.
    m = _TAG_ID.fullmatch(ref)
    likely = [n for n in names if m and n.startswith(m.group(1))]
    for n in likely + [n for n in names if n not in likely]:
        if fields(n).get("tag") == ref:
            return n
    if _PREFIX.fullmatch(low):
        found = [n for n in names if n.startswith(low)]
        if len(found) == 1:
            return found[0]
        if found:
            raise _ambiguous(ref, [fields(n).get("tag") or n for n in found])
    raise _not_found(ref, dataset)


# --- either -----------------------------------------------------------------------------------


def resolve(
    ref: str,
    dataset: str | None = None,
    *,
    store: Any | None = None,
    data_root: Path | str | None = None,
    include_deleted: bool = False,
) -> ResolvedVersion:
    """The version ``ref`` names: from ``store`` when given, else from the version folders
    under ``data_root`` (default: the settings' DATA_ROOT), which needs ``dataset``."""
    if store is not None:
        with store.session() as session:
            return _from_row(resolve_row(session, ref, dataset, include_deleted=include_deleted))
    if data_root is None:
        from pipeline.settings import get_settings

        data_root = get_settings().data_root
    if isinstance(data_root, str) and data_root.startswith("s3://"):
        from pipeline.datasets import remote_files

        vid = resolve_on_s3(data_root, dataset or "", ref)
        tag = remote_files.manifest_fields(data_root, dataset or "", vid).get("tag") or ""
        return ResolvedVersion(dataset or "", vid, tag, mf.version_relpath(dataset or "", vid))
    folder = resolve_on_disk(data_root, dataset or "", ref)
    tag = _manifest_fields(folder).get("tag") or ""
    return ResolvedVersion(
        dataset or "", folder.name, tag, mf.version_relpath(dataset or "", folder.name)
    )

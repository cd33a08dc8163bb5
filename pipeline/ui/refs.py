"""Resolving a version reference for the Datasets app: an id, a unique id prefix, a tag, or
``latest`` (with a dataset).

``latest`` is owned by ``pipeline.datasets.queries.resolve_version`` — the same answer the
CLI, the reader and the trainer get — so the page can never show another version as latest.
The other references also match deleted (gc'd) versions, which the page still describes.
"""

from __future__ import annotations

import re

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from pipeline.metadata.datasets import DatasetVersion
from pipeline.metadata.store import MetadataStore
from pipeline.ui.errors import BadRequest, NotFound

LATEST = "latest"


def resolve(
    store: MetadataStore, session: Session, ref: str, dataset: str | None = None
) -> DatasetVersion:
    """The version ``ref`` names (within ``dataset`` when given)."""
    ref = (ref or "").strip()
    if not ref:
        raise NotFound("empty version reference")
    if ref == LATEST:
        return _latest(store, session, dataset)
    scope = select(DatasetVersion)
    if dataset:
        scope = scope.where(DatasetVersion.dataset == dataset)
    exact = session.scalars(
        scope.where(or_(DatasetVersion.version_id == ref, DatasetVersion.tag == ref))
    ).first()
    if exact is not None:
        return exact
    if re.fullmatch(r"[0-9a-f]{4,63}", ref):
        # The upper bound makes the prefix match a range scan on the primary key.
        upper = ref[:-1] + chr(ord(ref[-1]) + 1)
        found = session.scalars(
            scope.where(DatasetVersion.version_id >= ref, DatasetVersion.version_id < upper).limit(
                2
            )
        ).all()
        if len(found) == 1:
            return found[0]
        if len(found) > 1:
            raise NotFound(f"version prefix {ref!r} is ambiguous: give more digits")
    raise NotFound(f"no version {ref!r}" + (f" in dataset {dataset!r}" if dataset else ""))


def _latest(store: MetadataStore, session: Session, dataset: str | None) -> DatasetVersion:
    from pipeline.datasets.queries import VersionNotFound, resolve_version

    if not dataset:
        raise BadRequest("'latest' needs a dataset: add ?dataset=<name>")
    try:
        summary = resolve_version(LATEST, dataset, store=store)
    except VersionNotFound as exc:
        raise NotFound(str(exc)) from None
    row = session.get(DatasetVersion, summary["version_id"])
    if row is None:  # published between the two reads cannot unpublish; this is a race only
        raise NotFound(f"dataset {dataset!r}: latest version {summary['version_id']} vanished")
    return row


def resolve_pair(
    store: MetadataStore, session: Session, a: str, b: str, dataset: str | None
) -> tuple[DatasetVersion, DatasetVersion]:
    """Both ends of a diff. ``latest`` without a dataset takes the other end's dataset
    (``diff <id> latest`` means the latest of that id's dataset)."""
    if dataset is None and (a.strip() == LATEST) != (b.strip() == LATEST):
        other = resolve(store, session, b if a.strip() == LATEST else a)
        dataset = other.dataset
    return resolve(store, session, a, dataset), resolve(store, session, b, dataset)

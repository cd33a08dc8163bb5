"""Resolving a version reference for the Datasets app: an id, a unique id prefix, a tag, or
``latest`` (with a dataset), by the one rule set of ``pipeline.datasets.refs`` — the same
answer the CLI, the reader and the trainer get.

The page also describes deleted (gc'd) versions, so every reference but ``latest`` matches
them too. A reference that names nothing is a 404; ``latest`` without a dataset is a request
error (400) whose message says what to add.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from pipeline.datasets.refs import LATEST, LatestNeedsDataset, VersionNotFound, resolve_row
from pipeline.metadata.datasets import DatasetVersion
from pipeline.metadata.store import MetadataStore
from pipeline.ui.errors import BadRequest, NotFound

__all__ = ["LATEST", "resolve", "resolve_pair"]


def resolve(
    store: MetadataStore, session: Session, ref: str, dataset: str | None = None
) -> DatasetVersion:
    """The version ``ref`` names (within ``dataset`` when given)."""
    del store  # kept in the signature: every page handler passes it
    try:
        return resolve_row(session, ref, dataset, include_deleted=True)
    except LatestNeedsDataset:
        raise BadRequest("'latest' needs a dataset: add ?dataset=<name>") from None
    except VersionNotFound as exc:
        raise NotFound(str(exc)) from None


def resolve_pair(
    store: MetadataStore, session: Session, a: str, b: str, dataset: str | None
) -> tuple[DatasetVersion, DatasetVersion]:
    """Both ends of a diff. ``latest`` without a dataset takes the other end's dataset
    (``diff <id> latest`` means the latest of that id's dataset)."""
    if dataset is None and (a.strip() == LATEST) != (b.strip() == LATEST):
        other = resolve(store, session, b if a.strip() == LATEST else a)
        dataset = other.dataset
    return resolve(store, session, a, dataset), resolve(store, session, b, dataset)

"""The query and path parameters of the Datasets app, bounded and validated in one place.

Every integer has an upper bound: an unbounded ``offset=2**63`` reaches the database driver
and fails there (OverflowError, a 500); bounded, it is a 422 naming the parameter. Dataset
names pass the rule ``load_recipe`` uses (``check_dataset_name``), so ``../etc`` is refused for
its name on every route. Strings that reach SQL must not hold NUL (PostgreSQL refuses them).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import AfterValidator

# Far above any real listing (a version of a billion samples is out of this platform's scope),
# far below the 64-bit limits of SQLite and PostgreSQL.
MAX_OFFSET = 1_000_000_000
MAX_PAGE = 1_000_000
MAX_LIMIT = 500
MAX_REF = 512  # dataset_versions.tag is String(512); an id is 64 hex digits


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain a NUL character")
    return value


def _dataset_name(value: str | None) -> str | None:
    """None for an absent or empty name (= every dataset); the name if it is one lake folder."""
    if value is None or value == "":
        return None
    from pipeline.datasets.recipes import check_dataset_name

    return check_dataset_name(value)


def _required_dataset_name(value: str) -> str:
    from pipeline.datasets.recipes import check_dataset_name

    return check_dataset_name(value)


# ``?dataset=`` on any route: optional, empty means "all datasets".
DatasetQuery = Annotated[
    str | None,
    Query(max_length=255, description="dataset name (a first-level lake folder)"),
    AfterValidator(_dataset_name),
]
# ``/datasets/{name}/...``: the ``path`` converter lets ``a/b`` reach the check (and be refused
# for its name) instead of falling through to a bare 404.
DatasetPath = Annotated[str, Path(max_length=255), AfterValidator(_required_dataset_name)]
VersionRef = Annotated[str, Path(min_length=1, max_length=MAX_REF), AfterValidator(_no_nul)]
RefQuery = Annotated[str, Query(min_length=1, max_length=MAX_REF), AfterValidator(_no_nul)]
SearchQuery = Annotated[str, Query(min_length=1, max_length=4096), AfterValidator(_no_nul)]
SearchBox = Annotated[str, Query(max_length=4096), AfterValidator(_no_nul)]  # may be empty
Offset = Annotated[int, Query(ge=0, le=MAX_OFFSET)]
Page = Annotated[int, Query(ge=1, le=MAX_PAGE)]


def clamp(limit: int, offset: int) -> tuple[int, int]:
    """Keep a client's paging inside sane bounds (a huge limit would defeat pagination, an
    offset past 2**63 overflows the database driver)."""
    return max(1, min(int(limit), MAX_LIMIT)), max(0, min(int(offset), MAX_OFFSET))


def limit(default: int) -> object:
    """A ``limit`` query parameter with its default, 1..MAX_LIMIT."""
    return Query(default, ge=1, le=MAX_LIMIT)

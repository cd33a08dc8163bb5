"""What a user types on the command line, turned into what the queries take: the dataset that
``latest`` means, whether a dataset name is known, and the lake path a file argument names.

Kept out of ``commands.py`` so that the commands stay thin and this logic is testable alone.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import select

from pipeline.datasets.manifest import VersionNotFound
from pipeline.metadata.datasets import VERSION_COMMITTED, DatasetVersion
from pipeline.metadata.ledger import LedgerFile
from pipeline.metadata.store import MetadataStore, open_store

# What the tables show of an id or an md5: enough to be unique in practice, short enough that
# an 80-column table never wraps it; `show`/`diff`/`export` take it as a prefix.
SHORT_ID = 12
_MD5 = re.compile(r"[0-9a-fA-F]{32}")


def datasets_with_versions(store: MetadataStore | None = None) -> list[str]:
    store = store or open_store()
    with store.session() as session:
        return sorted(
            session.scalars(
                select(DatasetVersion.dataset)
                .where(DatasetVersion.status.in_((VERSION_COMMITTED, "quarantined")))
                .distinct()
            )
        )


def known_datasets(lake_dir: Path | str | None, store: MetadataStore | None = None) -> list[str]:
    """Every dataset name the platform knows: with versions, in the ledger, or a lake folder
    (so `versions pets` right after a drop is an empty list, not an error)."""
    store = store or open_store()
    with store.session() as session:
        names = set(session.scalars(select(DatasetVersion.dataset).distinct())) | set(
            session.scalars(
                select(LedgerFile.dataset).where(LedgerFile.deleted_at.is_(None)).distinct()
            )
        )
    if isinstance(lake_dir, str) and lake_dir.startswith("s3://"):
        from pipeline.storage.listing import LakeReader

        # One delimited listing: the lake's first-level prefixes.
        folders, _ = LakeReader().top_level(lake_dir)
        names |= {n for n in folders if not n.startswith((".", "_"))}
    elif lake_dir is not None and Path(lake_dir).is_dir():
        with os.scandir(lake_dir) as entries:
            names |= {
                e.name
                for e in entries
                if e.is_dir(follow_symlinks=False) and not e.name.startswith((".", "_"))
            }
    return sorted(n for n in names if n)


def unknown_dataset_message(name: str, known: list[str]) -> str:
    listed = ", ".join(known) if known else "none yet (drop files into the lake and build)"
    return f"unknown dataset {name!r}; known datasets: {listed}"


def dataset_for_refs(
    refs: list[str], dataset: str | None, *, store: MetadataStore | None = None
) -> str | None:
    """The dataset ``latest`` among ``refs`` stands for: ``dataset`` when given; else the
    dataset of another ref (``diff 4958 latest``); else the only dataset with versions.
    None when no ref is ``latest`` (an id or a tag names its dataset itself)."""
    from pipeline.datasets.refs import LATEST, resolve

    if dataset is not None or not any(r.strip() == LATEST for r in refs):
        return dataset
    for ref in refs:
        if ref.strip() != LATEST:
            return resolve(ref, store=store or open_store()).dataset
    names = datasets_with_versions(store)
    if len(names) == 1:
        return names[0]
    if not names:
        raise VersionNotFound("'latest': no dataset has a committed version yet")
    raise VersionNotFound(
        f"'latest' needs a dataset: add --dataset NAME (datasets with versions: {', '.join(names)})"
    )


def lake_path_candidates(
    arg: str,
    *,
    dataset: str | None,
    lake_dir: Path | str,
    datasets: list[str],
    cwd: Path | None = None,
) -> list[str]:
    """The lake paths (posix, relative to the lake root) a file argument may mean, most
    specific first: an absolute path or a cwd-relative path that lies in the lake
    (``var/lake/digits/3/0042.png``); a path relative to ``--dataset``'s folder (``3/0042.png``),
    or to the only dataset; the argument as a lake path (``digits/3/0042.png``). An md5 is
    returned as is. Raises ValueError for an absolute path outside the lake."""
    from pipeline.lake.walk import escape_path

    key = arg.strip()
    if _MD5.fullmatch(key):
        return [key]
    shown = lake_dir
    if isinstance(lake_dir, str) and lake_dir.startswith("s3://"):
        # An S3 lake: an object URL under it names its lake path; a plain path is relative.
        root = lake_dir.rstrip("/") + "/"
        if key.startswith("s3://"):
            if not key.startswith(root) or key == root:
                raise ValueError(f"{arg} is not inside the lake ({lake_dir})")
            return [key[len(root) :]]
        lake_dir = None  # type: ignore[assignment]
    p = Path(key)
    out: list[str] = []
    inside = (
        None
        if lake_dir is None
        else _inside_lake(lake_dir, p if p.is_absolute() else (cwd or Path.cwd()) / p)
    )
    if p.is_absolute():
        if inside is None:
            raise ValueError(f"{arg} is not inside the lake ({shown})")
        return [escape_path(inside)]
    if inside is not None:
        out.append(inside)
    rel = p.as_posix().lstrip("/")
    if rel.startswith("./"):
        rel = rel[2:]
    if dataset is not None:
        out.append(f"{dataset}/{rel}")
    elif len(datasets) == 1 and not rel.startswith(datasets[0] + "/"):
        out.append(f"{datasets[0]}/{rel}")
    out.append(rel)
    # A name that is not UTF-8 is in the ledger escaped (pipeline.lake.walk).
    return list(dict.fromkeys(escape_path(c) for c in out))


def _inside_lake(lake_dir: Path, path: Path) -> str | None:
    """``path`` relative to the lake root when it lies under it (symlinked roots included)."""
    target = os.path.normpath(os.path.abspath(path))
    for root in {os.path.abspath(lake_dir), os.path.realpath(lake_dir)}:
        for t in (
            target,
            os.path.join(os.path.realpath(os.path.dirname(target)), os.path.basename(target)),
        ):
            if t != root and os.path.commonpath([root, t]) == root:
                return Path(os.path.relpath(t, root)).as_posix()
    return None


@dataclass
class Holders:
    """What `contains` found: ``key`` is the lake path (or md5) that matched, ``rows`` the
    versions holding it (queries.versions_containing), ``rejected`` its ledger verdict when the
    lake's file under that name is rejected now (pipeline.lake.rejected)."""

    key: str
    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)


def lake_file_holders(
    arg: str,
    *,
    dataset: str | None,
    lake_dir: Path | str,
    store: MetadataStore | None = None,
    cwd: Path | None = None,
) -> Holders:
    """The versions holding the file ``arg`` names (see lake_path_candidates), and whether
    the lake's file is rejected: the first candidate any version holds wins, else the first
    the ledger rejected."""
    from pipeline.datasets.queries import versions_containing
    from pipeline.lake.rejected import find_rejected

    store = store or open_store()
    known = [dataset] if dataset is not None else known_datasets(lake_dir, store)
    candidates = lake_path_candidates(
        arg, dataset=dataset, lake_dir=lake_dir, datasets=known, cwd=cwd
    )
    for key in candidates:
        rows = versions_containing(key, store=store)
        if rows:
            # Held by versions, and maybe rejected now (its bytes changed into a bad file).
            now = [] if _MD5.fullmatch(key) else find_rejected(key, store=store)
            return Holders(key, rows, [r for r in now if r["path"] == key])
    for key in candidates:
        rejected = find_rejected(key, store=store)
        if rejected:
            return Holders(key, [], rejected)
    return Holders(candidates[0])

"""The page's search: which committed versions hold a file, and whether the lake rejected it.

A rejected file (corrupt, empty, unreadable, refused) is in no version, so a search by versions
alone answers "no match" for a file the user can see in the lake; the ledger says why instead.
"""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy import select

from pipeline.metadata.datasets import DatasetVersion
from pipeline.metadata.store import MetadataStore
from pipeline.ui.params import clamp

_MD5 = re.compile(r"^[0-9a-fA-F]{32}$")


def versions_containing(store: MetadataStore, q: str, *, limit: int = 200) -> dict[str, Any]:
    """Which committed versions hold a file, by md5 (32 hex digits) or by exact lake path
    (the datasets' own query); a path may also be given without its dataset folder.
    ``rejected`` lists the lake files of that path or md5 that the platform rejected, with
    the reason."""
    from pipeline.datasets import queries
    from pipeline.lake.rejected import find_rejected

    q = (q or "").strip()
    limit, _ = clamp(limit, 0)
    if not q:
        return {"query": q, "kind": None, "matches": [], "rejected": []}
    kind = "md5" if _MD5.match(q) else "path"
    matches = queries.versions_containing(q, limit=limit, store=store)
    if not matches and kind == "path":
        with store.session() as s:
            names = s.scalars(select(DatasetVersion.dataset).distinct()).all()
        for name in names:
            if not q.lstrip("/").startswith(name + "/"):
                matches += queries.versions_containing(
                    f"{name}/{q.lstrip('/')}", limit=limit, store=store
                )
        matches.sort(key=lambda m: m["created_at"], reverse=True)
    rejected = find_rejected(q, limit=limit, store=store)
    return {"query": q, "kind": kind, "matches": matches[:limit], "rejected": rejected}

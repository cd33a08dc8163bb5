"""What a commit needs from its parent version, read at the cost of what changed.

A chunked parent (manifest format 2) is read through its chunks, never a row per sample:
- the splits already decided (md5 -> split, which spares the split hash of every content
  already placed) come from its leaves' ``.idx`` files, in numpy;
- the diff counts (added / removed / changed paths) compare the two leaf lists: a leaf in both
  holds the same samples in both, so only the new version's own leaves (in memory) and the
  parent's own leaves (their ``chunk_entries`` rows) are read, plus the exact first sample of
  the paths on their edges (a path whose rows a cut split may also lie in a shared leaf).
A format-1 parent has no leaves: it is read whole, as before chunks (``_version_paths``).
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path

import numpy as np
from sqlalchemy.orm import Session

from pipeline.datasets.build.assemble import _diff, _version_paths
from pipeline.datasets.build.values import _Sample
from pipeline.datasets.chunkread import read_index, walk_leaves
from pipeline.datasets.chunks import Tree
from pipeline.datasets.version_rows import leaf_entries, leaf_hashes, path_diff, paths_in


@dataclass
class Parent:
    """The head a commit builds on (``version_id`` None: the dataset's first version)."""

    version_id: str | None
    manifest: dict | None = None
    leaves: list[str] = field(default_factory=list)  # empty: format 1, or no parent
    _rows: tuple[dict, dict] | None = None

    @classmethod
    def of(cls, session: Session, latest) -> Parent:
        if latest is None:
            return cls(None)
        manifest = json.loads(latest.manifest) if latest.manifest else {}
        leaves = leaf_hashes(session, latest.version_id) if "chunks" in manifest else []
        return cls(latest.version_id, manifest, leaves)

    @property
    def chunked(self) -> bool:
        return bool(self.leaves)

    def rows(self, session: Session) -> tuple[dict, dict]:
        """Format 1: ({path: (md5, label)}, {md5: split}) of every sample, read once."""
        if self._rows is None:
            self._rows = _version_paths(session, self.version_id) if self.version_id else ({}, {})
        return self._rows

    def splits(self, session: Session, data_root: Path) -> dict[str, str]:
        """md5 -> split of the parent's samples (the last sample of an md5 wins, as before)."""
        if not self.chunked:
            return self.rows(session)[1]
        parts = [
            read_index(data_root, leaf) for leaf in walk_leaves(data_root, self.manifest["chunks"])
        ]
        if not parts:
            return {}
        md5 = np.concatenate([p["md5"] for p in parts]).astype("U32").tolist()
        split = np.where(np.concatenate([p["split"] for p in parts]) != 0, "val", "train")
        return dict(zip(md5, split.tolist(), strict=True))

    def diff_counts(
        self, session: Session, samples: Sequence[_Sample], tree: Tree | None
    ) -> dict[str, int]:
        """The counts of path_diff(parent, new version) by lake path (md5 and label)."""
        if not self.chunked or tree is None:
            return _diff(self.rows(session)[0] if self.version_id else {}, samples)
        old_only = set(self.leaves) - {leaf.hash for leaf in tree.leaves}
        shared = set(self.leaves) - old_only
        edges: set[str] = set()
        new_map: dict[str, tuple] = {}
        for leaf, (start, stop) in zip(tree.leaves, tree.bounds, strict=True):
            if leaf.hash in shared or start == stop:
                continue
            edges.update((samples[start].path, samples[stop - 1].path))
            for s in samples[start:stop]:
                new_map.setdefault(s.path, (s.md5, s.label))
        old_map: dict[str, tuple] = {}
        entries = leaf_entries(session, sorted(old_only))
        for h in self.leaves:
            part = entries.get(h)
            if part:
                edges.update((part[0][0], part[-1][0]))
                for path, md5, label, _split in part:
                    old_map.setdefault(path, (md5, label))
        exact = sorted(edges)
        for p in exact:
            new_map.pop(p, None)
            old_map.pop(p, None)
        by_path = attrgetter("path")
        for p in exact:
            i = bisect_left(samples, p, key=by_path)
            if i < len(samples) and samples[i].path == p:
                new_map[p] = (samples[i].md5, samples[i].label)
        old_map.update({p: v[:2] for p, v in paths_in(session, self.version_id, exact).items()})
        d = path_diff(old_map, new_map)
        return {k: len(d[k]) for k in ("added", "removed", "changed")}

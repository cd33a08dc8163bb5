"""Synthetic dataset-version rows written straight into a store, for page/API rendering tests.

Real builds are used where the data path matters (thumbnails, the browser journey); these rows
let a test state exactly which paths each version holds and check the diff/contains answers
against a set computation in Python.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pipeline.metadata.datasets import DatasetVersion, VersionInvalid, VersionSample

EVIL = "<script>alert(1)</script>.png"


def md5_of(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


@dataclass
class SynthVersion:
    dataset: str
    files: dict[str, tuple[str, str]]  # path -> (md5, label)
    parent: SynthVersion | None = None
    invalid: list[tuple[str, str]] = field(default_factory=list)
    version_id: str = ""
    tag: str = ""


def split_of(md5: str) -> str:
    return "val" if int(md5[:2], 16) < 52 else "train"


def add_versions(store, versions: list[SynthVersion], *, start: datetime | None = None) -> None:
    """Insert the versions in order (each a second newer than the one before)."""
    t0 = start or datetime(2026, 1, 1, tzinfo=UTC)
    with store.session() as s:
        for i, v in enumerate(versions):
            key = json.dumps(sorted(v.files.items()))
            v.version_id = hashlib.sha256((v.dataset + key).encode()).hexdigest()
            v.tag = f"{v.dataset}_v20260101_{v.version_id[:8]}"
            prev = v.parent.files if v.parent else {}
            added = len(v.files.keys() - prev.keys())
            removed = len(prev.keys() - v.files.keys())
            changed = sum(1 for p in v.files.keys() & prev.keys() if v.files[p] != prev[p])
            splits = [split_of(m) for m, _ in v.files.values()]
            labels = sorted({lab for _, lab in v.files.values() if lab is not None})
            manifest = {
                "format_version": 1,
                "modality": "image",
                "classes": labels,
                "recipe": {"name": v.dataset},
            }
            s.add(
                DatasetVersion(
                    version_id=v.version_id,
                    dataset=v.dataset,
                    tag=v.tag,
                    parent_id=v.parent.version_id if v.parent else None,
                    recipe_hash="r" * 64,
                    format="npy",
                    status="committed",
                    samples=len(v.files),
                    train=splits.count("train"),
                    val=splits.count("val"),
                    files=len(v.files),
                    invalid=len(v.invalid),
                    added=added,
                    removed=removed,
                    changed=changed,
                    path=f"datasets/{v.dataset}/{v.version_id}",
                    manifest_sha256="0" * 64,
                    manifest=json.dumps(manifest),
                    created_at=t0 + timedelta(seconds=i),
                )
            )
            for idx, (path, (md5, label)) in enumerate(sorted(v.files.items())):
                s.add(
                    VersionSample(
                        version_id=v.version_id,
                        idx=idx,
                        path=path,
                        md5=md5,
                        label=label,
                        split=split_of(md5),
                        duplicate=False,
                    )
                )
            for path, reason in v.invalid:
                s.add(
                    VersionInvalid(
                        version_id=v.version_id, path=path, md5=md5_of(path), reason=reason
                    )
                )


def three_versions(dataset: str = "pets") -> list[SynthVersion]:
    """v1 → v2 (adds, removes, changes one file, adds the evil name) → v3 (adds more)."""
    v1 = SynthVersion(
        dataset,
        {
            f"{dataset}/{c}/img_{i:03d}.png": (md5_of(f"{c}{i}"), c)
            for c in ("cat", "dog")
            for i in range(10)
        },
    )
    f2 = dict(v1.files)
    del f2[f"{dataset}/cat/img_000.png"]
    del f2[f"{dataset}/dog/img_009.png"]
    f2[f"{dataset}/dog/img_001.png"] = (md5_of("dog1-edited"), "dog")
    f2[f"{dataset}/<script>alert(1)</script>.png"] = (md5_of("evil"), "<b>bold</b>")
    for i in range(10, 15):
        f2[f"{dataset}/cat/img_{i:03d}.png"] = (md5_of(f"cat{i}"), "cat")
    v2 = SynthVersion(
        dataset,
        f2,
        parent=v1,
        invalid=[
            (
                f"{dataset}/cat/<img src=x onerror=alert(2)>.png",
                "cannot identify image file <img src=x onerror=alert(3)>",
            )
        ],
    )
    f3 = dict(f2)
    for i in range(20, 23):
        f3[f"{dataset}/bird/img_{i:03d}.png"] = (md5_of(f"bird{i}"), "bird")
    v3 = SynthVersion(dataset, f3, parent=v2)
    return [v1, v2, v3]

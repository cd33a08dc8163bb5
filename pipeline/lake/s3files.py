"""The files of one dataset of an S3 lake, for the few readers that look at a dataset's
files outside the scan: the default recipe (the most common file type, the first file's
header) and the labels sidecar. Listing and GET only; the lake is never written.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path, PurePosixPath

from pipeline.lake.s3walk import is_ignored_key, key_problem
from pipeline.storage.listing import LakeReader, prefix_of, temp_name
from pipeline.storage.urls import join


class S3DatasetFiles:
    """``paths()``: the dataset's files the scan would take, by key relative to the dataset
    (ignored and refused keys left out); ``local(path)``: one of them downloaded into a
    temporary folder that ``close()`` removes."""

    def __init__(self, lake: str, dataset: str, reader: LakeReader | None = None) -> None:
        self.lake = lake.rstrip("/")
        self.dataset = dataset
        self.reader = reader or LakeReader()
        self._tmp: str | None = None

    @property
    def url(self) -> str:
        return join(self.lake, self.dataset)

    def paths(self) -> list[PurePosixPath]:
        _, prefix = prefix_of(self.lake)
        below = f"{prefix}{self.dataset}/"
        out = []
        for obj in self.reader.objects(self.url, prefix=below):
            rel = obj.key[len(below) :]
            full = f"{self.dataset}/{rel}"
            if rel and not rel.endswith("/") and not is_ignored_key(full):
                if key_problem(full) is None:
                    out.append(PurePosixPath(rel))
        return sorted(out)

    def read_bytes(self, rel: str) -> bytes:
        """One object's bytes (small files only: a sidecar). FileNotFoundError if missing."""
        return self.reader.store.read_bytes(join(self.url, rel))

    def local(self, rel: PurePosixPath | str) -> Path:
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="laketrain-lake-")
        local = temp_name(Path(self._tmp), str(rel))
        self.reader.download(join(self.url, str(rel)), local)
        return local

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> S3DatasetFiles:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

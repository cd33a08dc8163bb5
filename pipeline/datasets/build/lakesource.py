"""Where ``process`` reads a shard's source files: a lake folder, or a lake in S3.

Either way a file is decoded only when its bytes still have the md5 the scan recorded (a file
that changed or went away since is left for the next scan, nothing recorded); ``process`` asks
for a local file here only when its stat key is no longer the ledger's (processing.py). From S3 each
object is streamed once (GET) into a private temporary folder, its MD5 computed on the way, then
decoded from there and removed: decoders open local files (Pillow, numpy, pyarrow), and an
object read twice could change in between. The lake itself is only ever read.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pipeline.datasets.errors import BuildError


class LakeSource:
    """``with source.local_copy(relpath, md5) as path``: a local file with exactly those
    bytes, or None when the lake no longer has them."""

    def __init__(self, lake: Path | str) -> None:
        from pipeline.storage.urls import is_s3

        self.s3 = is_s3(lake)
        self.lake = lake
        self._tmp: str | None = None
        self._reader = None
        if self.s3:
            from pipeline.storage.listing import LakeReader

            self._reader = LakeReader()
            self._tmp = tempfile.mkdtemp(prefix="laketrain-lake-")

    def close(self) -> None:
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def __enter__(self) -> LakeSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def local_copy(self, relpath: str, md5: str) -> Iterator[str | None]:
        if not self.s3:
            from pipeline.datasets.build.processing import _md5_of

            abspath = str(Path(self.lake) / relpath)
            yield abspath if _md5_of(abspath) == md5 else None
            return
        from pipeline.storage.listing import is_transient, temp_name
        from pipeline.storage.urls import join

        url = join(str(self.lake), relpath)
        local = temp_name(Path(self._tmp or "."), relpath)
        try:
            try:
                got = self._reader.download(url, local)  # type: ignore[union-attr]
            except FileNotFoundError:
                got = None  # deleted since the scan: the next scan records it
            except Exception as exc:
                if is_transient(exc):
                    # Not a verdict on the object: fail the shard, naming the URL.
                    raise BuildError(
                        f"{relpath}: cannot read {exc}; nothing of its shard was recorded, "
                        "rerun the build"
                    ) from exc
                got = None  # unreadable now (access denied...): like an unreadable file
            yield str(local) if got == md5 else None
        finally:
            local.unlink(missing_ok=True)

"""Content-addressed files written once, synced in batches (chunk leaves and nodes)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from pipeline.storage.durable import TEMP_PREFIX, fsync_dirs, sync_all


class OnceWriter:
    """Content-addressed files written once, synced in batches: every file of a batch is written
    to its temp name first, then all are fdatasync'd together (durable.sync_all), then renamed
    into place (in the order added). One journal commit then carries many files' blocks
    (ext4), as with a version's own files (manifest.write_all_synced): a commit's dozen new
    leaves cost about one disk flush, not two each. A batch is flushed at ``limit`` bytes, so
    a full build's leaves never sit in memory together. A name that exists is reused, never rewritten; two writers of one name write the
    same bytes, so whichever rename lands last is harmless."""

    def __init__(self, limit: int = 16 << 20) -> None:
        self.limit = limit
        self._todo: list[tuple[Path, Path, bytes]] = []
        self._size = 0
        self.dirs: set[Path] = set()

    def add(self, dest: Path, data: bytes) -> int:
        """Bytes this will write (0: the file exists)."""
        if dest.exists():
            return 0
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f"{TEMP_PREFIX}{dest.name}.{os.getpid()}.{secrets.token_hex(4)}")
        self._todo.append((tmp, dest, data))
        self._size += len(data)
        if self._size >= self.limit:
            self.flush()
        return len(data)

    def flush(self) -> None:
        todo, self._todo, self._size = self._todo, [], 0
        handles = []
        try:
            for tmp, _dest, data in todo:
                fh = open(tmp, "wb")  # noqa: SIM115 - closed below, after the syncs
                handles.append(fh)
                fh.write(data)
                fh.flush()
            sync_all([fh.fileno() for fh in handles])
        except BaseException:
            for tmp, _dest, _data in todo:
                tmp.unlink(missing_ok=True)
            raise
        finally:
            for fh in handles:
                fh.close()
        for tmp, dest, _data in todo:
            os.rename(tmp, dest)
            self.dirs.add(dest.parent)

    def close(self) -> None:
        """Flush, then sync every folder renamed into (the renames are durable after this)."""
        self.flush()
        fsync_dirs(self.dirs)

"""Objects as files under a local folder (``file:///abs/dir`` URLs).

Every write is temp file + fsync + rename (``pipeline.storage.durable``), so a reader never
sees half an object, and a missing object raises FileNotFoundError, as on S3.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from pipeline.storage.durable import TEMP_PREFIX, replace_atomically
from pipeline.storage.urls import file_url_to_path


class LocalStore:
    """Objects as files under a local directory tree."""

    def put_file(self, local: Path, key_url: str) -> None:
        replace_atomically(file_url_to_path(key_url), lambda tmp: shutil.copyfile(local, tmp))

    def get_file(self, url: str, local: Path) -> None:
        src = file_url_to_path(url)
        if not src.is_file():
            raise FileNotFoundError(f"no object at {url}")
        replace_atomically(Path(local), lambda tmp: shutil.copyfile(src, tmp))

    def list(self, prefix_url: str) -> list[str]:
        root = file_url_to_path(prefix_url)
        if not root.is_dir():
            return []
        base = prefix_url.rstrip("/")
        out = []
        for dirpath, _dirs, files in os.walk(root):
            rel_dir = Path(dirpath).relative_to(root).as_posix()
            for name in files:
                # Temp files of in-flight writes are not objects yet.
                # (durable.py's names, and the downloads' .<name>.<rand>.tmp)
                if name.startswith(TEMP_PREFIX) or (name.startswith(".") and name.endswith(".tmp")):
                    continue
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                out.append(f"{base}/{rel}")
        return sorted(out)

    def exists(self, url: str) -> bool:
        return file_url_to_path(url).is_file()

    def read_bytes(self, url: str) -> bytes:
        path = file_url_to_path(url)
        try:
            return path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            raise FileNotFoundError(f"no object at {url}") from None

    def write_bytes(self, url: str, data: bytes) -> None:
        replace_atomically(file_url_to_path(url), lambda tmp: tmp.write_bytes(data))

    def delete(self, url: str) -> None:
        path = file_url_to_path(url)
        path.unlink(missing_ok=True)
        self._prune_empty(path.parent)

    def delete_prefix(self, prefix_url: str) -> int:
        root = file_url_to_path(prefix_url)
        if not root.is_dir():
            return 0
        count = sum(len(files) for _d, _s, files in os.walk(root))
        shutil.rmtree(root, ignore_errors=False)
        return count

    @staticmethod
    def _prune_empty(directory: Path) -> None:
        # Object stores have no empty directories; keep the local tree looking the same.
        try:
            directory.rmdir()
        except OSError:
            pass

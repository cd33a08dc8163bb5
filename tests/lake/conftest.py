from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest


def write(path: Path, data: bytes | str, *, age_s: float = 3600.0) -> Path:
    """Write a lake file and back-date it so it is settled."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    backdate(path, age_s)
    return path


def backdate(path: Path, age_s: float = 3600.0) -> None:
    st = path.stat()
    t = st.st_mtime_ns - int(age_s * 1e9)
    os.utime(path, ns=(t, t), follow_symlinks=False)


def tree_fingerprint(root: Path) -> dict[str, tuple[str, int, int]]:
    """Bytes, mode and mtime of every entry: proves a scan leaves the lake untouched."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            digest = ""
            if p.is_file() and not p.is_symlink():
                digest = hashlib.md5(p.read_bytes()).hexdigest()
            out[str(p.relative_to(root))] = (digest, st.st_mode, st.st_mtime_ns)
    return out


@pytest.fixture
def lake(lt_env: Path) -> Path:
    return lt_env / "lake"

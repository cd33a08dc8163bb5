"""Storage URLs as strings: joining, splitting, and turning ``file://`` into a path.

Locations stay URL *strings* end to end: a ``pathlib.Path`` would collapse ``s3://b/k`` into
``s3:/b/k``. A plain path (no scheme) means a local folder, as ``file://`` does.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit


def join(url: str, *parts: str) -> str:
    """``join("s3://b/runs", "r1", "step-5")`` → ``"s3://b/runs/r1/step-5"`` (no Path involved)."""
    out = url.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}"
    return out


def is_s3(location: str | Path) -> bool:
    """True for ``s3://...``; a Path is always local."""
    return isinstance(location, str) and location.startswith("s3://")


def file_url_to_path(url: str) -> Path:
    """``file:///a/b%20c`` → ``Path("/a/b c")``. Only absolute local file URLs are accepted."""
    parts = urlsplit(url)
    if parts.scheme != "file":
        raise ValueError(f"not a file:// URL: {url!r}")
    if parts.netloc not in ("", "localhost"):
        raise ValueError(f"file:// URL {url!r} names a host; use file:///absolute/path")
    path = unquote(parts.path)
    if not path.startswith("/"):
        raise ValueError(f"file:// URL {url!r} is not absolute")
    return Path(path)


def split_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → ``("bucket", "a/b")``."""
    parts = urlsplit(url)
    if parts.scheme == "s3" and "@" in parts.netloc:
        # Never echo this URL: the part before "@" is a credential.
        raise ValueError(
            "an s3:// URL must not embed credentials (user:secret@bucket); "
            "set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY instead"
        )
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"not an s3://bucket/key URL: {url!r}")
    return parts.netloc, parts.path.lstrip("/")

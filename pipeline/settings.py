"""The one settings object, read from the environment.

Every deployment knob lives here, so that a bad value fails at start with a message that names
the environment variable instead of surfacing later as an odd error deep in a scan or a build.

A frozen dataclass checked by hand, not a pydantic model: importing pydantic was ~150 ms of a
whole `laketrain scan` of an unchanged lake (bench/RESULTS.md), more than the scan itself, and
a dozen typed fields with bounds is all it did here. The messages keep pydantic's wording
(docs/configuration.md quotes one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import lru_cache
from pathlib import Path
from typing import Any, ClassVar


def project_root() -> Path:
    """The working directory `var/` defaults are relative to (the repo root under `make`)."""
    return Path(os.environ.get("LAKETRAIN_HOME", ".")).resolve()


class SettingsError(ValueError):
    """A setting read from the environment is invalid; the message names the variable."""


def redact_url(url: str) -> str:
    # pipeline.redact compiles its patterns on import, and a plain `laketrain scan` reads
    # settings that carry no credentials: it is imported when a value may hold one.
    from pipeline.redact import redact_url as redact

    return redact(url)


def _has_credentials(text: str) -> bool:
    """Whether redact_url would mask something in ``text``: only a URL with userinfo ('@')
    or a secret in its query string (after '?', '&' or ';') has anything to mask."""
    if "@" not in text and "?" not in text and "&" not in text and ";" not in text:
        return False
    return redact_url(text) != text


_NO_CREDENTIALS = (
    "must not embed credentials (key:secret@); set AWS_ACCESS_KEY_ID and "
    "AWS_SECRET_ACCESS_KEY instead"
)


def _location(value: object) -> Path | str:
    """A folder (a Path) or an ``s3://bucket/prefix`` URL, kept as a string: a Path would
    collapse ``s3://`` into ``s3:/``. ``pipeline.storage.is_s3`` tells them apart."""
    text = str(value).strip()
    if not text:
        raise ValueError("Value error, must be a folder or s3://bucket/prefix")
    if text.startswith("s3://"):
        if _has_credentials(text) or "@" in text.split("/", 3)[2]:
            raise ValueError("Value error, " + _NO_CREDENTIALS)
        bucket = text[len("s3://") :].split("/", 1)[0]
        if not bucket:
            raise ValueError("Value error, an s3:// location needs a bucket: s3://bucket/prefix")
        return text.rstrip("/")
    if "://" in text and not text.startswith("file://"):
        raise ValueError("Value error, must be a folder, file:///folder or s3://bucket/prefix")
    if text.startswith("file://"):
        from pipeline.storage.urls import file_url_to_path

        return file_url_to_path(text)
    return Path(text)


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("Input should be a valid string")
    return value


def _checkpoint_url(value: object) -> str:
    text = _string(value)
    if not text.startswith(("file://", "s3://")):
        raise ValueError("Value error, must start with file:// or s3://")
    if _has_credentials(text):
        raise ValueError("Value error, " + _NO_CREDENTIALS)
    authority = text.split("://", 1)[1].split("/", 1)[0]
    if text.startswith("file://") and authority not in ("", "localhost"):
        raise ValueError(
            f"Value error, file:// URL names a host {authority!r}; use file:///absolute/path"
        )
    return text.rstrip("/")


def _db_url(value: object) -> str:
    text = _string(value)
    if text and "://" not in text:
        raise ValueError(
            "Value error, must be a SQLAlchemy URL such as sqlite:///path or "
            "postgresql+psycopg://..."
        )
    return text


def _path(value: object) -> Path:
    if not isinstance(value, str | os.PathLike):
        raise ValueError("Input is not a valid path")
    return Path(value)


def _bounded(number: float, ge: float | None, gt: float | None, le: float | None) -> None:
    if ge is not None and not number >= ge:
        raise ValueError(f"Input should be greater than or equal to {ge}")
    if gt is not None and not number > gt:
        raise ValueError(f"Input should be greater than {gt}")
    if le is not None and not number <= le:
        raise ValueError(f"Input should be less than or equal to {le}")


def _integer(*, ge: int | None = None, le: int | None = None) -> Callable[[object], int]:
    def parse(value: object) -> int:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise ValueError("Input should be a valid integer")
        try:
            number = int(value)
        except ValueError:
            number = _whole(value)  # "4.0" is 4, as pydantic read it
        _bounded(number, ge, None, le)
        return number

    return parse


def _whole(text: object) -> int:
    try:
        number = float(str(text))
    except ValueError:
        number = math.nan
    if not number.is_integer():
        raise ValueError("Input should be a valid integer, unable to parse string as an integer")
    return int(number)


def _number(
    *, ge: float | None = None, gt: float | None = None, optional: bool = False
) -> Callable[[object], float | None]:
    def parse(value: object) -> float | None:
        if value is None and optional:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError("Input should be a valid number")
        try:
            number = float(value)
        except ValueError:
            raise ValueError(
                "Input should be a valid number, unable to parse string as a number"
            ) from None
        # Stricter than the pydantic model was: 'inf' or 'nan' seconds is never meant.
        if not math.isfinite(number):
            raise ValueError("Input should be a finite number")
        _bounded(number, ge, gt, None)
        return number

    return parse


def _setting(parse: Callable[[object], Any], description: str, **default: Any) -> Any:
    return field(metadata={"parse": parse, "description": description}, **default)


@dataclass(frozen=True)
class Settings:
    """Deployment settings. Each field is read from the environment variable of the same name
    in upper case (e.g. ``lake_dir`` ← ``LAKE_DIR``) by :func:`load_settings`; every value,
    given or read, is checked when the object is made (a bad one raises SettingsError)."""

    lake_dir: Path | str = _setting(
        _location,
        "Root of the data lake (a folder or s3://bucket/prefix); its first-level folders or "
        "prefixes are datasets.",
        default_factory=lambda: project_root() / "var" / "lake",
    )
    data_root: Path | str = _setting(
        _location,
        "Where segments and dataset versions are written (a folder or s3://bucket/prefix).",
        default_factory=lambda: project_root() / "var" / "data",
    )
    metadata_db_url: str = _setting(
        _db_url,
        "SQLAlchemy URL of the metadata store; default SQLite DATA_ROOT/metadata.db.",
        default="",
        repr=False,  # it may hold a password; __repr__ shows it masked
    )
    checkpoint_url: str = _setting(
        _checkpoint_url,
        "Base URL for training checkpoints: file:///... or s3://bucket/prefix.",
        default_factory=lambda: (project_root() / "var" / "objects").as_uri(),
    )
    recipes_dir: Path = _setting(
        _path,
        "Folder of recipes/<dataset>.toml files.",
        default_factory=lambda: project_root() / "recipes",
    )
    settle_seconds: float = _setting(
        _number(ge=0),
        "Files modified within this many seconds are left for a later scan.",
        default=2.0,
    )
    hash_workers: int = _setting(
        _integer(ge=1, le=256),
        "Processes that hash new or changed files, and walk a large lake.",
        default_factory=lambda: os.cpu_count() or 1,
    )
    shard_files: int = _setting(
        _integer(ge=1, le=1_000_000),
        "At most this many files per preprocessing shard (one mapped task, one segment).",
        default=512,
    )
    shard_mb: int = _setting(
        _integer(ge=1, le=1_000_000),
        "At most this many MB of source files per preprocessing shard.",
        default=256,
    )
    shard_decoded_mb: int = _setting(
        _integer(ge=1, le=1_000_000),
        "At most this many MB of decoded samples per preprocessing shard, as the recipe sizes "
        "them (an image: channels x size x size x (copies + 1) bytes); a shard's decode holds "
        "about twice this in memory.",
        default=1024,
    )
    laketrain_cache_dir: Path = _setting(
        _path,
        "Local, content-addressed cache of objects read from an s3:// DATA_ROOT.",
        default_factory=lambda: project_root() / "var" / "cache",
    )
    laketrain_cache_mb: int = _setting(
        _integer(ge=1, le=1_000_000_000),
        "Bound of LAKETRAIN_CACHE_DIR in MB; least recently used objects go first.",
        default=20_480,
    )
    laketrain_poll_seconds: float | None = _setting(
        _number(gt=0, optional=True),
        "Seconds between two looks at the lake by the watcher; default 1 for a folder, 30 "
        "for an s3:// lake.",
        default=None,
    )

    # name -> dataclass Field (``.metadata["description"]``), as pydantic's model_fields was
    # a name-keyed mapping: tests/docker/knownvars.py lists the variables from it.
    model_fields: ClassVar[dict[str, Any]]

    def __post_init__(self) -> None:
        problems = []
        for f in fields(self):
            try:
                object.__setattr__(self, f.name, f.metadata["parse"](getattr(self, f.name)))
            except ValueError as exc:
                # The value is echoed for the user to see what was read, never with a password.
                shown = redact_url(os.environ.get(f.name.upper(), ""))
                problems.append(f"{f.name.upper()}={shown!r}: {exc}")
        if problems:
            raise SettingsError("invalid setting: " + "; ".join(problems))

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"Settings({shown}, metadata_db_url={redact_url(self.metadata_db_url)!r})"

    @property
    def database_url(self) -> str:
        """The metadata store URL, with the embedded SQLite default filled in."""
        if self.metadata_db_url:
            return self.metadata_db_url
        # SQLite needs a local file: beside the data, or under var/ when the data is on S3.
        local = (
            project_root() / "var" / "data" if isinstance(self.data_root, str) else self.data_root
        )
        return f"sqlite:///{local / 'metadata.db'}"

    @property
    def poll_seconds(self) -> float:
        """The watcher's poll interval: LAKETRAIN_POLL_SECONDS, else 30 s for S3, 1 s for a folder."""
        if self.laketrain_poll_seconds is not None:
            return self.laketrain_poll_seconds
        return 30.0 if isinstance(self.lake_dir, str) else 1.0


Settings.model_fields = {f.name: f for f in fields(Settings)}


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise SettingsError naming the bad variable."""
    # Matched without regard to case, like pydantic-settings did; an override wins; names
    # that are no setting are ignored, as the pydantic model's extra="ignore" did.
    wanted = {name.upper(): name for name in Settings.model_fields}
    values: dict[str, object] = {
        wanted[key.upper()]: value for key, value in os.environ.items() if key.upper() in wanted
    }
    values.update((k, v) for k, v in overrides.items() if k in Settings.model_fields)
    return Settings(**values)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (cached); tests call ``get_settings.cache_clear()``."""
    return load_settings()

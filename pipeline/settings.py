"""The one settings object, read from the environment.

Every deployment knob lives here, so that a bad value fails at start with a message that names
the environment variable instead of surfacing later as an odd error deep in a scan or a build.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pipeline.redact import redact_url


def project_root() -> Path:
    """The working directory `var/` defaults are relative to (the repo root under `make`)."""
    return Path(os.environ.get("LAKETRAIN_HOME", ".")).resolve()


class SettingsError(ValueError):
    """A setting read from the environment is invalid; the message names the variable."""


class Settings(BaseModel):
    """Deployment settings. Each field is read from the environment variable of the same name
    in upper case (e.g. ``lake_dir`` ← ``LAKE_DIR``) by :func:`load_settings`.

    A plain pydantic model, not pydantic-settings' BaseSettings: importing pydantic-settings
    costs more than a whole no-change `laketrain scan` of 20,000 files, and reading a few
    variables by name is all it did here."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    # A location is a local folder (a Path) or an ``s3://bucket/prefix`` URL, kept as a string:
    # a Path would collapse ``s3://`` into ``s3:/``. ``pipeline.storage.is_s3`` tells them apart.
    lake_dir: Path | str = Field(
        default_factory=lambda: project_root() / "var" / "lake",
        description="Root of the data lake (a folder or s3://bucket/prefix); its first-level "
        "folders or prefixes are datasets.",
    )
    data_root: Path | str = Field(
        default_factory=lambda: project_root() / "var" / "data",
        description="Where segments and dataset versions are written (a folder or "
        "s3://bucket/prefix).",
    )
    metadata_db_url: str = Field(
        default="",
        description="SQLAlchemy URL of the metadata store; default SQLite DATA_ROOT/metadata.db.",
    )
    checkpoint_url: str = Field(
        default_factory=lambda: (project_root() / "var" / "objects").as_uri(),
        description="Base URL for training checkpoints: file:///... or s3://bucket/prefix.",
    )
    recipes_dir: Path = Field(
        default_factory=lambda: project_root() / "recipes",
        description="Folder of recipes/<dataset>.toml files.",
    )
    settle_seconds: float = Field(
        default=2.0,
        ge=0,
        description="Files modified within this many seconds are left for a later scan.",
    )
    hash_workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        le=256,
        description="Processes that hash new or changed files.",
    )
    shard_files: int = Field(
        default=512,
        ge=1,
        le=1_000_000,
        description="At most this many files per preprocessing shard (one mapped task, one segment).",
    )
    shard_mb: int = Field(
        default=256,
        ge=1,
        le=1_000_000,
        description="At most this many MB of source files per preprocessing shard.",
    )
    shard_decoded_mb: int = Field(
        default=1024,
        ge=1,
        le=1_000_000,
        description="At most this many MB of decoded samples per preprocessing shard, as the "
        "recipe sizes them (an image: channels x size x size x (copies + 1) bytes); a shard's "
        "decode holds about twice this in memory.",
    )

    laketrain_cache_dir: Path = Field(
        default_factory=lambda: project_root() / "var" / "cache",
        description="Local, content-addressed cache of objects read from an s3:// DATA_ROOT.",
    )
    laketrain_cache_mb: int = Field(
        default=20_480,
        ge=1,
        le=1_000_000_000,
        description="Bound of LAKETRAIN_CACHE_DIR in MB; least recently used objects go first.",
    )
    laketrain_poll_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Seconds between two looks at the lake by the watcher; default 1 for a "
        "folder, 30 for an s3:// lake.",
    )

    @field_validator("lake_dir", "data_root", mode="before")
    @classmethod
    def _location(cls, value: object) -> Path | str:
        text = str(value).strip()
        if not text:
            raise ValueError("must be a folder or s3://bucket/prefix")
        if text.startswith("s3://"):
            if redact_url(text) != text or "@" in text.split("/", 3)[2]:
                raise ValueError(
                    "must not embed credentials (key:secret@); set AWS_ACCESS_KEY_ID and "
                    "AWS_SECRET_ACCESS_KEY instead"
                )
            bucket = text[len("s3://") :].split("/", 1)[0]
            if not bucket:
                raise ValueError("an s3:// location needs a bucket: s3://bucket/prefix")
            return text.rstrip("/")
        if "://" in text and not text.startswith("file://"):
            raise ValueError("must be a folder, file:///folder or s3://bucket/prefix")
        if text.startswith("file://"):
            from pipeline.storage.urls import file_url_to_path

            return file_url_to_path(text)
        return Path(text)

    @field_validator("checkpoint_url")
    @classmethod
    def _checkpoint_scheme(cls, value: str) -> str:
        if not value.startswith(("file://", "s3://")):
            raise ValueError("must start with file:// or s3://")
        if redact_url(value) != value:
            raise ValueError(
                "must not embed credentials (key:secret@); set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY instead"
            )
        authority = value.split("://", 1)[1].split("/", 1)[0]
        if value.startswith("file://") and authority not in ("", "localhost"):
            raise ValueError(f"file:// URL names a host {authority!r}; use file:///absolute/path")
        return value.rstrip("/")

    @field_validator("metadata_db_url")
    @classmethod
    def _db_url(cls, value: str) -> str:
        if value and "://" not in value:
            raise ValueError(
                "must be a SQLAlchemy URL such as sqlite:///path or postgresql+psycopg://..."
            )
        return value

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


def load_settings(**overrides: object) -> Settings:
    """Read settings from the environment; raise SettingsError naming the bad variable."""
    # Matched without regard to case, like pydantic-settings did; an override wins.
    wanted = {name.upper(): name for name in Settings.model_fields}
    values: dict[str, object] = {
        wanted[key.upper()]: value for key, value in os.environ.items() if key.upper() in wanted
    }
    values.update(overrides)
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else "?"
            # The value is echoed for the user to see what was read, never with a password.
            shown = redact_url(os.environ.get(field.upper(), ""))
            problems.append(f"{field.upper()}={shown!r}: {err['msg']}")
        raise SettingsError("invalid setting: " + "; ".join(problems)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Process-wide settings (cached); tests call ``get_settings.cache_clear()``."""
    return load_settings()

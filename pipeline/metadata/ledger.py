"""Ledger models: one row per lake file ever seen, and one row per scan.

Rows are never deleted: a file that disappears gets ``deleted_at`` so lineage of old versions
can still name the file a sample came from.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.metadata.base import Base, UTCDateTime, utcnow

# Ledger statuses. "invalid" is set by preprocessing (decodable bytes, unusable content);
# "refused" by the scanner (symlink escaping the lake, special file).
STATUS_OK = "ok"
STATUS_UNREADABLE = "unreadable"
STATUS_INVALID = "invalid"
STATUS_REFUSED = "refused"


class LedgerFile(Base):
    __tablename__ = "ledger_files"
    # A build's change set: the rows a scan wrote since the head (migration 0010).
    __table_args__ = (Index("ix_ledger_files_dataset_scan", "dataset", "last_scan_id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(
        String(4096), unique=True, doc="posix path relative to the lake root"
    )
    dataset: Mapped[str] = mapped_column(String(255), index=True, doc="first-level lake folder")
    size: Mapped[int | None] = mapped_column(BigInteger)
    mtime_ns: Mapped[int | None] = mapped_column(BigInteger)
    ctime_ns: Mapped[int | None] = mapped_column(BigInteger)
    inode: Mapped[int | None] = mapped_column(BigInteger)
    etag: Mapped[str | None] = mapped_column(
        String(255), doc="S3 lake: the object's ETag, part of its change key (never an MD5)"
    )
    version_id: Mapped[str | None] = mapped_column(
        String(1024), doc="S3 lake on a versioned bucket: the object's VersionId"
    )
    md5: Mapped[str | None] = mapped_column(String(32), index=True)
    status: Mapped[str] = mapped_column(String(16), default=STATUS_OK)
    error: Mapped[str | None] = mapped_column(Text)
    first_seen: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime, index=True)
    content_changed_at: Mapped[datetime] = mapped_column(
        UTCDateTime, default=utcnow, doc="when the md5 last changed (a touch does not count)"
    )
    last_scan_id: Mapped[int | None] = mapped_column(ForeignKey("scans.id"))


class Scan(Base):
    __tablename__ = "scans"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    lake: Mapped[str] = mapped_column(String(4096))
    dataset: Mapped[str | None] = mapped_column(
        String(255), doc="None when the whole lake was scanned"
    )
    started_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    new: Mapped[int] = mapped_column(Integer, default=0)
    changed: Mapped[int] = mapped_column(Integer, default=0)
    deleted: Mapped[int] = mapped_column(Integer, default=0)
    renamed: Mapped[int] = mapped_column(Integer, default=0)
    touched: Mapped[int] = mapped_column(Integer, default=0)
    unchanged: Mapped[int] = mapped_column(Integer, default=0)
    refused: Mapped[int] = mapped_column(Integer, default=0)
    unreadable: Mapped[int] = mapped_column(Integer, default=0)
    settling: Mapped[int] = mapped_column(Integer, default=0)
    bytes_hashed: Mapped[int] = mapped_column(BigInteger, default=0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)


class LakeLock(Base):
    """One row per lake root. A scan updates its row first, which holds a row lock
    (PostgreSQL) or the write lock (SQLite) until it commits: scans of one lake serialise."""

    __tablename__ = "lake_locks"

    lake: Mapped[str] = mapped_column(String(4096), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(255))
    since: Mapped[datetime | None] = mapped_column(UTCDateTime)

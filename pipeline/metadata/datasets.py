"""Dataset models: processed samples, segments, versions and their samples.

Owned by the versioned-datasets work; created by migration 0002 (heads: 0004, chunks: 0006, quality: 0007).

The store is the source for every listing (versions, show, diff, contains): the CLI and the UI
never read version folders to answer them. Version folders on disk are the source for the
*data* (the reader), and stay readable without any store.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from pipeline.metadata.base import Base, UTCDateTime, utcnow

VERSION_COMMITTED = "committed"
VERSION_DELETED = "deleted"

SAMPLE_OK = "ok"
SAMPLE_INVALID = "invalid"


class DatasetLock(Base):
    """One row per dataset. A commit updates its row first, which holds a row lock
    (PostgreSQL) or the write lock (SQLite) until it commits: commits of one dataset serialise,
    so two concurrent builds publish exactly one version."""

    __tablename__ = "dataset_locks"

    dataset: Mapped[str] = mapped_column(String(255), primary_key=True)
    holder: Mapped[str | None] = mapped_column(String(255))
    since: Mapped[datetime | None] = mapped_column(UTCDateTime)


class Segment(Base):
    """An immutable file group under DATA_ROOT/segments/<recipe_hash>/<segment_id>/."""

    __tablename__ = "segments"

    segment_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    recipe_hash: Mapped[str] = mapped_column(String(64), index=True)
    format: Mapped[str] = mapped_column(String(8))
    path: Mapped[str] = mapped_column(String(1024), doc="relative to DATA_ROOT")
    n_rows: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class ProcessedSample(Base):
    """What preprocessing made of one source content (md5) under one recipe: either rows
    ``row .. row+n_rows-1`` of a segment, or an invalid verdict with its reason. A build decodes
    only the md5s that have no row here for its recipe_hash."""

    __tablename__ = "processed_samples"
    __table_args__ = (UniqueConstraint("md5", "recipe_hash", name="uq_processed_samples_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    md5: Mapped[str] = mapped_column(String(32))
    recipe_hash: Mapped[str] = mapped_column(String(64), index=True)
    segment_id: Mapped[str | None] = mapped_column(ForeignKey("segments.segment_id"), index=True)
    row: Mapped[int] = mapped_column(Integer, default=0)
    n_rows: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default=SAMPLE_OK)
    reason: Mapped[str | None] = mapped_column(Text)
    labels: Mapped[str | None] = mapped_column(
        Text, doc="JSON list, one per row, for content labels (tables)"
    )
    lines: Mapped[str | None] = mapped_column(
        Text, doc="JSON list of source line numbers per row (tables)"
    )
    invalid_rows: Mapped[str | None] = mapped_column(
        Text, doc="JSON [[line, reason], ...] (tables)"
    )
    stats: Mapped[str | None] = mapped_column(
        Text, doc="JSON per-channel count/sum/sumsq over its rows"
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class DatasetVersion(Base):
    __tablename__ = "dataset_versions"

    version_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    dataset: Mapped[str] = mapped_column(String(255), index=True)
    tag: Mapped[str] = mapped_column(String(512), unique=True)
    parent_id: Mapped[str | None] = mapped_column(String(64))
    recipe_hash: Mapped[str] = mapped_column(String(64))
    format: Mapped[str] = mapped_column(String(8))
    status: Mapped[str] = mapped_column(String(16), default=VERSION_COMMITTED)
    samples: Mapped[int] = mapped_column(Integer, default=0)
    train: Mapped[int] = mapped_column(Integer, default=0)
    val: Mapped[int] = mapped_column(Integer, default=0)
    files: Mapped[int] = mapped_column(Integer, default=0)
    invalid: Mapped[int] = mapped_column(Integer, default=0)
    added: Mapped[int] = mapped_column(Integer, default=0)
    removed: Mapped[int] = mapped_column(Integer, default=0)
    changed: Mapped[int] = mapped_column(Integer, default=0)
    path: Mapped[str] = mapped_column(String(1024), doc="version folder relative to DATA_ROOT")
    manifest_sha256: Mapped[str] = mapped_column(String(64))
    manifest: Mapped[str] = mapped_column(Text, doc="manifest.json, verbatim")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, index=True)
    deleted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    quality: Mapped[dict[str, Any] | None] = mapped_column(
        JSON, nullable=True, doc="QualityReport.to_dict() (migration 0007); None before it"
    )


REVIEW_APPROVE = "approve"
REVIEW_REJECT = "reject"


class VersionReview(Base):
    """One decision on a version held by the quality gate (migration 0007), append-only:
    who approved or rejected it, when, and why. The latest row is the version's standing."""

    __tablename__ = "version_reviews"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64), index=True)
    decision: Mapped[str] = mapped_column(String(16), doc="approve | reject")
    reason: Mapped[str | None] = mapped_column(Text)
    who: Mapped[str | None] = mapped_column(String(255))
    at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class VersionSample(Base):
    """One row per sample of a version: what diff and contains answer from."""

    __tablename__ = "version_samples"
    __table_args__ = (
        Index("ix_version_samples_version_path", "version_id", "path"),
        Index("ix_version_samples_md5", "md5"),
        Index("ix_version_samples_path", "path"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64))
    idx: Mapped[int] = mapped_column(Integer)
    path: Mapped[str] = mapped_column(String(4096))
    md5: Mapped[str] = mapped_column(String(32))
    label: Mapped[str | None] = mapped_column(String(255))
    split: Mapped[str] = mapped_column(String(8))
    duplicate: Mapped[bool] = mapped_column(Boolean, default=False)


class VersionInvalid(Base):
    """Files (or table lines) of the dataset left out of a version, with the reason."""

    __tablename__ = "version_invalid"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64), index=True)
    path: Mapped[str] = mapped_column(String(4096))
    md5: Mapped[str | None] = mapped_column(String(32))
    line: Mapped[int | None] = mapped_column(Integer)
    reason: Mapped[str] = mapped_column(Text)


class VersionSegment(Base):
    """Which segments a version reads: what gc must keep."""

    __tablename__ = "version_segments"

    version_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    segment_id: Mapped[str] = mapped_column(String(64), primary_key=True, index=True)


CHUNK_LEAF = "leaf"
CHUNK_NODE = "node"


class Chunk(Base):
    """One content-addressed chunk file group under DATA_ROOT/chunks/ (pipeline/datasets/chunks.py):
    a leaf (a run of samples: metadata part + index) or an interior node (a list of leaves).
    Written once, shared by every version that contains it; created by migration 0006."""

    __tablename__ = "chunks"

    hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    id: Mapped[int | None] = mapped_column(
        BigInteger, unique=True, doc="the chunk's short name in leaf_entries; migration 0013"
    )
    kind: Mapped[str] = mapped_column(String(8), doc="leaf | node")
    count: Mapped[int] = mapped_column(Integer, doc="samples in it (under it, for a node)")
    bytes: Mapped[int] = mapped_column(BigInteger, doc="size of the metadata part(s)")
    sha256: Mapped[str | None] = mapped_column(
        String(64), doc="sha256 of a leaf's .idx file (a node's name is its own checksum)"
    )
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    summary: Mapped[str | None] = mapped_column(
        Text, doc="a leaf's counts and sums as JSON (build/summaries.py); migration 0011"
    )


class VersionChunk(Base):
    """A version's LEAVES in order: ~one row per 128 samples, instead of one per sample.
    ``start`` is the version index of the leaf's first sample. No foreign keys, like
    ``version_samples`` (a gc'd version published again is deleted and re-inserted)."""

    __tablename__ = "version_chunks"
    # "Is this leaf in that version?" is one probe (a version lookup by path or md5 asks it for
    # every row it finds); its chunk_hash prefix serves "which versions hold this leaf" (0012).
    __table_args__ = (Index("ix_version_chunks_chunk_version", "chunk_hash", "version_id"),)

    version_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    ordinal: Mapped[int] = mapped_column(Integer, primary_key=True)
    chunk_hash: Mapped[str] = mapped_column(String(64))
    start: Mapped[int] = mapped_column(BigInteger)


class _SampleFields:
    """A sample as a leaf holds it: the columns chunk_samples stores and chunk_entries shows."""

    path: Mapped[str] = mapped_column(String(4096))
    md5: Mapped[str] = mapped_column(String(32))
    label: Mapped[str | None] = mapped_column(String(255))
    split: Mapped[str] = mapped_column(String(8))
    segment_id: Mapped[str] = mapped_column(String(64))
    row: Mapped[int] = mapped_column(BigInteger)
    line: Mapped[int | None] = mapped_column(Integer)
    copy: Mapped[int] = mapped_column(Integer, default=0)
    duplicate: Mapped[bool] = mapped_column(Boolean, default=False)


class ChunkSample(_SampleFields, Base):
    """One distinct sample as leaves hold it (the metadata fields a leaf's rows carry), stored
    once however many leaves hold it: a leaf cut again around a new file refers to its old
    samples' rows instead of writing them again. Written by pipeline/datasets/leaf_index.py;
    migration 0013."""

    __tablename__ = "chunk_samples"
    __table_args__ = (
        Index("ix_chunk_samples_path", "path"),
        Index("ix_chunk_samples_md5", "md5"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)


class LeafEntry(Base):
    """One sample of one DISTINCT leaf (``pos`` = its place in the leaf), as three integers:
    the leaf's ``chunks.id``, the position, the ``chunk_samples`` row. Written once, with the
    leaf's ``chunks`` row; migration 0013."""

    __tablename__ = "leaf_entries"
    __table_args__ = (Index("ix_leaf_entries_sample", "sample_id"), {"sqlite_with_rowid": False})

    chunk_id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    pos: Mapped[int] = mapped_column(Integer, primary_key=True)
    sample_id: Mapped[int] = mapped_column(BigInteger)


class ChunkEntry(_SampleFields, Base):
    """A VIEW (migration 0013): one sample of one DISTINCT leaf, ``leaf_entries`` joined with
    its leaf's hash and its ``chunk_samples`` row; shared by every version holding the leaf.
    The index over chunk contents that answers contains (by path or md5, through the samples'
    indexes) and lets a diff read only the leaves that differ. Read-only: written through
    pipeline/datasets/leaf_index.py."""

    __tablename__ = "chunk_entries"

    chunk_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    pos: Mapped[int] = mapped_column(Integer, primary_key=True)


HEAD_PUBLISHED = "published"  # a new version became the head
HEAD_RETURNED = "returned"  # the lake went back to an older version's content
HEAD_BACKFILLED = "backfilled"  # migration 0004: the newest committed version of older data


class DatasetHead(Base):
    """The dataset's head: the version that matches the lake's current content after its last
    build, which is what ``latest`` names. Moved only under the dataset's lock row, in the same
    transaction that records the version. No foreign key, like ``version_samples``: a gc'd
    version that is published again is deleted and re-inserted, and gc never drops the head."""

    __tablename__ = "dataset_heads"

    dataset: Mapped[str] = mapped_column(String(255), primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64))
    moved_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class DatasetLedgerMark(Base):
    """The ledger state a dataset's head matches: the largest scan id its commit read, the
    paths it left pending, and whether the head's chunks are exactly that state's assembly.
    Valid only while ``version_id`` is the head (pipeline/datasets/build/changes.py)."""

    __tablename__ = "dataset_ledger_marks"

    dataset: Mapped[str] = mapped_column(String(255), primary_key=True)
    version_id: Mapped[str] = mapped_column(String(64))
    scan: Mapped[int] = mapped_column(BigInteger)
    pending: Mapped[str] = mapped_column(Text, doc="JSON list of lake paths")
    exact: Mapped[bool] = mapped_column(Boolean)


class DatasetHeadMove(Base):
    """Every move of a dataset's head, append-only: what ``latest`` meant, and when."""

    __tablename__ = "dataset_head_moves"
    __table_args__ = (Index("ix_dataset_head_moves_dataset_id", "dataset", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    dataset: Mapped[str] = mapped_column(String(255))
    from_version_id: Mapped[str | None] = mapped_column(String(64))
    to_version_id: Mapped[str] = mapped_column(String(64))
    moved_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    reason: Mapped[str] = mapped_column(String(32), doc="published | returned | backfilled")

"""chunks: content-addressed sample chunks instead of a row per sample per version

``chunks`` (one row per leaf or node file group under DATA_ROOT/chunks/), ``version_chunks``
(a version's leaves in order) and ``chunk_entries`` (one row per sample per distinct leaf: the
index contains and diff read). ``version_samples`` stays: versions published before chunks
(manifest format 1) keep their rows there and stay readable.

Revision ID: 0006_chunks
Revises: 0005_run_events
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_chunks"
down_revision = "0005_run_events"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
BIG_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "chunks",
        sa.Column("hash", sa.String(64), primary_key=True),
        sa.Column("kind", sa.String(8), nullable=False),
        sa.Column("count", sa.Integer, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64)),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "version_chunks",
        sa.Column("version_id", sa.String(64), primary_key=True),
        sa.Column("ordinal", sa.Integer, primary_key=True),
        sa.Column("chunk_hash", sa.String(64), nullable=False),
        sa.Column("start", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_version_chunks_chunk_hash", "version_chunks", ["chunk_hash"])
    op.create_table(
        "chunk_entries",
        sa.Column("id", BIG_ID, primary_key=True),
        sa.Column("chunk_hash", sa.String(64), nullable=False),
        sa.Column("pos", sa.Integer, nullable=False),
        sa.Column("path", sa.String(4096), nullable=False),
        sa.Column("md5", sa.String(32), nullable=False),
        sa.Column("label", sa.String(255)),
        sa.Column("split", sa.String(8), nullable=False),
        sa.Column("segment_id", sa.String(64), nullable=False),
        sa.Column("row", sa.BigInteger, nullable=False),
        sa.Column("line", sa.Integer),
        sa.Column("copy", sa.Integer, nullable=False),
        sa.Column("duplicate", sa.Boolean, nullable=False),
    )
    op.create_index(
        "ix_chunk_entries_chunk_pos", "chunk_entries", ["chunk_hash", "pos"], unique=True
    )
    op.create_index("ix_chunk_entries_path", "chunk_entries", ["path"])
    op.create_index("ix_chunk_entries_md5", "chunk_entries", ["md5"])


def downgrade() -> None:
    op.drop_table("chunk_entries")
    op.drop_table("version_chunks")
    op.drop_table("chunks")

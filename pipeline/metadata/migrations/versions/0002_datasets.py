"""datasets: segments, processed samples, versions and their samples

Revision ID: 0002_datasets
Revises: 0001_ledger
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0002_datasets"
down_revision = "0001_ledger"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "dataset_locks",
        sa.Column("dataset", sa.String(255), primary_key=True),
        sa.Column("holder", sa.String(255)),
        sa.Column("since", TS),
    )
    op.create_table(
        "segments",
        sa.Column("segment_id", sa.String(64), primary_key=True),
        sa.Column("recipe_hash", sa.String(64), nullable=False, index=True),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("n_rows", sa.Integer, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_table(
        "processed_samples",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("md5", sa.String(32), nullable=False),
        sa.Column("recipe_hash", sa.String(64), nullable=False, index=True),
        sa.Column("segment_id", sa.String(64), sa.ForeignKey("segments.segment_id"), index=True),
        sa.Column("row", sa.Integer, nullable=False),
        sa.Column("n_rows", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("labels", sa.Text),
        sa.Column("lines", sa.Text),
        sa.Column("invalid_rows", sa.Text),
        sa.Column("stats", sa.Text),
        sa.Column("created_at", TS, nullable=False),
        sa.UniqueConstraint("md5", "recipe_hash", name="uq_processed_samples_key"),
    )
    op.create_table(
        "dataset_versions",
        sa.Column("version_id", sa.String(64), primary_key=True),
        sa.Column("dataset", sa.String(255), nullable=False, index=True),
        sa.Column("tag", sa.String(512), nullable=False, unique=True),
        sa.Column("parent_id", sa.String(64)),
        sa.Column("recipe_hash", sa.String(64), nullable=False),
        sa.Column("format", sa.String(8), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        *[
            sa.Column(name, sa.Integer, nullable=False, server_default="0")
            for name in (
                "samples",
                "train",
                "val",
                "files",
                "invalid",
                "added",
                "removed",
                "changed",
            )
        ],
        sa.Column("path", sa.String(1024), nullable=False),
        sa.Column("manifest_sha256", sa.String(64), nullable=False),
        sa.Column("manifest", sa.Text, nullable=False),
        sa.Column("created_at", TS, nullable=False, index=True),
        sa.Column("deleted_at", TS),
    )
    op.create_table(
        "version_samples",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("idx", sa.Integer, nullable=False),
        sa.Column("path", sa.String(4096), nullable=False),
        sa.Column("md5", sa.String(32), nullable=False),
        sa.Column("label", sa.String(255)),
        sa.Column("split", sa.String(8), nullable=False),
        sa.Column("duplicate", sa.Boolean, nullable=False),
    )
    op.create_index("ix_version_samples_version_path", "version_samples", ["version_id", "path"])
    op.create_index("ix_version_samples_md5", "version_samples", ["md5"])
    op.create_index("ix_version_samples_path", "version_samples", ["path"])
    op.create_table(
        "version_invalid",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version_id", sa.String(64), nullable=False, index=True),
        sa.Column("path", sa.String(4096), nullable=False),
        sa.Column("md5", sa.String(32)),
        sa.Column("line", sa.Integer),
        sa.Column("reason", sa.Text, nullable=False),
    )
    op.create_table(
        "version_segments",
        sa.Column("version_id", sa.String(64), primary_key=True),
        sa.Column("segment_id", sa.String(64), primary_key=True, index=True),
    )


def downgrade() -> None:
    for name in (
        "version_segments",
        "version_invalid",
        "version_samples",
        "dataset_versions",
        "processed_samples",
        "segments",
        "dataset_locks",
    ):
        op.drop_table(name)

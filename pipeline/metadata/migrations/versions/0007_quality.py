"""quality: every version's quality report, and the decisions taken on quarantined versions

``dataset_versions.quality`` is the report computed at commit (pipeline/datasets/quality/),
nullable: versions published before it have none. ``version_reviews`` records each approve or
reject of a version (who, when, why), append-only, for the gate (docs/quality.md).

Revision ID: 0007_quality
Revises: 0006_chunks
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007_quality"
down_revision = "0006_chunks"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.add_column("dataset_versions", sa.Column("quality", sa.JSON, nullable=True))
    op.create_table(
        "version_reviews",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text),
        sa.Column("who", sa.String(255)),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_version_reviews_version_id", "version_reviews", ["version_id"])


def downgrade() -> None:
    op.drop_index("ix_version_reviews_version_id", table_name="version_reviews")
    op.drop_table("version_reviews")
    # batch mode: SQLite cannot drop a column in place on every version it ships with.
    with op.batch_alter_table("dataset_versions") as batch:
        batch.drop_column("quality")

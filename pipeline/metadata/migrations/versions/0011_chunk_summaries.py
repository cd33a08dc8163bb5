"""chunk summaries: what a version's manifest counts, per leaf, so a commit sums leaves

``chunks`` gains ``summary``: a leaf's counts (samples and classes per split, files, duplicate
files, its first and last path), its segments and its train split's pixel sums, as JSON
(pipeline/datasets/build/summaries.py). A version's counts and mean/std are the sum over its
leaves, so a commit that reuses most of its head's leaves reads their summaries instead of
assembling every sample. NULL for a leaf recorded before this revision: the first commit that
needs it computes it from the leaf's metadata part and stores it.

Revision ID: 0011_chunk_summaries
Revises: 0010_ledger_changes
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_chunk_summaries"
down_revision = "0010_ledger_changes"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("summary", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("summary")

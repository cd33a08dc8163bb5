"""ledger changes: what a build finds changed since the head, without reading every row

``ledger_files`` gains an index on (dataset, last_scan_id): every row a scan writes gets that
scan's id, so the rows written since a scan id are an index range, and the dataset's largest
scan id one lookup. ``dataset_ledger_marks`` holds, per dataset, the ledger state its head
matches: the head's version id, the largest scan id the commit that found it read, the paths
it left pending (no processed sample yet) and whether the head's chunks are exactly that
state's assembly (pipeline/datasets/build/changes.py). No row, or a row naming another version
than the head: the build reads every row, as before.

Revision ID: 0010_ledger_changes
Revises: 0009_lake_objects
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_ledger_changes"
down_revision = "0009_lake_objects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ledger_files_dataset_scan", "ledger_files", ["dataset", "last_scan_id"])
    op.create_table(
        "dataset_ledger_marks",
        sa.Column("dataset", sa.String(255), primary_key=True),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("scan", sa.BigInteger, nullable=False),
        sa.Column("pending", sa.Text, nullable=False),
        sa.Column("exact", sa.Boolean, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("dataset_ledger_marks")
    op.drop_index("ix_ledger_files_dataset_scan", table_name="ledger_files")

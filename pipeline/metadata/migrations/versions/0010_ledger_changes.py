"""ledger changes: an index on (dataset, last_scan_id)

A build finds what changed in a dataset since its head by the scan ids on its ledger rows
(every row a scan writes gets that scan's id; pipeline/datasets/build/changes.py). This index
makes that an index range read of the changed rows, and the dataset's largest scan id one
lookup, instead of a pass over every row of the dataset.

Revision ID: 0010_ledger_changes
Revises: 0009_lake_objects
Create Date: 2026-12-01
"""

from alembic import op

revision = "0010_ledger_changes"
down_revision = "0009_lake_objects"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_ledger_files_dataset_scan", "ledger_files", ["dataset", "last_scan_id"])


def downgrade() -> None:
    op.drop_index("ix_ledger_files_dataset_scan", table_name="ledger_files")

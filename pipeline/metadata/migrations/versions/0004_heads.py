"""dataset heads: what ``latest`` names, and the history of its moves

Backfills the head of every dataset that has committed versions with its newest one (what
``latest`` meant before heads existed), and records that as the first move.

Revision ID: 0004_heads
Revises: 0003_runs
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_heads"
down_revision = "0003_runs"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)

# The newest committed version per dataset, in latest_committed's old order (created_at desc,
# then version_id asc): no other committed version of the dataset comes before it. Plain SQL
# that SQLite and PostgreSQL both run, copying created_at as stored (no type round trip).
_NEWEST = """
SELECT v.dataset, v.version_id, v.created_at FROM dataset_versions v
WHERE v.status = 'committed' AND NOT EXISTS (
    SELECT 1 FROM dataset_versions w
    WHERE w.dataset = v.dataset AND w.status = 'committed'
      AND (w.created_at > v.created_at
           OR (w.created_at = v.created_at AND w.version_id < v.version_id))
)
"""


def upgrade() -> None:
    op.create_table(
        "dataset_heads",
        sa.Column("dataset", sa.String(255), primary_key=True),
        sa.Column("version_id", sa.String(64), nullable=False),
        sa.Column("moved_at", TS, nullable=False),
    )
    op.create_table(
        "dataset_head_moves",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("dataset", sa.String(255), nullable=False),
        sa.Column("from_version_id", sa.String(64)),
        sa.Column("to_version_id", sa.String(64), nullable=False),
        sa.Column("moved_at", TS, nullable=False),
        sa.Column("reason", sa.String(32), nullable=False),
    )
    op.create_index("ix_dataset_head_moves_dataset_id", "dataset_head_moves", ["dataset", "id"])
    op.execute(f"INSERT INTO dataset_heads (dataset, version_id, moved_at) {_NEWEST}")
    op.execute(
        "INSERT INTO dataset_head_moves (dataset, from_version_id, to_version_id, moved_at, reason) "
        "SELECT dataset, NULL, version_id, moved_at, 'backfilled' FROM dataset_heads "
        "ORDER BY dataset"
    )


def downgrade() -> None:
    op.drop_index("ix_dataset_head_moves_dataset_id", table_name="dataset_head_moves")
    op.drop_table("dataset_head_moves")
    op.drop_table("dataset_heads")

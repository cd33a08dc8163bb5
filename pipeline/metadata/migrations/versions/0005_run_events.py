"""training_runs.events: what went wrong on the way, for the run's readers

A nullable JSON list of ``{time, level, message}``, e.g. the ERROR event of a run whose
checkpoints were all unusable and that started again from step 0 (TRAIN_RESUME=auto).

Revision ID: 0005_run_events
Revises: 0004_heads
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_run_events"
down_revision = "0004_heads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("training_runs", sa.Column("events", sa.JSON, nullable=True))


def downgrade() -> None:
    # batch mode: SQLite cannot drop a column in place on every version it ships with.
    with op.batch_alter_table("training_runs") as batch:
        batch.drop_column("events")

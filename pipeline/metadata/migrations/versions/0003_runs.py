"""training runs and checkpoints

Revision ID: 0003_runs
Revises: 0002_datasets
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0003_runs"
down_revision = "0002_datasets"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "training_runs",
        sa.Column("run_id", sa.String(255), primary_key=True),
        sa.Column("dataset", sa.String(255), nullable=False, index=True),
        sa.Column("version_id", sa.String(64), nullable=False, index=True),
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("status", sa.String(16), nullable=False, index=True),
        sa.Column("best_metric", sa.Float),
        sa.Column("metric_name", sa.String(64)),
        sa.Column("checkpoint_url", sa.String(4096)),
        sa.Column("dag_id", sa.String(255)),
        sa.Column("dag_run_id", sa.String(255)),
        sa.Column("launcher", sa.String(32)),
        sa.Column("attempts", sa.Integer, nullable=False, server_default="1"),
        sa.Column("error", sa.Text),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("finished_at", TS),
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "run_id",
            sa.String(255),
            sa.ForeignKey("training_runs.run_id", ondelete="CASCADE"),
            nullable=False,
            index=True,
        ),
        sa.Column("step", sa.BigInteger, nullable=False),
        sa.Column("epoch", sa.Integer),
        sa.Column("url", sa.String(4096), nullable=False),
        sa.Column("metric", sa.Float),
        sa.Column("is_best", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("deleted_at", TS),
        sa.UniqueConstraint("run_id", "step", name="uq_checkpoints_run_step"),
    )


def downgrade() -> None:
    op.drop_table("checkpoints")
    op.drop_table("training_runs")

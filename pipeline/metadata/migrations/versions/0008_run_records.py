"""run records: what reproduces a run, its attempts, and the model aliases

``training_runs`` gains a readable ``name`` (unique), the version's ``manifest_sha256``, the
``command`` (argv), ``image`` and ``image_digest``, the ``code_version`` (git commit + dirty
flag, or the package version), the ``lock_sha256`` of requirements.lock and the resolved
``config``. ``run_attempts`` keeps one row per attempt (start, end, exit code, error);
``model_aliases`` the promotions (``champion``) of a dataset's runs, append-only.

Revision ID: 0008_run_records
Revises: 0007_quality
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_run_records"
down_revision = "0007_quality"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)
RUN_COLUMNS = (
    ("name", sa.String(255)),
    ("manifest_sha256", sa.String(64)),
    ("command", sa.JSON),
    ("image", sa.String(1024)),
    ("image_digest", sa.String(255)),
    ("code_version", sa.JSON),
    ("lock_sha256", sa.String(64)),
    ("config", sa.JSON),
)


def upgrade() -> None:
    # batch mode: SQLite cannot add a unique constraint to an existing table in place.
    with op.batch_alter_table("training_runs") as batch:
        for name, type_ in RUN_COLUMNS:
            batch.add_column(sa.Column(name, type_, nullable=True))
        batch.create_unique_constraint("uq_training_runs_name", ["name"])
    op.create_table(
        "run_attempts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column(
            "run_id",
            sa.String(255),
            sa.ForeignKey(
                "training_runs.run_id",
                ondelete="CASCADE",
                name="fk_run_attempts_run_id_training_runs",
            ),
            nullable=False,
        ),
        sa.Column("n", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("launcher", sa.String(32)),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("ended_at", TS),
        sa.Column("exit_code", sa.Integer),
        sa.Column("error", sa.Text),
        sa.UniqueConstraint("run_id", "n", name="uq_run_attempts_run_n"),
    )
    op.create_index("ix_run_attempts_run_id", "run_attempts", ["run_id"])
    op.create_table(
        "model_aliases",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("dataset", sa.String(255), nullable=False),
        sa.Column("alias", sa.String(64), nullable=False),
        sa.Column(
            "run_id",
            sa.String(255),
            sa.ForeignKey(
                "training_runs.run_id",
                ondelete="CASCADE",
                name="fk_model_aliases_run_id_training_runs",
            ),
            nullable=False,
        ),
        sa.Column("by", sa.String(255), nullable=False),
        sa.Column("at", TS, nullable=False),
    )
    op.create_index("ix_model_aliases_dataset", "model_aliases", ["dataset"])
    op.create_index("ix_model_aliases_run_id", "model_aliases", ["run_id"])


def downgrade() -> None:
    op.drop_table("model_aliases")
    op.drop_table("run_attempts")
    with op.batch_alter_table("training_runs") as batch:
        batch.drop_constraint("uq_training_runs_name", type_="unique")
        for name, _ in reversed(RUN_COLUMNS):
            batch.drop_column(name)

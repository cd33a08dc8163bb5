"""ledger and scans

Revision ID: 0001_ledger
Revises:
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0001_ledger"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "scans",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("lake", sa.String(4096), nullable=False),
        sa.Column("dataset", sa.String(255)),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("finished_at", TS),
        *[
            sa.Column(name, sa.Integer, nullable=False, server_default="0")
            for name in (
                "new",
                "changed",
                "deleted",
                "renamed",
                "touched",
                "unchanged",
                "refused",
                "unreadable",
                "settling",
            )
        ],
        sa.Column("bytes_hashed", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column("seconds", sa.Float, nullable=False, server_default="0"),
    )
    op.create_table(
        "ledger_files",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("path", sa.String(4096), nullable=False, unique=True),
        sa.Column("dataset", sa.String(255), nullable=False, index=True),
        sa.Column("size", sa.BigInteger),
        sa.Column("mtime_ns", sa.BigInteger),
        sa.Column("ctime_ns", sa.BigInteger),
        sa.Column("inode", sa.BigInteger),
        sa.Column("md5", sa.String(32), index=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
        sa.Column("deleted_at", TS, index=True),
        sa.Column("content_changed_at", TS, nullable=False),
        sa.Column("last_scan_id", sa.Integer, sa.ForeignKey("scans.id")),
    )
    op.create_table(
        "lake_locks",
        sa.Column("lake", sa.String(4096), primary_key=True),
        sa.Column("holder", sa.String(255)),
        sa.Column("since", TS),
    )


def downgrade() -> None:
    op.drop_table("lake_locks")
    op.drop_table("ledger_files")
    op.drop_table("scans")

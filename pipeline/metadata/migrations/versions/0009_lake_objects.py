"""lake objects: the change key of an object in an S3 lake

``ledger_files`` gains ``etag`` and ``version_id``. A row of an S3 lake's object keeps its
size in ``size``, its LastModified in ``mtime_ns``, its ETag and (on a versioned bucket) its
VersionId here; ``ctime_ns`` and ``inode`` stay NULL, which no file's stat key has. A row of a
local file leaves both NULL. The ETag is part of the fast-path key only, never taken for an MD5.

Revision ID: 0009_lake_objects
Revises: 0008_run_records
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_lake_objects"
down_revision = "0008_run_records"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN (nullable, no default): SQLite does it in place, without a table copy,
    # so a million-row ledger upgrades at once.
    op.add_column("ledger_files", sa.Column("etag", sa.String(255), nullable=True))
    op.add_column("ledger_files", sa.Column("version_id", sa.String(1024), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("ledger_files") as batch:
        batch.drop_column("version_id")
        batch.drop_column("etag")

"""version_chunks: look a leaf's version up by (chunk_hash, version_id), one index probe

A lookup of one version's samples by path or md5 (contains, the delta commit's change set, its
quality report's duplicate groups, the diff's path counts) finds the chunk_entries rows of the
path or md5, then checks that their leaf is in the version. With an index on ``chunk_hash``
alone that check read every version_chunks row of the leaf, one per version that shares it:
O(versions) a sample, and a dataset keeps hundreds of versions. The index on (chunk_hash,
version_id) answers it with one probe of the index itself; it replaces the one on
``chunk_hash``, which is its prefix (gc's "is this chunk still referenced" reads it as well).

Revision ID: 0012_version_chunk_lookup
Revises: 0011_chunk_summaries
Create Date: 2026-12-07
"""

from alembic import op

revision = "0012_version_chunk_lookup"
down_revision = "0011_chunk_summaries"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_version_chunks_chunk_version", "version_chunks", ["chunk_hash", "version_id"]
    )
    op.drop_index("ix_version_chunks_chunk_hash", table_name="version_chunks")


def downgrade() -> None:
    op.create_index("ix_version_chunks_chunk_hash", "version_chunks", ["chunk_hash"])
    op.drop_index("ix_version_chunks_chunk_version", table_name="version_chunks")

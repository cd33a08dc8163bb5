"""leaf entries: a leaf's samples as integer references, each distinct sample stored once

``chunk_entries`` held one full row per sample per distinct leaf: chunk hash, path, md5, label,
split, segment id and row, ~370 bytes with its three indexes. A leaf cut again around one new
file (a drop of hash- or UUID-named files lands inside ~one leaf per file) wrote all of its
~128 samples' rows again, though 127 of them were already recorded under the old leaf.

Now each distinct sample is one ``chunk_samples`` row (with the path and md5 indexes contains
and diff search), and a leaf's samples are ``leaf_entries`` rows of three integers: the leaf's
``chunks.id``, the position in the leaf, the sample's id (~26 bytes with their index). A leaf
cut again costs those three integers per sample, plus a sample row for each new sample only.
``chunk_entries`` stays, as a view with the columns it had (less its own id), so every reader
of it is unchanged; the writers are pipeline/datasets/leaf_index.py and gc.

Revision ID: 0013_leaf_entries
Revises: 0012_version_chunk_lookup
Create Date: 2026-12-07
"""

import sqlalchemy as sa
from alembic import op

revision = "0013_leaf_entries"
down_revision = "0012_version_chunk_lookup"
branch_labels = None
depends_on = None

BIG_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")
# The sample columns, in the order the view and the old table list them after (chunk_hash, pos).
_SAMPLE = 'path, md5, label, split, segment_id, "row", line, "copy", duplicate'

VIEW = (
    "CREATE VIEW chunk_entries AS SELECT c.hash AS chunk_hash, le.pos AS pos, s.path AS path, "
    "s.md5 AS md5, s.label AS label, s.split AS split, s.segment_id AS segment_id, "
    's."row" AS "row", s.line AS line, s."copy" AS "copy", s.duplicate AS duplicate '
    "FROM leaf_entries le JOIN chunks c ON c.id = le.chunk_id "
    "JOIN chunk_samples s ON s.id = le.sample_id"
)


def _sample_columns() -> list[sa.Column]:
    """A sample's columns, as 0006 made them in chunk_entries (new objects for each table)."""
    return [
        sa.Column("path", sa.String(4096), nullable=False),
        sa.Column("md5", sa.String(32), nullable=False),
        sa.Column("label", sa.String(255)),
        sa.Column("split", sa.String(8), nullable=False),
        sa.Column("segment_id", sa.String(64), nullable=False),
        sa.Column("row", sa.BigInteger, nullable=False),
        sa.Column("line", sa.Integer),
        sa.Column("copy", sa.Integer, nullable=False),
        sa.Column("duplicate", sa.Boolean, nullable=False),
    ]


def _same(a: str, b: str, column: str) -> str:
    """NULL-safe equality in SQL both backends read."""
    return f"({a}.{column} = {b}.{column} OR ({a}.{column} IS NULL AND {b}.{column} IS NULL))"


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    # chunks.id: a leaf's short name in leaf_entries. Allocated by the writer (the next after
    # the largest on SQLite, whose single writer holds the lock; a sequence on PostgreSQL).
    with op.batch_alter_table("chunks") as batch:
        batch.add_column(sa.Column("id", sa.BigInteger, nullable=True))
    if sqlite:
        op.execute("UPDATE chunks SET id = rowid")
    else:
        op.execute("CREATE SEQUENCE chunks_id_seq")
        op.execute("UPDATE chunks SET id = nextval('chunks_id_seq')")
    op.create_index("ix_chunks_id", "chunks", ["id"], unique=True)

    op.create_table("chunk_samples", sa.Column("id", BIG_ID, primary_key=True), *_sample_columns())
    op.create_table(
        "leaf_entries",
        sa.Column("chunk_id", sa.BigInteger, primary_key=True),
        sa.Column("pos", sa.Integer, primary_key=True),
        sa.Column("sample_id", sa.BigInteger, nullable=False),
        sqlite_with_rowid=False,
    )
    op.execute(
        f"INSERT INTO chunk_samples ({_SAMPLE}) "
        f"SELECT DISTINCT {_SAMPLE} FROM chunk_entries ORDER BY path"
    )
    op.create_index("ix_chunk_samples_path", "chunk_samples", ["path"])
    op.create_index("ix_chunk_samples_md5", "chunk_samples", ["md5"])
    match = " AND ".join(
        [_same("s", "ce", c) for c in ("label", "line")]
        + [
            f"s.{c} = ce.{c}"
            for c in ("path", "md5", "split", "segment_id", '"row"', '"copy"', "duplicate")
        ]
    )
    op.execute(
        "INSERT INTO leaf_entries (chunk_id, pos, sample_id) "
        "SELECT c.id, ce.pos, s.id FROM chunk_entries ce JOIN chunks c ON c.hash = ce.chunk_hash "
        f"JOIN chunk_samples s ON {match}"
    )
    op.create_index("ix_leaf_entries_sample", "leaf_entries", ["sample_id"])
    op.drop_table("chunk_entries")
    op.execute(VIEW)


def downgrade() -> None:
    op.create_table(
        "chunk_entries_rows",
        sa.Column("id", BIG_ID, primary_key=True),
        sa.Column("chunk_hash", sa.String(64), nullable=False),
        sa.Column("pos", sa.Integer, nullable=False),
        *_sample_columns(),
    )
    op.execute(
        f"INSERT INTO chunk_entries_rows (chunk_hash, pos, {_SAMPLE}) "
        f"SELECT chunk_hash, pos, {_SAMPLE} FROM chunk_entries ORDER BY chunk_hash, pos"
    )
    op.execute("DROP VIEW chunk_entries")
    op.drop_table("leaf_entries")
    op.drop_table("chunk_samples")
    op.rename_table("chunk_entries_rows", "chunk_entries")
    op.create_index(
        "ix_chunk_entries_chunk_pos", "chunk_entries", ["chunk_hash", "pos"], unique=True
    )
    op.create_index("ix_chunk_entries_path", "chunk_entries", ["path"])
    op.create_index("ix_chunk_entries_md5", "chunk_entries", ["md5"])
    op.drop_index("ix_chunks_id", table_name="chunks")
    with op.batch_alter_table("chunks") as batch:
        batch.drop_column("id")
    if op.get_bind().dialect.name != "sqlite":
        op.execute("DROP SEQUENCE chunks_id_seq")

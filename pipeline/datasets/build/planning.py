"""plan: the shards of the dataset's current files that no segment holds yet under the recipe."""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy.orm import Session

from pipeline.cyclic_gc import gc_paused
from pipeline.datasets.build.changes import Since
from pipeline.datasets.build.values import (
    Shard,
    ShardFile,
    _Processed,
    _recipe,
    _settings,
    _Stats,
)
from pipeline.datasets.dataroot import work_root
from pipeline.datasets.head import head_version
from pipeline.datasets.leases import (
    relied_on_segments,
    take_lease,
)
from pipeline.datasets.segments import (
    segments_guard,
)
from pipeline.datasets.shards import decoded_bytes, pack
from pipeline.metadata.driver import driver_iter, driver_rows
from pipeline.metadata.ledger import STATUS_INVALID, STATUS_OK
from pipeline.metadata.store import MetadataStore, open_store


@gc_paused()
def plan(
    dataset: str,
    *,
    store: MetadataStore | None = None,
    max_files: int | None = None,
    max_bytes: int | None = None,
    max_decoded_bytes: int | None = None,
) -> list[Shard]:
    """Shards (≤ max_files files, ≤ max_bytes source bytes, ≤ max_decoded_bytes of decoded
    samples as the recipe sizes them; default the SHARD_FILES, SHARD_MB and SHARD_DECODED_MB
    settings) of the dataset's current contents that have no processed sample under the
    current recipe. Identical content at several paths is planned once."""
    settings = _settings()
    max_files = settings.shard_files if max_files is None else max_files
    max_bytes = settings.shard_mb << 20 if max_bytes is None else max_bytes
    if max_decoded_bytes is None:
        max_decoded_bytes = settings.shard_decoded_mb << 20
    if max_files < 1 or max_bytes < 1 or max_decoded_bytes < 1:
        raise ValueError("max_files, max_bytes and max_decoded_bytes must be at least 1")
    recipe = _recipe(dataset)
    rh = recipe.recipe_hash
    store = store or open_store()
    # Under the segments lock (gc holds it exclusively), read what is processed and lease the
    # segments holding it: no gc can drop them between this plan and its commit (leases.py).
    root = work_root()  # DATA_ROOT, or the local work root of an s3:// one (dataroot.py)
    with segments_guard(root), store.session() as session:
        files, relied = _to_process(session, dataset, rh)
        take_lease(root, dataset, rh, relied, kind="plan")
    todo: dict[str, ShardFile] = {}
    for path, md5, size in files:
        if recipe.is_sidecar(path):
            continue
        if md5 not in todo:  # files are sorted by path: the first path of a content wins
            todo[md5] = ShardFile(md5, path, int(size or 0))
    # In path order, the order of a version's samples: a version read front to back then
    # walks each segment once, and a leaf chunk's consecutive samples sit in one or two
    # segments (in md5 order a leaf named ~120 segments at a million samples, in its summary,
    # its index and a reader's accesses). process keeps md5 order inside a segment.
    groups = pack(
        list(todo.values()),
        max_files=max_files,
        max_bytes=max_bytes,
        max_decoded=max_decoded_bytes,
        size_of=lambda f: f.size,
        decoded_of=lambda f: decoded_bytes(recipe, f.path, f.size),
    )
    return [Shard(dataset, rh, recipe.format, batch) for batch in groups]


def _to_process(session: Session, dataset: str, rh: str) -> tuple[list[tuple], list[str]]:
    """The files to process and the segments the plan counts on: from the change set since
    the head when the head anchors one (O(changes), build/changes.py), else from every row."""
    head = head_version(session, dataset)  # the head (latest), not the newest created
    since = Since.of(session, dataset, head, rh)
    if since is not None:
        manifest = json.loads(head.manifest) if head.manifest else {}
        return since.to_plan(session, dataset, rh, [s["id"] for s in manifest.get("segments", [])])
    return _files_to_process(session, dataset, rh), relied_on_segments(session, dataset, rh)


def _files_to_process(session: Session, dataset: str, rh: str) -> list[tuple]:
    """(path, md5, size) of the dataset's current files whose content has no processed sample
    under recipe ``rh``, by path: one anti-join on the (md5, recipe_hash) key, so a build that
    adds 1 % of files reads 1 % of rows, not a set of every md5 ever processed."""
    rows = driver_rows(
        session,
        "SELECT l.path, l.md5, l.size FROM ledger_files l "
        "WHERE l.dataset = ? AND l.deleted_at IS NULL AND l.md5 IS NOT NULL AND l.status IN (?, ?) "
        "AND NOT EXISTS (SELECT 1 FROM processed_samples p WHERE p.md5 = l.md5 AND p.recipe_hash = ?)",
        (dataset, STATUS_OK, STATUS_INVALID, rh),
    )
    rows.sort()  # by path, in code point order like commit (a SQL ORDER BY follows the collation)
    return rows


def processed_stats(session: Session, rh: str, wanted: set[str]) -> dict[str, _Stats]:
    """n_rows and stats of these contents under recipe ``rh``, all a leaf's summary reads of
    them: three columns instead of processed_rows' ten took a third of its time for the
    ~100,000 contents of a delta commit's windows at a million samples."""
    return {
        md5: _Stats(n_rows, stats)
        for md5, n_rows, stats in _rows_by_md5(session, "md5, n_rows, stats", rh, wanted)
    }


def _rows_by_md5(session: Session, cols: str, rh: str, md5s: Iterable[str]) -> list[tuple]:
    """``cols`` of recipe ``rh``'s processed rows of these contents, by index, 1,000 a query."""
    ordered = sorted(md5s)
    rows: list[tuple] = []
    for i in range(0, len(ordered), 1000):
        chunk = ordered[i : i + 1000]
        rows += driver_rows(
            session,
            f"SELECT {cols} FROM processed_samples WHERE recipe_hash = ? "
            f"AND md5 IN ({', '.join('?' * len(chunk))})",
            (rh, *chunk),
        )
    return rows


def _current_files(
    session: Session, dataset: str, rh: str
) -> tuple[list[tuple], dict[str, _Processed]]:
    """(path, md5, size, mtime_ns, status, error) of every file of the dataset now, by path, and
    what recipe ``rh`` made of each of their contents. Two plain reads, joined here: a SQL join
    probes the (md5, recipe_hash) index once per file, measured 2-3x slower on SQLite than
    reading both row sets in order; and sorting in Python beats SQLite's temp B-tree."""
    files = driver_rows(
        session,
        "SELECT path, md5, size, mtime_ns, status, error FROM ledger_files WHERE dataset = ? AND deleted_at IS NULL",
        (dataset,),
    )
    files.sort()  # by path: paths are unique in the ledger
    # md5 -> itself: the processed rows key on the ledger rows' own md5 strings (held once).
    return files, processed_rows(session, rh, {f[1]: f[1] for f in files if f[1]})


def processed_rows(
    session: Session,
    rh: str,
    wanted: set[str] | dict[str, str],
    *,
    whole_table_above: int | None = 2000,
) -> dict[str, _Processed]:
    """What recipe ``rh`` made of each of these contents (those it processed). Above
    ``whole_table_above`` contents (the full commit: about all of them) the recipe's whole
    table is read; a delta commit asks for its few thousand by index (None). ``wanted`` as a
    dict maps each md5 to the string to key it by (the caller's own: a million of them are
    then held once, not twice)."""
    cols = 'md5, segment_id, "row", n_rows, status, reason, labels, lines, invalid_rows, stats'
    processed: dict[str, _Processed] = {}
    if whole_table_above is not None and len(wanted) > whole_table_above:
        # Cheaper to read the recipe's whole table than to send thousands of bound values;
        # folded into the dict as it is fetched, never held as a second list of rows.
        rows: Iterable[tuple] = driver_iter(
            session, f"SELECT {cols} FROM processed_samples WHERE recipe_hash = ?", (rh,)
        )
    else:
        rows = _rows_by_md5(session, cols, rh, wanted)
    # A segment holds thousands of contents and a status is one of three words: one string
    # object each, not one per row (a full commit at a million samples holds every row).
    shared: dict[str, str] = {}
    canonical = wanted.get if isinstance(wanted, dict) else None
    for r in rows:
        if r[0] in wanted:
            md5 = canonical(r[0]) if canonical is not None else r[0]
            seg, status = r[1], r[4]
            if seg is not None:
                seg = shared.setdefault(seg, seg)
            processed[md5] = _Processed(
                md5, seg, r[2], r[3], shared.setdefault(status, status), *r[5:]
            )
    return processed

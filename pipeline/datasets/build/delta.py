"""The delta commit: a new version from its head and the ledger's change set alone.

A full commit assembles every sample of the dataset from the ledger and the store, cuts them
into leaves and sums them: O(samples) on every commit. When the head is this very assembly
as of a known scan (``Since.exact``: build/changes.py) and an unchanged path keeps its sample
whatever else changed (``applies``), every sample outside the change set is the head's, byte
for byte. Then the commit needs only:

- the **affected paths**: the changed and pending paths, the head's invalid files, and every
  path of a content one of them had or has (a content's first path decides its split and which
  of its paths are duplicates), closed under that rule; their samples are assembled as usual;
- the **windows**: each run of the head's leaves that an affected path falls in (windows.py
  says where a window starts) is read back from its metadata parts, merged with the affected
  samples and cut again by the same rule, until the cut meets one of the head's leaf
  boundaries again (then every later leaf is the head's: cuts depend on keys alone);
- the rest of the head's leaves are taken whole, unread.

The counts and mean/std are the leaves' summaries summed (summaries.py); ``version_id`` is the
same function of the (md5, label, split) list as ``manifest.version_id_for``, computed in
numpy from the leaves' indexes (the reused leaves' from the head's digest when it has one:
digest.py, one file instead of one a leaf); the quality report reads the head through the
store for the few contents it lists. tests/datasets/test_delta_commit.py holds the result to
the full commit's, field for field, on random edits.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session

from pipeline.datasets import chunks
from pipeline.datasets import manifest as mf
from pipeline.datasets.build import digest
from pipeline.datasets.build.assemble import _assemble
from pipeline.datasets.build.changes import Since, ledger_rows, pending_rows, settles
from pipeline.datasets.build.planning import processed_rows, processed_stats
from pipeline.datasets.build.values import _Sample
from pipeline.datasets.build.windows import Fallback, cut, sample_of
from pipeline.datasets.chunkread import read_entries, read_index, walk_leaves
from pipeline.datasets.chunks import LeafRef
from pipeline.datasets.chunkwrite import Piece
from pipeline.datasets.version_rows import ENTRIES_OF_VERSION
from pipeline.metadata.driver import driver_rows

_IN_BATCH = 900


def applies(recipe, prior, since: Since | None, same_recipe: bool) -> bool:
    """Whether the head can anchor a delta: a chunked head of this recipe that is exactly the
    assembly of a known ledger state, under a recipe where an unchanged path keeps its sample
    (no labels file, no group_regex), and no per-version pass over every row (tables' column
    statistics, regression targets' histogram)."""
    return (
        prior.chunked
        and same_recipe
        and since is not None
        and since.exact
        and settles(recipe)
        and recipe.modality != "table"
        and recipe.task != "regression"
    )


@dataclass
class HeadEntry:
    """One of the head's samples, as the store's chunk_entries row has it."""

    path: str
    md5: str
    label: str | None
    split: str
    row: int
    line: int | None
    copy: int
    duplicate: bool


def head_entries(session: Session, version_id: str, md5s: set[str]) -> list[HeadEntry]:
    """The head's samples of these contents (the md5 index, then the head's leaves)."""
    out: list[HeadEntry] = []
    ordered = sorted(md5s)
    for i in range(0, len(ordered), _IN_BATCH):
        part = ordered[i : i + _IN_BATCH]
        out += [
            HeadEntry(p, m, lab, sp, int(r), ln, int(c or 0), bool(d))
            for p, m, lab, sp, r, ln, c, d in driver_rows(
                session,
                "SELECT ce.path, ce.md5, ce.label, ce.split, ce.row, ce.line, "
                f'ce."copy", ce.duplicate {ENTRIES_OF_VERSION} '
                f"AND ce.md5 IN ({', '.join('?' * len(part))})",
                (version_id, *part),
            )
        ]
    return out


class HeadLookup:
    """head_entries, each content asked for once per commit (the near-duplicate split, the
    report's contents and its members all ask about the edge graph's contents)."""

    def __init__(self, session: Session, version_id: str) -> None:
        self._session, self.version_id = session, version_id
        self._by_md5: dict[str, list[HeadEntry]] = {}

    def of(self, md5s: set[str]) -> list[HeadEntry]:
        todo = md5s - self._by_md5.keys()
        if todo:
            for md5 in todo:
                self._by_md5[md5] = []
            for e in head_entries(self._session, self.version_id, todo):
                self._by_md5[e.md5].append(e)
        return [e for md5 in sorted(md5s) for e in self._by_md5[md5]]


@dataclass
class Changes:
    """The change set, closed: every path whose sample may differ from the head's."""

    affected: list[str]  # sorted
    files: list[tuple]  # their ledger rows now (path, md5, size, mtime_ns, status, error)
    processed: dict  # md5 -> _Processed of their contents
    known_splits: dict[str, str]  # the head's split of each of their contents it holds
    contents: set[str]  # every md5 the affected paths had or have


def gather(session: Session, dataset: str, recipe_hash: str, since: Since) -> Changes:
    changed = since.changed(session, dataset)
    pending = since.pending_rows(session)
    paths = {row[0] for row in changed} | set(since.pending)
    paths |= {
        r[0]
        for r in driver_rows(
            session,
            "SELECT DISTINCT path FROM version_invalid WHERE version_id = ?",
            (since.version_id,),
        )
    }
    md5s = {row[1] for row in changed if row[1]} | {row[1] for row in pending if row[1]}
    md5s |= since.head_md5s(session, sorted(paths))
    queried: set[str] = set()
    files: list[tuple] = []
    known: dict[str, str] = {}
    while True:
        # Every path of every content touched, then those paths' contents now, until no new
        # path comes in (one round or two: a content's paths are few).
        todo = md5s - queried
        queried |= todo
        for e in head_entries(session, since.version_id, todo):
            paths.add(e.path)
            known[e.md5] = e.split
        files = ledger_rows(session, sorted(paths), dataset)
        md5s |= {f[1] for f in files if f[1]}
        if md5s <= queried:
            break
    wanted = {f[1] for f in files if f[1]}
    processed = processed_rows(session, recipe_hash, wanted, whole_table_above=None)
    return Changes(sorted(paths), files, processed, known, queried)


def assemble_changes(recipe, changes: Changes, sidecar, near_splits: dict[str, str]):
    """The affected paths' samples, their invalid files (all the version has: the head's are
    affected paths) and the files left out for want of a processed sample."""
    samples, invalid = _assemble(
        recipe, changes.files, changes.processed, sidecar, {**changes.known_splits, **near_splits}
    )
    return samples, invalid, pending_rows(changes.files, changes.processed, recipe)


# ---- the delta version -------------------------------------------------------------------------


@dataclass
class DeltaVersion:
    """What the commit needs of a delta version before it writes anything."""

    changes: Changes
    samples: list[_Sample]  # the affected paths' samples
    invalid: list[dict]  # the version's invalid files and lines
    left_out: list[tuple]  # files left out for want of a processed sample (pending)
    near: object  # NearDupState
    head: HeadLookup
    pieces: list[Piece]
    formatted: dict[str, bytes]  # the new leaves' metadata parts, as the cut made them
    known_samples: dict[tuple, int]  # the kept head samples' store ids, by place (leaf_index)
    processed: dict  # md5 -> _Processed of the change set's contents
    stats: dict  # md5 -> _Processed or _Stats of the new leaves' training contents (summaries)
    diff: dict[str, int]
    version_id: str
    codes: dict  # manifest.merge_codes of every sample, in leaf order (for the new digest)
    head_edges: dict  # hash -> edges of the head's leaves (for the new digest's reused ones)
    present: chunks.Present  # the reused leaves' files on disk, read once (and by the write)


def prepare(session: Session, data_root: Path, dataset: str, recipe, since: Since, prior, sidecar):
    """The delta version of the head ``prior`` and the change set since it (raises Fallback
    when the head's files cannot give it exactly)."""
    from pipeline.datasets.build.chunkrows import leaf_edges
    from pipeline.datasets.quality import neardup

    rh = recipe.recipe_hash
    if not neardup.index_ready(data_root, dataset, recipe):
        raise Fallback("the near-duplicate index is not built yet")
    changes = gather(session, dataset, rh, since)

    head = HeadLookup(session, since.version_id)
    try:
        head_leaves = walk_leaves(data_root, prior.manifest["chunks"])
    except chunks.ChunkError as exc:
        raise Fallback(str(exc)) from None
    near = neardup.prepare(
        data_root, dataset, recipe, changes.files, changes.processed, changes.known_splits,
        head=neardup.HeadNear(
            groups=neardup.head_groups(data_root, dataset, recipe, since.version_id, head_leaves),
            touched=changes.contents,
            splits_of=lambda md5s: {e.md5: e.split for e in head.of(md5s)},
        ),
    )  # fmt: skip
    samples, invalid, left_out = assemble_changes(recipe, changes, sidecar, near.splits)
    head_digest = digest.load(data_root, dataset, since.version_id, head_leaves)
    edges = head_digest.edges_by_hash() if head_digest is not None else None
    if edges is None:
        edges = leaf_edges(session, head_leaves)  # the store's rows: two probes a leaf
    made = cut(data_root, head_leaves, edges, changes.affected, samples)
    cutting = made.pieces
    # The new leaves' summaries read the stats of their training samples: the change set's
    # contents are in hand, the windows' unchanged ones are read (their n_rows and stats alone).
    wanted = {
        s.md5 for _h, _size, _reused, part in cutting if part is not None for s in part
        if s.split == "train"
    }  # fmt: skip
    stats = {**processed_stats(session, rh, wanted - changes.processed.keys()), **changes.processed}
    # Under the commit's segments guard: gc removes nothing until the version is recorded.
    present = chunks.Present(data_root, [c[2].hash for c in cutting if c[2] is not None])
    codes = mf.merge_codes(_indexes(data_root, cutting, head_digest, present))
    return DeltaVersion(
        changes=changes,
        samples=samples,
        invalid=invalid,
        left_out=left_out,
        near=near,
        head=head,
        pieces=cutting,
        formatted=made.formatted,
        known_samples=_known_samples(session, head_leaves, made.kept),
        processed=changes.processed,
        stats=stats,
        diff=_diff_counts(session, since.version_id, changes.affected, samples),
        version_id=mf.version_id_of_indexes(dataset, rh, [codes]),
        codes=codes,
        head_edges=edges,
        present=present,
    )


def _known_samples(session: Session, head_leaves, kept: dict | None) -> dict[tuple, int]:
    """The store ids of the head samples the windows keep, from their head leaves' entries by
    position (leaf_index.record_entries then searches by path for the change set's alone:
    ~4 us a sample at a million, most of what a drop at random places records)."""
    from pipeline.datasets.leaf_index import leaf_sample_ids, place_of

    if not kept:
        return {}  # none kept, or too many to hold (windows.KEEP_ORIGINS_AT_MOST)
    counts = {leaf.hash: leaf.count for leaf in head_leaves if leaf.hash in kept}
    ids = leaf_sample_ids(session, counts)
    return {
        place_of(s.path, s.line, s.copy): got[pos]
        for h, pairs in kept.items()
        if (got := ids.get(h)) is not None
        for pos, s in pairs
    }


def _indexes(data_root: Path, cutting, head_digest, present: chunks.Present) -> list[dict]:
    """The new version's codes, leaf by leaf (a run of reused head leaves as one slice of the
    head's digest when there is one; else each one's index file)."""
    spans = head_digest.spans() if head_digest is not None else {}
    out: list[dict] = []
    run: list[int] | None = None  # [start, stop] of the digest rows being taken
    for _h, _size, reused, part in cutting:
        span = spans.get(reused.hash) if reused is not None and part is None else None
        if span is not None:
            _check_reusable(data_root, reused, present)
        if span is not None and run is not None and run[1] == span[0]:
            run[1] = span[1]
            continue
        if run is not None:
            out.append(head_digest.slice(*run))
            run = None
        if span is not None:
            run = list(span)
        elif part is not None and reused is None:
            out.append(chunks.index_of(part))
        else:
            out.append(_reused_index(data_root, reused, present))
    if run is not None:
        out.append(head_digest.slice(*run))
    return out


def _check_reusable(data_root: Path, leaf: LeafRef, present: chunks.Present) -> None:
    """A head leaf taken whole must have its metadata part (else a full commit writes it again
    from the samples)."""
    if not present.has(leaf.hash, chunks.META_SUFFIX):
        meta = chunks.chunk_file(data_root, leaf.hash, chunks.META_SUFFIX)
        raise Fallback(f"{meta}: leaf metadata part missing")


def _reused_index(data_root: Path, leaf: LeafRef, present: chunks.Present) -> dict:
    """A head leaf's index for version_id, without its segments table."""
    _check_reusable(data_root, leaf, present)
    try:
        return read_index(data_root, leaf, segments=False)  # for version_id alone
    except chunks.ChunkError as exc:
        raise Fallback(str(exc)) from None


def _diff_counts(session: Session, head_id: str, affected: list[str], samples) -> dict[str, int]:
    """added / removed / changed paths against the head: only affected paths can differ."""
    from pipeline.datasets.version_rows import path_diff, paths_in

    new: dict[str, tuple] = {}
    for s in samples:
        new.setdefault(s.path, (s.md5, s.label))
    old = {p: v[:2] for p, v in paths_in(session, head_id, affected).items()}
    d = path_diff(old, new)
    return {k: len(d[k]) for k in ("added", "removed", "changed")}


def load_leaf(session: Session, data_root: Path, recipe_hash: str):
    """For summaries.for_tree: a head leaf recorded before summaries, read from its metadata
    part, with its train contents' stats."""

    def load(h: str):
        part = [sample_of(r) for r in read_entries(data_root, h)]
        wanted = {s.md5 for s in part if s.split == "train"}
        return part, processed_stats(session, recipe_hash, wanted)

    return load


class DeltaView:
    """compute_report's view of a delta version: its totals, the affected samples in memory,
    the head's other samples through the store (only the contents the report lists)."""

    def __init__(self, delta: DeltaVersion, totals) -> None:
        self._delta, self._totals = delta, totals
        self.count = totals.samples
        self.train = totals.split_n["train"]
        self.paths = totals.files
        self.samples = None  # tables (the only view that reads every row) never take a delta

    def present(self, keys: set[str]) -> set[str]:
        inside = {s.md5 for s in self._delta.samples} & keys
        outside = keys - self._delta.changes.contents
        return inside | {e.md5 for e in self._delta.head.of(outside)}

    def duplicated(self) -> set[str]:
        return set(self._totals.dup_md5s)

    def members(self, wanted: set[str]) -> dict[str, list]:
        out: dict[str, list] = {}
        touched = self._delta.changes.contents
        for s in self._delta.samples:
            if not s.copy and s.md5 in wanted and s.md5 in touched:
                out.setdefault(s.md5, []).append(s)
        rest = sorted(
            (e for e in self._delta.head.of(wanted - touched) if not e.copy),
            key=lambda e: (e.path, e.line or 0),
        )
        for e in rest:
            out.setdefault(e.md5, []).append(e)
        return out

    def plain_classes(self) -> dict[str, dict[str, int]]:
        return {
            split: {str(label): n for label, n in per.items()}
            for split, per in self._totals.plain_classes.items()
        }


def write_manifest(writer, delta: DeltaVersion, dataset, recipe, parent, session, data_root):
    """A delta version's manifest, from its leaves' summaries; its chunk files written."""
    from pipeline.datasets.build import summaries
    from pipeline.datasets.build.chunkrows import known_leaves
    from pipeline.datasets.build.contents import _manifest, counts_from
    from pipeline.datasets.build.writer import invalid_bytes
    from pipeline.datasets.quality.compute import compute_report

    tree = writer.pieces(
        data_root,
        delta.pieces,
        known_leaves(session),
        present=delta.present,
        formatted=delta.formatted,
    )
    leaf_sums = summaries.for_tree(
        session,
        tree,
        delta.stats,
        load=load_leaf(session, data_root, recipe.recipe_hash),
    )
    totals = summaries.totals(leaf_sums.ordered)
    counts = counts_from(totals)
    manifest = _manifest(
        dataset, recipe, delta.version_id, parent, counts, delta.invalid, delta.diff, session,
        format_version=mf.FORMAT_VERSION, mean_std=(totals.mean, totals.std),
    )  # fmt: skip
    view = DeltaView(delta, totals)
    manifest["quality"] = compute_report(
        delta.near, recipe, view, delta.invalid, parent, session, data_root, delta.processed
    ).to_dict()
    writer.add(mf.INVALID, invalid_bytes(delta.invalid))
    manifest["chunks"] = tree.manifest_section()
    return manifest, tree, leaf_sums

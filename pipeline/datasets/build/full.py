"""The full commit: every current file of the dataset assembled from the store, and its version
written.

The other way to a version is the delta commit (delta.py), from the head and the change set
alone. A commit takes this one where the delta does not apply (a first version, a labels file,
a group_regex, a table) or falls back; both give the same version for the same lake
(tests/datasets/test_delta_commit.py). What this one costs is O(samples): it is the first
version's commit, so what it holds at once is the build's peak memory (bench/scale.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.datasets import manifest as mf
from pipeline.datasets.build import summaries
from pipeline.datasets.build.assemble import _assemble
from pipeline.datasets.build.changes import pending_rows, settles
from pipeline.datasets.build.chunkrows import known_leaves, leaf_keys, settled_leaves
from pipeline.datasets.build.contents import _manifest, _train_mean_std, counts_of
from pipeline.datasets.build.planning import _current_files
from pipeline.datasets.build.values import _Processed, _Sample
from pipeline.datasets.build.writer import VersionWriter, _publish, invalid_bytes
from pipeline.datasets.chunks import Tree, index_of
from pipeline.datasets.quality.compute import SamplesView, compute_report
from pipeline.datasets.quality.neardup import NearDupState
from pipeline.datasets.quality.neardup import prepare as prepare_near


@dataclass
class FullVersion:
    """The version of every current file (what delta.DeltaVersion is for the delta commit)."""

    samples: list[_Sample]
    invalid: list[dict]
    processed: dict[str, _Processed]
    near: NearDupState
    left_out: list[tuple]  # ledger rows without a processed sample: the pending files
    version_id: str


def prepare(session, data_root: Path, dataset: str, recipe, prior, same_recipe, sidecar):
    """Assemble every current file of the dataset, as the store holds it now."""
    rh = recipe.recipe_hash
    files, processed = _current_files(session, dataset, rh)
    known_splits = prior.splits(session, data_root) if same_recipe else {}
    # Near-duplicates: hash only the contents the parent lacks; a new one joins the split of
    # the existing contents it is a near-duplicate of (quality/neardup.py).
    near = prepare_near(data_root, dataset, recipe, files, processed, known_splits)
    if not same_recipe or recipe.split.group_regex:
        # A split depends on the md5 alone only under the same recipe, without group_regex.
        known_splits = {}
    samples, invalid = _assemble(recipe, files, processed, sidecar, {**known_splits, **near.splits})
    # The files without processed rows are the pending ones (one pass for both uses).
    left_out = pending_rows(files, processed, recipe)
    # (The ledger rows, one per lake file, are freed on return: nothing after needs them.)
    # In numpy, as the delta commit does: no tuple per sample.
    version_id = mf.version_id_of_indexes(dataset, rh, [index_of(samples)])
    return FullVersion(samples, invalid, processed, near, left_out, version_id)


def write_version(
    folder: Path,
    full: FullVersion,
    *,
    dataset: str,
    recipe,
    parent,
    prior,
    same_recipe: bool,
    since,
    diff: dict | None,
    session,
    data_root: Path,
    write_format: int,
    packed: bool,
) -> tuple[dict, str, Tree | None, summaries.TreeSummaries | None]:
    """Write the version's folder (format 2: its new chunk files first, the manifest last, then
    the rename) and return (manifest, its sha256, the tree, the leaves' summaries). ``diff``
    None: counted from the leaf lists once the tree is cut. ``write_format`` 1: the
    self-contained folder of before chunks, for the tests of the readers' fallback."""
    samples, invalid, processed = full.samples, full.invalid, full.processed
    counts = counts_of(samples)
    manifest = _manifest(
        dataset,
        recipe,
        full.version_id,
        parent,
        counts,
        invalid,
        diff,
        session,
        format_version=write_format,
        mean_std=_train_mean_std(counts.train_weights, processed)
        if write_format == 1
        else ([], []),
    )
    manifest["quality"] = compute_report(
        full.near, recipe, SamplesView(samples), invalid, parent, session, data_root, processed
    ).to_dict()
    if write_format == 1:
        return manifest, _publish(folder, manifest, samples, invalid), None, None
    with VersionWriter(folder) as writer:
        # Chunk files first (only the new ones are written), the manifest last.
        offered = settled = None
        if prior.chunked and same_recipe:  # another recipe's leaves cannot match
            offered = leaf_keys(session, data_root, prior.manifest)
            if since is not None and since.exact and settles(recipe):
                # The head's leaves no changed path falls in need no formatting.
                affected = since.affected_paths(session, dataset, samples)
                settled = settled_leaves(session, [o[0] for o in offered], affected)
        tree = writer.chunks(
            data_root, samples, known_leaves(session), parent=offered, settled=settled
        )
        if diff is None:
            manifest["diff"] = prior.diff_counts(session, samples, tree)
        leaf_sums = summaries.for_tree(session, tree, processed)
        manifest["mean"], manifest["std"] = summaries.mean_std(leaf_sums.ordered)
        writer.add(mf.INVALID, invalid_bytes(invalid))
        manifest["chunks"] = tree.manifest_section()
        if packed:  # an s3:// data root: publish packs each node (chunkpack.py)
            manifest["chunks"]["packed"] = True
        return manifest, writer.publish(manifest), tree, leaf_sums

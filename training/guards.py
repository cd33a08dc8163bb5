"""Checks that stop a run before or while it wastes a GPU: train/val leakage, a label histogram
that disagrees with the manifest, and a non-finite loss (reported with the samples that caused it)."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

log = logging.getLogger("training")


class DataCheckError(RuntimeError):
    """The version is refused before training (exit code 3)."""


class NonFiniteLossError(RuntimeError):
    """The loss became NaN/inf; the message names the step, the sample indices and their files."""

    def __init__(
        self,
        step: int,
        epoch: int,
        loss: float,
        indices: Sequence[int],
        paths: Sequence[str],
        trace: str | None = None,
    ) -> None:
        self.step, self.epoch, self.loss = step, epoch, loss
        self.indices, self.paths, self.trace = list(indices), list(paths), trace
        shown = ", ".join(
            f"{i}:{p}" for i, p in zip(self.indices[:20], self.paths[:20], strict=False)
        )
        more = f" (+{len(self.indices) - 20} more)" if len(self.indices) > 20 else ""
        msg = (
            f"non-finite loss {loss} at step {step} (epoch {epoch}); batch sample indices and source "
            f"paths: {shown}{more}"
        )
        if trace:
            msg += f"\nanomaly trace:\n{trace}"
        super().__init__(msg)


def refuse_leakage(reader: Any) -> None:
    """Train and val must not share a sample md5 (a duplicate in both inflates val accuracy)."""
    from pipeline.datasets.checks import check_leakage

    problems = check_leakage(reader)
    if problems:
        shown = "; ".join(str(p) for p in problems[:10])
        raise DataCheckError(
            f"leakage: version {getattr(reader, 'version_id', '?')} has {len(problems)} sample(s) in both "
            f"train and val: {shown}"
        )


def manifest_label_counts(
    manifest: Mapping[str, Any], split: str, classes: Sequence[str]
) -> np.ndarray | None:
    """The manifest's per-class count of one split, in class-index order, or None when the
    manifest does not carry one. The store writes ``counts.per_split.<split>.classes``
    ({class name: n}); a plain {split: {class: n}} table is accepted too."""
    counts = manifest.get("counts")
    tables = [counts.get("per_split")] if isinstance(counts, Mapping) else []
    tables += [manifest.get("class_counts"), counts]
    for table in tables:
        if not isinstance(table, Mapping):
            continue
        per = table.get(split)
        if isinstance(per, Mapping) and isinstance(per.get("classes"), Mapping):
            per = per["classes"]
        if isinstance(per, Mapping):
            out = np.zeros(len(classes), dtype=np.int64)
            for name, n in per.items():
                if str(name) in classes:
                    out[list(classes).index(str(name))] = int(n)
                elif str(name).isdigit() and int(name) < len(classes):
                    out[int(name)] = int(n)
                else:
                    raise DataCheckError(
                        f"label distribution: the manifest counts class {name!r} in {split}, which is not among the version's classes"
                    )
            return out
        if isinstance(per, list) and len(per) == len(classes):
            return np.asarray(per, dtype=np.int64)
    return None


def check_label_distribution(reader: Any, splits: Sequence[str] = ("train", "val")) -> None:
    """Each split's label histogram must equal the manifest's. A mismatch means the arrays and
    the manifest disagree (a partial copy, a wrong segment, a bad label map): stop."""
    classes = list(reader.classes)
    for split in splits:
        expected = manifest_label_counts(reader.manifest, split, classes)
        part = reader.split(split)
        labels = np.asarray(part.labels(), dtype=np.int64)
        if labels.size and (labels.min() < 0 or labels.max() >= len(classes)):
            raise DataCheckError(
                f"label distribution: {split} has labels outside 0..{len(classes) - 1}"
            )
        actual = np.bincount(labels, minlength=len(classes))
        if expected is None:
            log.warning(
                "label distribution: the manifest has no per-class counts for %s; not checked",
                split,
            )
            continue
        if not np.array_equal(actual, expected):
            diffs = [
                f"{classes[i]}: manifest {int(expected[i])}, data {int(actual[i])}"
                for i in np.nonzero(actual != expected)[0][:10]
            ]
            raise DataCheckError(f"label distribution mismatch in {split}: " + "; ".join(diffs))


def batch_paths(reader: Any, indices: Sequence[int]) -> list[str]:
    paths = []
    for i in indices:
        try:
            paths.append(str(reader.metadata(int(i)).get("path", "?")))
        except Exception as exc:  # the report must not fail on a broken metadata line
            paths.append(f"? ({exc})")
    return paths


def anomaly_trace(loss: Any) -> str:
    """Run the backward of the bad loss under anomaly detection: autograd names the op that
    produced NaN and prints the forward stack that created it (recorded because the whole
    run has anomaly mode on)."""
    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=True):
                loss.backward()
        except RuntimeError as exc:
            caught_text = "\n".join(str(w.message) for w in caught)
            return f"{exc}\n{caught_text}".strip()
    text = "\n".join(str(w.message) for w in caught)
    return (
        text
        or "the backward pass produced no NaN: the loss itself is non-finite (check the inputs and the labels)"
    )


def non_finite_error(
    reader: Any,
    step: int,
    epoch: int,
    loss: Any,
    indices: Any,
    *,
    trace: str | None = None,
    other_rank: bool = False,
) -> NonFiniteLossError:
    """The error for a non-finite loss at ``step``, naming the batch's samples by their
    files. ``other_rank``: the loss went bad on another rank; this one names its own batch."""
    idx = [int(i) for i in indices.tolist()] if indices is not None else []
    # Indices of the split view → the version's own sample paths via its metadata.
    paths = batch_paths(reader, idx)
    value = float(loss.detach()) if not other_rank else float("nan")
    err = NonFiniteLossError(step, epoch, value, idx, paths, trace)
    if other_rank:
        err.args = (
            f"non-finite loss on another rank at step {step}; this rank's batch: "
            + ", ".join(map(str, idx[:20])),
        )
    return err

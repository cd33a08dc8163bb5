"""Which checkpoint of a run is the best one: the ``best`` pointer verified like a resume, its
fallback when it is bad, and whether a newly committed checkpoint beats it.

The CheckpointManager (training/checkpoint.py) owns the pointer file and calls these; they read
only the manager's public surface (store, run_url, step_url, committed_steps, verify_checkpoint).
"""

from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING, Any

from pipeline.storage import join
from training.checkpoint_format import json_bytes, read_json, read_marker

if TYPE_CHECKING:
    from training.checkpoint import CheckpointInfo, CheckpointManager

# The manager's logger: these warnings are part of its story (and tests capture them there).
log = logging.getLogger("training.checkpoint")


def beats_best(info: CheckpointInfo, best: dict[str, Any] | None) -> bool:
    """Whether a committed checkpoint becomes the best: forced by ``is_best``, or a higher
    metric than the current best's (any metric beats a best without one)."""
    metric = info["metric"]
    return bool(
        info["is_best"]
        or (
            metric is not None
            and (best is None or best.get("metric") is None or metric > best["metric"])
        )
    )


def verified_best_pointer(mgr: CheckpointManager) -> dict | None:
    """The ``best`` pointer ({"step", "url", "metric"}), verified like a resume: its
    checkpoint must be committed with matching checksums. A bad pointer is replaced by the
    best valid committed checkpoint (by its marker's metric), or removed when there is none
    (rank 0 only; other ranks just get the fallback)."""
    url = join(mgr.run_url, "best")
    pointer = read_json(mgr.store, url)
    if pointer is None:
        return None
    reason = pointer_problem(mgr, pointer)
    if reason is None:
        return pointer
    log.warning("the best pointer %s %s; looking for another best checkpoint", url, reason)
    fallback = best_valid_checkpoint(mgr, exclude=pointer.get("step"))
    if mgr.is_writer:
        if fallback is None:
            mgr.store.delete(url)
        else:
            mgr.store.write_bytes(url, json_bytes(fallback))
    if fallback is None:
        log.warning("no other checkpoint of run %s has a metric: best pointer removed", mgr.run_id)
    else:
        log.warning("best checkpoint is now step %d at %s", fallback["step"], fallback["url"])
    return fallback


def pointer_problem(mgr: CheckpointManager, pointer: Any) -> str | None:
    """None when ``pointer`` names a committed, intact checkpoint of this run; else why not."""
    step = pointer.get("step") if isinstance(pointer, dict) else None
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return f"is malformed ({pointer!r})"
    if pointer.get("url") != mgr.step_url(step):
        return f"names {pointer.get('url')!r}, not this run's step-{step}"
    reason = mgr.verify_checkpoint(step)
    return f"names checkpoint step {step}, which {reason}" if reason else None


def best_valid_checkpoint(mgr: CheckpointManager, exclude: Any) -> dict | None:
    """The intact committed checkpoint with the highest finite marker metric, or None."""
    candidates = []
    for step in mgr.committed_steps():
        if step == exclude:
            continue
        marker, _ = read_marker(mgr.store, mgr.step_url(step))
        metric = (marker or {}).get("metric")
        if isinstance(metric, int | float) and math.isfinite(metric):
            candidates.append((float(metric), step))
    for metric, step in sorted(candidates, reverse=True):
        if mgr.verify_checkpoint(step) is None:
            return {"step": step, "url": mgr.step_url(step), "metric": metric}
    return None

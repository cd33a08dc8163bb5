"""Where a run starts: from its newest valid checkpoint, or from step 0 — and never silently
from step 0 when the run HAD checkpoints that all turned out corrupt or missing.

``TRAIN_RESUME`` (``CheckpointConfig.resume``):

- ``auto`` (default): resume from the newest valid checkpoint; if every one is unusable, start
  from step 0 with an ERROR event (logged, printed as a banner, kept in result.json and on the
  run record);
- ``require``: the same, except that every checkpoint unusable refuses the run: exit 3
  (``EXIT_DATA``, like a refused version: the stored state was refused, and a retry would find
  the same checkpoints);
- ``never``: ignore the run's checkpoints and start from step 0; they are replaced as soon as
  the first new checkpoint commits.

A run with no checkpoint at all (its first attempt) just starts, in every mode.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from pipeline.redact import redact_text
from training.config import TrainConfig
from training.distributed import DistInfo, broadcast_object, gather_objects
from training.guards import DataCheckError

log = logging.getLogger("training")


class ResumeRefused(DataCheckError):
    """TRAIN_RESUME=require and no checkpoint of the run is usable (exit 3)."""


@dataclass
class RunEvents:
    """Notable things that happened to a run, for result.json and the run record; each is also
    logged at its level."""

    items: list[dict[str, str]] = field(default_factory=list)

    def add(self, level: str, message: str) -> None:
        message = redact_text(message)
        log.log(logging.getLevelName(level), "%s", message)
        self.items.append(
            {"time": datetime.now(UTC).isoformat(), "level": level, "message": message}
        )

    def warning(self, message: str) -> None:
        self.add("WARNING", message)

    def error(self, message: str) -> None:
        self.add("ERROR", message)


def _agree_on_state(manager: Any, dist: DistInfo) -> dict[str, Any] | None:
    """Every rank loads the newest valid checkpoint itself (no big broadcast); if the ranks
    disagree on which (storage changed underneath), all take rank 0's."""
    state = manager.load_latest()
    steps = gather_objects(None if state is None else int(state["step"]), dist)
    if len(set(steps)) > 1:
        log.warning("ranks found different newest checkpoints %s; using rank 0's", steps)
        state = broadcast_object(state, dist)
    return state


def _unusable_detail(manager: Any) -> str:
    if manager.skipped:
        return "; ".join(f"step {s['step']} {s['reason']}" for s in manager.skipped)
    return (
        f"no step folder is left, though its {' and '.join(manager.pointers_found)} pointer exists"
    )


def resume_state(
    cfg: TrainConfig, manager: Any, dist: DistInfo, events: RunEvents
) -> dict[str, Any] | None:
    """The checkpoint state to resume from, or None to start from step 0 (see the module
    docstring); ResumeRefused under TRAIN_RESUME=require when every checkpoint is unusable."""
    mode = cfg.checkpoint.resume
    if mode == "never":
        ignored = manager.start_fresh()
        if ignored:
            events.warning(
                f"TRAIN_RESUME=never: ignoring the {ignored} checkpoint folder(s) of run "
                f"{manager.run_id}; they are deleted once the first new checkpoint commits"
            )
        return None
    state = _agree_on_state(manager, dist)
    # Rank 0's verdict for every rank: they must all refuse, or all go on to the collectives.
    unusable, detail = broadcast_object(
        (state is None and manager.unusable, _unusable_detail(manager) if state is None else ""),
        dist,
    )
    if not unusable:
        return state
    what = f"run {manager.run_id} has checkpoints under {manager.run_url} but none is usable ({detail})"
    if mode == "require":
        events.error(f"{what}; refused (TRAIN_RESUME=require)")
        raise ResumeRefused(
            f"{what}; TRAIN_RESUME=require refuses to start again from step 0. To start over, "
            "rerun with TRAIN_RESUME=auto or never, or with a new RUN_ID"
        )
    events.error(f"{what}; training starts again from step 0 (TRAIN_RESUME=auto)")
    if dist.is_main:
        bar = "!" * 78
        print(
            f"{bar}\nWARNING: every checkpoint of run {manager.run_id} is unusable: starting "
            f"again from step 0.\nSet TRAIN_RESUME=require to refuse instead. Details in the "
            f"log above and in result.json (events).\n{bar}",
            file=sys.stderr,
            flush=True,
        )
    return None

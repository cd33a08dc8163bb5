"""Checkpoints on object storage: local snapshot, background upload, commit, resume, retention.

The layout and what makes a checkpoint count (its commit marker, sizes and sha256) are in
training/checkpoint_format.py. ``load_latest`` walks the step-* folders newest first and skips
(with a WARNING naming it) any that is incomplete or corrupt, so resume falls back to the
previous one. What it skipped is kept in ``skipped``; ``unusable`` then says whether the run HAD
checkpoints (a step folder or a pointer) none of which could be used, which the trainer must
not take for a fresh run (TRAIN_RESUME). ``best_pointer`` is verified the same way (marker,
sizes, sha256): a bad one is replaced by the best valid committed checkpoint by its marker's
metric, or removed (training/checkpoint_best.py decides which is best). ``start_fresh``
ignores the run's checkpoints (TRAIN_RESUME=never).

Saving never stalls on the network: ``save()`` writes a local snapshot (``torch.save`` to
``local_dir``, fast) and returns; a background thread hashes, uploads, writes the marker,
moves ``latest``/``best`` and applies retention. At most one upload is in flight: a ``save()``
that finds the previous upload still running waits for it first (that bounds local disk use to
two snapshots and keeps the markers in step order). An upload error is raised by the next
``save()`` or by ``close()``, once.

Retention keeps the newest ``keep_last`` committed checkpoints plus the best one. "Best" means
the highest ``metric`` passed to save() (higher is better: pass accuracy, or a negated loss), or
a save with ``is_best=True``. Older checkpoints are deleted only after the new one is committed.

Only rank 0 writes; on other ranks save/upload_file/write_result are no-ops (save still returns
the URL the checkpoint has on rank 0), while load_latest works on every rank.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pipeline.storage import ObjectStore, join, store_for
from training.checkpoint_best import beats_best, verified_best_pointer
from training.checkpoint_format import (
    MARKER,
    POINTERS,
    RESULT_FILE,
    check_manager_args,
    check_upload_name,
    json_bytes,
    load_verified,
    marker_bytes,
    read_json,
    snapshot_files,
    step_dir_name,
    step_folders,
    verify,
    write_snapshot,
)
from training.upload_thread import UploadThread

log = logging.getLogger("training.checkpoint")

# Called in the upload thread after a checkpoint is committed / after one is deleted by
# retention, e.g. to record it in the metadata store (pipeline.runs). A hook that raises is
# logged, not fatal: the checkpoint itself is safe in storage either way.
CommitHook = Callable[["CheckpointInfo"], None]
DeleteHook = Callable[[int, str], None]


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (raised by the save() after the failed upload, or close())."""


class CheckpointInfo(dict):
    """What a commit hook receives: step, url, metric, is_best (a plain dict, JSON-safe)."""


class CheckpointManager:
    """Save and restore one run's checkpoints under ``<base_url>/<run_id>``."""

    def __init__(
        self,
        base_url: str,
        run_id: str,
        *,
        keep_last: int = 2,
        rank: int = 0,
        local_dir: Path | None = None,
        on_commit: CommitHook | None = None,
        on_delete: DeleteHook | None = None,
    ) -> None:
        check_manager_args(base_url, run_id, keep_last, rank)
        self.base_url = base_url.rstrip("/")
        self.run_id = run_id
        self.run_url = join(self.base_url, run_id)
        self.keep_last = keep_last
        self.rank = rank
        self.store: ObjectStore = store_for(self.run_url)
        self._own_local_dir = local_dir is None
        self.local_dir = (
            Path(local_dir)
            if local_dir is not None
            else Path(tempfile.mkdtemp(prefix="laketrain-ckpt-"))
        )
        self.on_commit = on_commit
        self.on_delete = on_delete
        self._uploads = UploadThread("ckpt-upload")
        # The best checkpoint so far: read from the `best` pointer by the first upload, so a
        # resumed run keeps comparing against the best of its earlier attempts.
        self._best: dict[str, Any] | None = None
        self._best_loaded = False
        # Steps load_latest found corrupt: retention removes them after the next commit.
        self._invalid_steps: set[int] = set()
        # Steps whose files this process hashed itself (committed or verified): no re-download.
        self._verified_steps: set[int] = set()
        # What the last load_latest saw: every checkpoint it skipped and why, and which
        # pointers existed; the trainer's resume policy reads it (see `unusable`).
        self.skipped: list[dict[str, Any]] = []
        self.pointers_found: list[str] = []
        self._closed = False
        self.loaded_step: int | None = None
        self.loaded_url: str | None = None

    # ------------------------------------------------------------------------------ urls
    def step_url(self, step: int) -> str:
        return join(self.run_url, step_dir_name(step))

    @property
    def is_writer(self) -> bool:
        return self.rank == 0

    # ------------------------------------------------------------------------------ save
    def save(
        self, step: int, state: dict, *, metric: float | None = None, is_best: bool = False
    ) -> str:
        """Snapshot ``state`` locally now and upload it in the background; return its URL.

        Raises :class:`CheckpointError` if the PREVIOUS upload failed (the new state is then not
        saved: the trainer should stop rather than run on without checkpoints).
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"checkpoint step must be an integer >= 0, got {step!r}")
        if not isinstance(state, dict):
            raise TypeError(f"checkpoint state must be a dict, got {type(state).__name__}")
        if metric is not None:
            metric = float(metric)
            if not math.isfinite(metric):
                log.warning(
                    "checkpoint step %d: metric %r is not finite; not comparable", step, metric
                )
                metric = None
        url = self.step_url(step)
        if not self.is_writer:
            return url
        if self._closed:
            raise CheckpointError("save() after close()")
        self.wait()
        self._raise_pending_error()

        snap_dir = write_snapshot(state, self.local_dir / step_dir_name(step))
        info = CheckpointInfo(step=step, url=url, metric=metric, is_best=bool(is_best))
        self._uploads.submit(self._upload, snap_dir, info)
        log.info("checkpoint step %d snapshotted locally; uploading to %s", step, url)
        return url

    def _upload(self, snap_dir: Path, info: CheckpointInfo) -> None:
        step, url = info["step"], info["url"]
        try:
            files = snapshot_files(snap_dir)
            # Re-saving a step (a resumed run repeating it) must never leave the old marker
            # vouching for new, half-uploaded bytes.
            marker_url = join(url, MARKER)
            self.store.delete(marker_url)
            for name in files:
                self.store.put_file(snap_dir / name, join(url, name))
            marker = marker_bytes(self.run_id, step, info["metric"], files)
            self.store.write_bytes(marker_url, marker)  # the commit point
            self.store.write_bytes(
                join(self.run_url, "latest"), json_bytes({"step": step, "url": url})
            )
            self._verified_steps.add(step)
            self._invalid_steps.discard(step)
            info["is_best"] = self._update_best(info)
            log.info("checkpoint step %d committed at %s", step, url)
            self._call_hook(self.on_commit, info)
            self._apply_retention(step)
        finally:
            shutil.rmtree(snap_dir, ignore_errors=True)

    def _update_best(self, info: CheckpointInfo) -> bool:
        if not self._best_loaded:
            # The pointer may name a checkpoint that is gone or corrupt: a stale best with a
            # high metric would otherwise outrank every new checkpoint for the rest of the run.
            self._best = self.best_pointer()
            self._best_loaded = True
        better = beats_best(info, self._best)
        if better:
            self._best = {"step": info["step"], "url": info["url"], "metric": info["metric"]}
            self.store.write_bytes(join(self.run_url, "best"), json_bytes(self._best))
        return better

    def _apply_retention(self, current: int) -> None:
        committed = []
        others = []
        for step, names in self._step_dirs().items():
            (committed if MARKER in names else others).append(step)
        committed.sort(reverse=True)
        keep = {s for s in committed if s <= current and s not in self._invalid_steps}
        keep = set(sorted(keep, reverse=True)[: self.keep_last]) | {current}
        if self._best is not None:
            keep.add(int(self._best["step"]))
        for step in committed + others:
            if step in keep:
                continue
            # Newer folders than the one just committed are left alone unless load_latest found
            # them corrupt: only our own earlier attempts could have written them.
            if step > current and step not in self._invalid_steps:
                continue
            url = self.step_url(step)
            self.store.delete_prefix(url)
            self._invalid_steps.discard(step)
            log.info("checkpoint step %d deleted by retention (keep_last=%d)", step, self.keep_last)
            if self.on_delete is not None:
                try:
                    self.on_delete(step, url)
                except Exception:
                    log.exception("checkpoint delete hook failed for step %d", step)

    def _call_hook(self, hook: CommitHook | None, info: CheckpointInfo) -> None:
        if hook is None:
            return
        try:
            hook(CheckpointInfo(info))
        except Exception:
            log.exception("checkpoint commit hook failed for step %d", info["step"])

    # ----------------------------------------------------------------------- errors/wait
    def wait(self) -> None:
        """Block until the in-flight upload (if any) has finished; never raises (its error is
        raised by the next save() or close())."""
        self._uploads.wait()

    def _raise_pending_error(self) -> None:
        exc = self._uploads.take_error()
        if exc is not None:
            raise CheckpointError(f"checkpoint upload under {self.run_url} failed: {exc}") from exc

    def close(self) -> None:
        """Wait for the upload in flight, stop the thread, raise its error if any (once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.wait()
            self._raise_pending_error()
        finally:
            self._uploads.shutdown()
            if self._own_local_dir:
                shutil.rmtree(self.local_dir, ignore_errors=True)

    def __enter__(self) -> CheckpointManager:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Already failing: still finish the upload, but don't mask the original error.
        try:
            self.close()
        except Exception:
            log.exception("checkpoint upload failed while handling another error")

    # ------------------------------------------------------------------------------ load
    def _step_dirs(self) -> dict[int, set[str]]:
        return step_folders(self.store, self.run_url)

    def committed_steps(self) -> list[int]:
        """Steps whose folder has a commit marker, newest first (not verified)."""
        return sorted(
            (s for s, names in self._step_dirs().items() if MARKER in names), reverse=True
        )

    def load_latest(self, map_location: Any = "cpu") -> dict | None:
        """The newest valid checkpoint's state dict (with ``"step"`` set), or None if there is none.

        An incomplete (no marker) or corrupt (size/sha256 mismatch, unreadable) checkpoint is
        skipped with a WARNING naming it, and the previous one is tried.
        """
        self.skipped = []
        self.pointers_found = [
            name for name in POINTERS if self.store.exists(join(self.run_url, name))
        ]
        for step in sorted(self._step_dirs(), reverse=True):
            url = self.step_url(step)
            state, reason = load_verified(self.store, url, map_location, self.local_dir)
            if state is None:
                log.warning("checkpoint %s %s; skipping it", url, reason)
                self.skipped.append({"step": step, "url": url, "reason": reason})
                self._invalid_steps.add(step)
                continue
            state.setdefault("step", step)
            self.loaded_step, self.loaded_url = step, url
            self._verified_steps.add(step)
            log.info("resuming from checkpoint step %d at %s", step, url)
            return state
        return None

    def start_fresh(self) -> int:
        """Ignore this run's existing checkpoints (TRAIN_RESUME=never): the old best no longer
        counts, and retention deletes the old step folders once the first new checkpoint is
        committed (not before: until then they are all the run has). Returns how many."""
        old = sorted(self._step_dirs())
        self._invalid_steps.update(old)
        self._best, self._best_loaded = None, True
        if self.is_writer:
            self.store.delete(join(self.run_url, "best"))
        return len(old)

    @property
    def unusable(self) -> bool:
        """After a load_latest that found nothing: True when the run HAD checkpoints (a step
        folder or a pointer) and none could be used — as opposed to a fresh run."""
        return self.loaded_step is None and bool(self.skipped or self.pointers_found)

    def verify_checkpoint(self, step: int) -> str | None:
        """None when checkpoint ``step`` is committed and every file matches its marker (the
        files are downloaded and hashed, unless this process already did); else why not."""
        if step in self._verified_steps:
            return None
        reason = verify(self.store, self.step_url(step), self.local_dir)
        if reason is None:
            self._verified_steps.add(step)
        return reason

    # ----------------------------------------------------------------- pointers, extras
    def latest_pointer(self) -> dict | None:
        """The ``latest`` pointer ({"step", "url"}), or None. load_latest does not trust it alone."""
        return read_json(self.store, join(self.run_url, "latest"))

    def best_pointer(self) -> dict | None:
        """The ``best`` pointer ({"step", "url", "metric"}), verified like a resume; a bad one
        is replaced by the best valid committed checkpoint, or removed (training.checkpoint_best)."""
        return verified_best_pointer(self)

    def upload_file(self, name: str, local_path: Path) -> str | None:
        """Upload a file beside the checkpoints as ``<run_url>/<name>`` (synchronously).

        Returns the URL (None on ranks other than 0)."""
        check_upload_name(name)
        if not self.is_writer:
            return None
        url = join(self.run_url, name)
        self.store.put_file(Path(local_path), url)
        return url

    def write_result(self, result: dict) -> str | None:
        """Write ``<run_url>/result.json`` atomically (rank 0 only)."""
        if not self.is_writer:
            return None
        url = join(self.run_url, RESULT_FILE)
        self.store.write_bytes(url, json_bytes(result))
        return url

    def read_result(self) -> dict | None:
        return read_json(self.store, join(self.run_url, RESULT_FILE))

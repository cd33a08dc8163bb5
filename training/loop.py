"""The training loop: one `Trainer` holding the model, optimizer, schedule, data position and
metrics, with `train_step`, `evaluate`, `state_dict`/`load_state_dict` and `fit`.

Everything that decides *what* is computed is restored from a checkpoint: weights, optimizer,
scheduler, scaler, every RNG (per rank), the data's (epoch, cursor), the running epoch
sums and the metric history. With deterministic algorithms on CPU, a run killed after any
checkpoint and resumed ends bitwise equal to an uninterrupted one. What the checkpoint holds
and how it is put back is training/trainer_state.py; the val pass is training/evaluation.py.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from training.amp import AmpPlan
from training.assembly import assemble
from training.config import TrainConfig
from training.device import release_cached_memory, resolve_device
from training.distributed import DistInfo, all_reduce_sum
from training.evaluation import evaluate_val
from training.guards import NonFiniteLossError, anomaly_trace, non_finite_error
from training.losses import LOWER_IS_BETTER
from training.metrics import memory_mb, peak_memory_mb
from training.preemption import Preemption, StopRequested
from training.recorder import RunReport
from training.trainer_state import EpochSums, load_trainer_state, summed_epoch, trainer_state

log = logging.getLogger("training")


# ------------------------------------------------------------------------------------ trainer
@dataclass
class FitResult:
    status: str  # succeeded | preempted
    best_metric: float | None
    metric_name: str
    epochs_done: int
    steps: int
    final_val: dict[str, Any] = field(default_factory=dict)


class Trainer:
    """Builds everything from a config and a train/val reader pair; `fit()` runs the epochs.

    ``save_fn(state, step, epoch, metric, is_best)`` persists a checkpoint (rank 0 only;
    training/train.py passes the CheckpointManager's save); ``on_step(trainer)`` is a hook
    called after every step (tests and training/train.py use it). The data, the SIGTERM flag
    and the metrics go through the public API's objects (training.api): ``self.data`` is a
    `VersionDataset`, ``stop_flag`` a `Preemption`, and the metrics lines go to ``report`` (a
    `RunReport`; without one, to ``metrics_path`` alone).
    """

    def __init__(
        self,
        cfg: TrainConfig,
        train_reader: Any,
        val_reader: Any,
        *,
        device: torch.device | None = None,
        dist: DistInfo | None = None,
        metrics_path: Path | None = None,
        save_fn: Callable[..., Any] | None = None,
        stop_flag: Preemption | None = None,
        info: dict[str, Any] | None = None,
        report: RunReport | None = None,
    ) -> None:
        self.cfg = cfg
        self.train_reader, self.val_reader = train_reader, val_reader
        self.device = device or resolve_device(cfg.runtime.device)
        self.dist = dist or DistInfo()
        self.save_fn = save_fn
        self.stop_flag = stop_flag
        self.info = dict(info or {})
        self.on_step: Callable[[Trainer], None] | None = None

        parts = assemble(cfg, train_reader, val_reader, self.device, self.dist)
        self.plan: AmpPlan = parts.plan
        self.scaler = parts.scaler
        self.task, self.regression = parts.shape.task, parts.shape.regression
        self.num_classes, self.sample_shape = parts.shape.num_classes, parts.shape.sample_shape
        self.arch = parts.shape.arch
        self.model = parts.nets.model  # the plain module: state dicts, init, eval
        self.train_model: nn.Module = parts.nets.train_model
        self.segments, self.channels_last = parts.nets.segments, parts.nets.channels_last
        self.optimizer, self.scheduler = parts.optimizer, parts.scheduler
        self.data, self.val_data = parts.data, parts.val_data
        self.steps_per_epoch, self.total_steps = parts.steps_per_epoch, parts.total_steps
        self.warmup = parts.warmup
        self.loss_fn: nn.Module = parts.objective.loss_fn
        self.target = parts.objective.target
        self.transform = parts.transform
        self.metric_name = parts.metric_name

        # Where the run stands: what a checkpoint saves and load_state_dict restores.
        self.step = 0
        self.epoch = 0
        self.sums = EpochSums()
        self.best_metric: float | None = None
        self.best_step: int | None = None
        self.report = report or RunReport(
            None, rank=self.dist.rank, metrics_path=metrics_path, metric_name=self.metric_name
        )
        self.last_val: dict[str, Any] = {}
        self.resumed_from: int | None = None

    @property
    def metrics(self) -> Any:
        """The metrics.jsonl log (the report's)."""
        return self.report.metrics

    # ------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        """The checkpoint: everything needed to continue exactly (collective under DDP;
        training.trainer_state says what it holds)."""
        return trainer_state(self)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        load_trainer_state(self, state)

    # ------------------------------------------------------------------------- steps
    def train_step(
        self, x: torch.Tensor, y: torch.Tensor, indices: torch.Tensor | None = None
    ) -> dict[str, float]:
        cfg = self.cfg
        self.train_model.train()
        x = x.to(self.device, non_blocking=True)
        y = y.to(self.device, non_blocking=True)
        x = self.transform(x, train=True, epoch=self.epoch, step=self.step)
        with self.plan.autocast():
            logits = self.train_model(x)
        loss = self.loss_fn(logits.float(), y)

        local_bad = not bool(torch.isfinite(loss.detach()))
        if local_bad and cfg.runtime.detect_anomaly:
            raise self._non_finite(loss, indices, trace=anomaly_trace(loss))
        # One collective per step carries the loss, "some rank saw a non-finite loss" and
        # "some rank got SIGTERM", so every rank takes the same decision at the same step.
        flags = torch.tensor(
            [
                0.0 if local_bad else float(loss.detach()),
                float(local_bad),
                float(bool(self.stop_flag and self.stop_flag.requested)),
            ],
            dtype=torch.float64,
        )
        flags = all_reduce_sum(flags, self.dist)
        if flags[1] > 0:
            raise self._non_finite(loss, indices, other_rank=not local_bad)

        self.scaler.scale(loss).backward()
        self.scaler.unscale_(self.optimizer)
        params = [p for p in self.model.parameters() if p.grad is not None]
        clip = cfg.optim.clip_norm
        grad_norm = torch.nn.utils.clip_grad_norm_(params, clip if clip > 0 else float("inf"))
        self.scaler.step(self.optimizer)
        self.scaler.update()
        lr = self.optimizer.param_groups[0]["lr"]
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=cfg.runtime.set_to_none)

        with torch.no_grad():
            correct = 0 if self.regression else int((logits.argmax(dim=-1) == y).sum())
        n = int(y.numel())
        self.sums.loss_sum += float(loss.detach()) * n
        self.sums.correct += correct
        self.sums.seen += n
        self.step += 1
        return {
            "loss": float(flags[0]) / self.dist.world_size,
            "lr": lr,
            "grad_norm": float(grad_norm),
            "stop": float(flags[2]) > 0,
        }

    def _non_finite(
        self, loss: torch.Tensor, indices: torch.Tensor | None, **kw: Any
    ) -> NonFiniteLossError:
        if indices is None:
            indices = self.data.last_indices
        return non_finite_error(self.train_reader, self.step, self.epoch, loss, indices, **kw)

    def evaluate(self) -> dict[str, Any]:
        """The val metrics, the model back in its training mode (training.evaluation)."""
        return evaluate_val(self)

    def _metric_value(self, val: dict[str, Any]) -> float | None:
        """The best-checkpoint metric as "higher is better" (the manager's convention)."""
        if self.metric_name not in val:
            return None
        v = float(val[self.metric_name])
        return -v if self.metric_name in LOWER_IS_BETTER else v

    def _save(self, *, metric: float | None = None, is_best: bool = False) -> None:
        state = self.state_dict()  # collective: every rank takes part
        if self.save_fn is not None and self.dist.is_main:
            self.save_fn(state, step=self.step, epoch=self.epoch, metric=metric, is_best=is_best)

    def _end_epoch(self) -> None:
        rt = self.cfg.runtime
        val = self.evaluate()
        sums = summed_epoch(self.sums, self.dist)
        seen = max(float(sums[2]), 1.0)
        record: dict[str, Any] = {
            "kind": "epoch",
            "step": self.step,
            "epoch": self.epoch,
            "train_loss": float(sums[0]) / seen,
            **({} if self.regression else {"train_accuracy": float(sums[1]) / seen}),
            **val,
            "peak_mem_mb": peak_memory_mb(self.device),
        }
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        release_cached_memory(self.device, rt.empty_cache)
        metric = self._metric_value(val)
        is_best = metric is not None and (
            self.best_metric is None
            or metric > self._metric_value({self.metric_name: self.best_metric})
        )
        if is_best:
            self.best_metric, self.best_step = float(val[self.metric_name]), self.step
        self.metrics.write(record)
        self.metrics.flush()
        self.last_val = val
        if self.regression:
            log.info(
                "epoch %d: train loss %.4f | val loss %s rmse %s mae %s",
                self.epoch,
                record["train_loss"],
                *(f"{val[k]:.4f}" if val else "-" for k in ("val_loss", "val_rmse", "val_mae")),
            )
        else:
            log.info(
                "epoch %d: train loss %.4f acc %.4f | val loss %s acc %s",
                self.epoch,
                record["train_loss"],
                record["train_accuracy"],
                f"{val['val_loss']:.4f}" if val else "-",
                f"{val['val_accuracy']:.4f}" if val else "-",
            )
        self.epoch += 1
        self.data.set_epoch(self.epoch)
        self.sums = EpochSums()
        self._save(metric=metric, is_best=is_best)

    def fit(self) -> FitResult:
        """Train from the current (possibly resumed) position to the last epoch."""
        rt = self.cfg.runtime
        every = self.cfg.checkpoint.checkpoint_every
        pause_after = int(os.environ.get("TRAIN_TEST_PAUSE_AFTER_STEP", "-1"))
        anomaly = (
            torch.autograd.set_detect_anomaly(rt.detect_anomaly) if rt.detect_anomaly else None
        )
        try:
            while self.epoch < rt.epochs:
                self.data.set_epoch(self.epoch)
                t_last, n_since = time.perf_counter(), 0
                for x, y in self.data:
                    out = self.train_step(x, y, self.data.last_indices)
                    n_since += int(y.shape[0]) * self.dist.world_size
                    end_of_epoch = self.data.at_epoch_end
                    if self.step % rt.log_every == 0 or end_of_epoch:
                        now = time.perf_counter()
                        self.metrics.write(
                            {
                                "kind": "train",
                                "step": self.step,
                                "epoch": self.epoch,
                                "loss": out["loss"],
                                "lr": out["lr"],
                                "grad_norm": out["grad_norm"],
                                "samples_per_s": n_since / max(now - t_last, 1e-9),
                                "mem_mb": memory_mb(self.device),
                            }
                        )
                        t_last, n_since = now, 0
                    if self.on_step is not None:
                        self.on_step(self)
                    # Single process: a SIGTERM that landed during this step stops right after
                    # it. Under DDP the ranks agree through the next step's collective instead.
                    late_term = (
                        not self.dist.enabled
                        and self.stop_flag is not None
                        and self.stop_flag.requested
                    )
                    if out["stop"] or late_term:
                        self._save()
                        raise StopRequested(
                            f"stopped by SIGTERM after step {self.step}; checkpoint saved"
                        )
                    if every and self.step % every == 0 and not end_of_epoch:
                        self._save()
                    if self.step == pause_after:
                        self._test_pause()
                        self._save()
                        raise StopRequested(
                            f"stopped by SIGTERM after step {self.step}; checkpoint saved"
                        )
                    if end_of_epoch:
                        break
                self._end_epoch()
                if (
                    self.stop_flag is not None
                    and self.stop_flag.requested
                    and self.epoch < rt.epochs
                ):
                    raise StopRequested(
                        f"stopped by SIGTERM at the end of epoch {self.epoch - 1}; checkpoint saved"
                    )
        finally:
            if anomaly is not None:
                torch.autograd.set_detect_anomaly(False)
            self.metrics.flush()
        return FitResult(
            "succeeded",
            self.best_metric,
            self.metric_name,
            self.epoch,
            self.step,
            dict(self.last_val),
        )

    def _test_pause(self) -> None:
        # Test hook (TRAIN_TEST_PAUSE_AFTER_STEP): hold still after a step and its checkpoint so
        # a test can kill this process at a known point. A SIGTERM ends the pause normally.
        print(f"TRAIN_TEST_PAUSED step={self.step}", flush=True)
        while not (self.stop_flag and self.stop_flag.requested):
            time.sleep(0.02)


def result_summary(fit: FitResult) -> dict[str, Any]:
    return {
        "best_metric": fit.best_metric
        if fit.best_metric is None or math.isfinite(fit.best_metric)
        else None,
        "metric_name": fit.metric_name,
        "epochs_done": fit.epochs_done,
        "steps": fit.steps,
    }

"""What a Trainer's checkpoint holds, and putting it back: weights, optimizer, scheduler,
scaler, every rank's RNG, the data's (epoch, cursor), the running epoch sums, the best metric
and the metric history, with the config and the world it was written in.

`Trainer.state_dict` / `Trainer.load_state_dict` (training/loop.py) are these two functions;
the checkpoint files themselves are training/checkpoint.py's business.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from training.distributed import DistInfo, all_reduce_sum, gather_objects
from training.rng import capture_rng, restore_rng

if TYPE_CHECKING:
    from training.loop import Trainer

# The trainer's logger: the resume warnings belong to the training log.
log = logging.getLogger("training")

STATE_FORMAT = 1


@dataclass
class EpochSums:
    loss_sum: float = 0.0
    correct: int = 0
    seen: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"loss_sum": self.loss_sum, "correct": self.correct, "seen": self.seen}


def summed_epoch(sums: EpochSums, dist: DistInfo) -> torch.Tensor:
    """(loss sum, correct, seen) of the running epoch, added up over the ranks (collective)."""
    values = [sums.loss_sum, sums.correct, sums.seen]
    return all_reduce_sum(torch.tensor(values, dtype=torch.float64), dist)


def trainer_state(t: Trainer) -> dict[str, Any]:
    """The checkpoint: everything needed to continue exactly (collective under DDP)."""
    rng = gather_objects(capture_rng(t.device), t.dist)
    # The epoch's running sums of every rank, added up: a resume on any world size then
    # carries them on rank 0 alone (load_trainer_state), and the epoch's mean stays right.
    sums = summed_epoch(t.sums, t.dist)
    return {
        "format": STATE_FORMAT,
        "model": {k: v.detach().cpu() for k, v in t.model.state_dict().items()},
        "optimizer": t.optimizer.state_dict(),
        "scheduler": t.scheduler.state_dict(),
        "scaler": t.scaler.state_dict(),
        "rng": rng,
        "step": t.step,
        "epoch": t.epoch,
        "data": t.data.state_dict(),
        "epoch_sums": {
            "loss_sum": float(sums[0]),
            "correct": int(sums[1]),
            "seen": int(sums[2]),
        },
        "best_metric": t.best_metric,
        "best_step": t.best_step,
        "metric_name": t.metric_name,
        "last_val": dict(t.last_val),
        **t.report.state_dict(),
        "config": t.cfg.to_dict(),
        "arch": t.arch,
        "world_size": t.dist.world_size,
        "torch_version": str(torch.__version__),
        "device": str(t.device),
        **{k: v for k, v in t.info.items() if k not in ("model",)},
    }


def load_trainer_state(t: Trainer, state: dict[str, Any]) -> None:
    """Put ``state`` (a `trainer_state`) back into ``t``, on any world size."""
    if state.get("format") != STATE_FORMAT:
        raise ValueError(f"checkpoint format {state.get('format')!r} is not {STATE_FORMAT}")
    if state.get("arch", t.arch) != t.arch:
        raise ValueError(f"checkpoint holds a {state['arch']} model, this run builds {t.arch}")
    t.model.load_state_dict(state["model"])
    t.optimizer.load_state_dict(state["optimizer"])
    t.scheduler.load_state_dict(state["scheduler"])
    if state.get("scaler"):
        t.scaler.load_state_dict(state["scaler"])
    rngs = state["rng"]
    if len(rngs) == t.dist.world_size:
        restore_rng(rngs[t.dist.rank], t.device)
    else:
        log.warning(
            "checkpoint was written by %d process(es), this run has %d: RNG streams restart from the seed",
            len(rngs),
            t.dist.world_size,
        )
        restore_rng(rngs[0], t.device)
        torch.manual_seed(t.cfg.runtime.seed + 1_000_003 * t.dist.rank + t.step)
    t.step = int(state["step"])
    t.epoch = int(state["epoch"])
    # "sampler": the state of checkpoints written before the public adapter.
    t.data.load_state_dict(state["data"] if "data" in state else state["sampler"])
    t.sums = EpochSums(**(state.get("epoch_sums", {}) if t.dist.is_main else {}))
    t.best_metric, t.best_step = state.get("best_metric"), state.get("best_step")
    t.last_val = dict(state.get("last_val", {}))
    t.report.load_state_dict(state, up_to_step=t.step)
    t.resumed_from = t.step

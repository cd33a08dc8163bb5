"""torchrun support: process-group setup from the variables torchrun sets (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT), gloo on CPU and nccl on CUDA, and small collectives the loop needs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistInfo:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(device_kind: str) -> DistInfo:
    """Join the process group when launched by torchrun; a plain run is rank 0 of 1."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistInfo()
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device_kind == "cuda":
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if device_kind == "cuda" else "gloo")
    return DistInfo(rank, world, local)


def shutdown(info: DistInfo) -> None:
    if info.enabled and dist.is_initialized():
        dist.destroy_process_group()


def _all_reduce(t: torch.Tensor, op: dist.ReduceOp, info: DistInfo) -> torch.Tensor:
    if not info.enabled:
        return t
    if dist.get_backend() == "nccl" and not t.is_cuda:
        # NCCL reduces CUDA tensors only; the loop's small counters live on the CPU.
        on_gpu = t.cuda()
        dist.all_reduce(on_gpu, op=op)
        t.copy_(on_gpu.cpu())
    else:
        dist.all_reduce(t, op=op)
    return t


def all_reduce_sum(t: torch.Tensor, info: DistInfo) -> torch.Tensor:
    return _all_reduce(t, dist.ReduceOp.SUM, info)


def gather_objects(obj: Any, info: DistInfo) -> list[Any]:
    """Every rank's object, on every rank (used for the per-rank RNG states of a checkpoint)."""
    if not info.enabled:
        return [obj]
    out: list[Any] = [None] * info.world_size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj: Any, info: DistInfo) -> Any:
    """Rank 0's object on every rank: all ranks resume from the checkpoint rank 0 picked."""
    if not info.enabled:
        return obj
    box = [obj if info.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier(info: DistInfo) -> None:
    if info.enabled:
        dist.barrier()

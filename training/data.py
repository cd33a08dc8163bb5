"""Data from a dataset version: a resumable, shardable batch sampler, a DataLoader that fetches
whole batches through the reader, and the on-device conversion (uint8 → float, normalise with
the manifest's mean/std, channels_last, optional flip/crop augmentation).

Resume is exact because the order of an epoch is a pure function of (seed, epoch): the sampler
never holds hidden RNG state, only (epoch, batches already taken), which the checkpoint stores.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from training.config import ConfigError


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of epoch ``epoch``: the same on every rank and every restart."""
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(n)


class ResumableBatchSampler(Sampler[list[int]]):
    """Yields lists of sample indices (one list per training batch) for this rank.

    Like DistributedSampler: the epoch permutation is padded (by wrapping) to a multiple of the
    world size and rank r takes every world-th index, so all ranks take the same number of
    batches. Like ``drop_last=True``: a final partial batch is dropped, so every step has the same
    shape (fixed shapes let cudnn.benchmark and torch.compile settle). ``position`` = batches of
    the current epoch already consumed; `state_dict()`/`load_state_dict()` round-trip it.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        *,
        seed: int,
        rank: int = 0,
        world_size: int = 1,
        shuffle: bool = True,
    ) -> None:
        if n < world_size * batch_size:
            raise ConfigError(
                f"TRAIN_BATCH_SIZE / batch_size: {batch_size} x {world_size} process(es) is more than the "
                f"{n} training samples; lower the batch size"
            )
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.rank, self.world_size, self.shuffle = rank, world_size, shuffle
        self.epoch = 0
        self.position = 0

    @property
    def per_rank(self) -> int:
        return -(-self.n // self.world_size)

    def __len__(self) -> int:
        return self.per_rank // self.batch_size

    def set_epoch(self, epoch: int, position: int = 0) -> None:
        self.epoch, self.position = epoch, position

    def batches(self, epoch: int) -> list[list[int]]:
        order = epoch_permutation(self.n, self.seed, epoch) if self.shuffle else np.arange(self.n)
        total = self.per_rank * self.world_size
        if total > self.n:
            order = np.concatenate([order, order[: total - self.n]])
        mine = order[self.rank :: self.world_size]
        nb = len(self)
        return [mine[i * self.batch_size : (i + 1) * self.batch_size].tolist() for i in range(nb)]

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches(self.epoch)[self.position :]

    def state_dict(self) -> dict[str, int]:
        return {
            "epoch": self.epoch,
            "position": self.position,
            "seed": self.seed,
            "world_size": self.world_size,
            "n": self.n,
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict[str, int]) -> None:
        if (
            state.get("world_size", self.world_size) != self.world_size
            or state.get("batch_size", self.batch_size) != self.batch_size
        ):
            # A different sharding cannot continue mid-epoch at the same samples: start the
            # epoch again rather than skip or repeat samples silently.
            self.set_epoch(int(state["epoch"]), 0)
        else:
            self.set_epoch(int(state["epoch"]), int(state["position"]))


class BatchFetch(torch.utils.data.Dataset):
    """Maps a list of indices to one batch via the reader's batched fetch (one vectorised read
    instead of B single-sample reads and a collate). Returns the indices too, so a guard can
    name the samples of a bad batch."""

    def __init__(self, reader: Any) -> None:
        self.reader = reader

    def __len__(self) -> int:
        return len(self.reader)

    def __getitem__(self, indices: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x, y = self.reader.get_batch(list(indices))
        return (
            np.ascontiguousarray(x),
            np.asarray(y, dtype=np.int64),
            np.asarray(indices, dtype=np.int64),
        )


def make_loader(
    reader: Any,
    sampler: Sampler,
    *,
    num_workers: int,
    pin_memory: bool,
    generator: torch.Generator | None = None,
) -> DataLoader:
    """batch_size=None: the sampler already yields whole batches, fetched in one call."""
    return DataLoader(
        BatchFetch(reader),
        sampler=sampler,
        batch_size=None,
        num_workers=num_workers,
        pin_memory=pin_memory,
        # Workers that survive the epoch skip a fork + reader re-open per epoch.
        persistent_workers=num_workers > 0,
        prefetch_factor=2 if num_workers > 0 else None,
        generator=generator,
    )


def eval_batches(n: int, batch_size: int, rank: int = 0, world_size: int = 1) -> list[list[int]]:
    """Evaluation shards: every sample exactly once across ranks, no padding, no shuffle."""
    mine = np.arange(rank, n, world_size)
    return [mine[i : i + batch_size].tolist() for i in range(0, len(mine), batch_size)]


@dataclass
class DeviceTransform:
    """uint8 → float on the device (4x less host→device traffic than shipping floats), then
    normalise. mean/std are per channel on the 0..255 scale (images) or per feature (tables)."""

    mean: torch.Tensor | None
    std: torch.Tensor | None
    channels_last: bool = False
    augment: bool = False
    seed: int = 0

    @classmethod
    def build(
        cls,
        mean: Any,
        std: Any,
        sample_shape: Sequence[int],
        device: torch.device,
        *,
        channels_last: bool,
        augment: bool,
        seed: int,
    ) -> DeviceTransform:
        def as_tensor(v: Any) -> torch.Tensor | None:
            if v is None:
                return None
            t = torch.as_tensor(np.asarray(v, dtype=np.float32), device=device).flatten()
            shape = [1, -1] + [1] * (len(sample_shape) - 1)
            return t.view(*shape) if t.numel() > 1 else t

        m, s = as_tensor(mean), as_tensor(std)
        if s is not None:
            s = s.clamp(min=1e-6)
        return cls(
            m, s, channels_last and len(sample_shape) == 3, augment and len(sample_shape) == 3, seed
        )

    def __call__(
        self, x: torch.Tensor, *, train: bool = False, epoch: int = 0, step: int = 0
    ) -> torch.Tensor:
        x = x.float()
        if self.mean is not None:
            x = x - self.mean
        if self.std is not None:
            x = x / self.std
        if train and self.augment:
            x = self._augment(x, epoch, step)
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return x

    def _augment(self, x: torch.Tensor, epoch: int, step: int) -> torch.Tensor:
        # A generator seeded from (seed, epoch, step) rather than the global RNG: the
        # augmentation of a step is the same after a resume, on any device, with any worker count.
        g = torch.Generator(device=x.device)
        g.manual_seed((self.seed * 1_000_003 + epoch) * 1_000_003 + step)
        b, _, h, w = x.shape
        flip = torch.rand(b, generator=g, device=x.device) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(3), x)
        pad = max(1, min(h, w) // 8)
        padded = torch.nn.functional.pad(
            x, (pad, pad, pad, pad), mode="reflect" if pad < min(h, w) else "constant"
        )
        dy = torch.randint(0, 2 * pad + 1, (b,), generator=g, device=x.device)
        dx = torch.randint(0, 2 * pad + 1, (b,), generator=g, device=x.device)
        rows = dy[:, None] + torch.arange(h, device=x.device)[None, :]  # (b, h)
        cols = dx[:, None] + torch.arange(w, device=x.device)[None, :]  # (b, w)
        idx_b = torch.arange(b, device=x.device)[:, None, None]
        out = padded.permute(0, 2, 3, 1)[idx_b, rows[:, :, None], cols[:, None, :]]  # (b, h, w, c)
        return out.permute(0, 3, 1, 2).contiguous()

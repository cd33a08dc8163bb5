"""Data from a dataset version: `VersionDataset`, the torch adapter that yields whole batches
(uint8 images or float32 features, int64 labels), sharded by DDP rank and resumable mid-epoch;
and the on-device conversion (uint8 → float, normalise with the manifest's mean/std,
channels_last, optional flip/crop augmentation).

Resume is exact, and survives a change of world size or batch size, because the adapter holds
no iterator state, only ``(version id, seed, epoch, cursor)`` (MosaicML Streaming's idea). The
order of an epoch is a pure function of (seed, epoch): one global permutation, the same on every
rank. ``cursor`` counts the samples of that order already handed out, across all ranks. A step
takes the next ``batch_size x world_size`` samples of the order and rank r gets every
world-th of them, starting at r. Whatever the world size before and after a resume, the
samples after the cursor are exactly the ones not yet seen in the epoch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from training.config import ConfigError

log = logging.getLogger("training")

STATE_KEYS = ("version_id", "seed", "epoch", "cursor")


def epoch_permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The shuffled order of epoch ``epoch``: the same on every rank and every restart."""
    return np.random.default_rng([seed, epoch, 0x5EED]).permutation(n)


def _rank_and_world() -> tuple[int, int]:
    """The DDP rank and world size: from an initialised process group, else torchrun's
    variables, else a single process."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


class _Plan(Sampler[list[int]]):
    """The rest of the current epoch for this rank, as index lists, read from the adapter's
    (epoch, cursor) when an iteration starts. The DataLoader iterates it in the main process
    (its workers only fetch), so its prefetching never moves the adapter's cursor."""

    def __init__(self, owner: VersionDataset) -> None:
        self.owner = owner

    def __len__(self) -> int:
        return self.owner.batches_left

    def __iter__(self) -> Iterator[list[int]]:
        o = self.owner
        yield from o.plan(o.epoch, o.cursor)


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
            # float32 targets of a regression version stay floats; class indices are int64.
            np.asarray(y, dtype=np.float32 if np.asarray(y).dtype.kind == "f" else np.int64),
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


class VersionDataset(torch.utils.data.IterableDataset):
    """A split of a dataset version as batches for training: iterate it to get ``(x, y)``
    tensors (``x`` uint8 ``(B, C, H, W)`` for images, float32 ``(B, F)`` for tables; ``y``
    int64 ``(B,)``), one batch per step for this DDP rank.

    - ``rank`` / ``world_size`` default to the process group's (or torchrun's RANK and
      WORLD_SIZE; else 0 of 1). Every rank gets the same number of batches.
    - ``drop_last=True`` (training): a final partial step is left out, so every step has the
      same shape; which samples fall out changes with every epoch's order. ``drop_last=False``
      (evaluation): every sample exactly once, the last batch smaller (and ranks may then get
      different numbers of batches).
    - An iteration runs the rest of the current epoch; when it ends, the adapter moves to the
      next epoch. ``set_epoch(e)`` jumps to epoch ``e`` (from its start, unless it already is
      at ``e``: a resumed epoch keeps its cursor).
    - ``state_dict()`` after a step (``{version_id, seed, epoch, cursor, ...}``, all ints and
      strings) and ``load_state_dict()`` continue exactly after the last batch handed out,
      with any world size or batch size.
    - ``num_workers`` > 0 fetches in worker processes (the cursor still counts only batches
      handed to you); iterate the adapter itself rather than wrapping it in a DataLoader.
    - ``last_indices``: the split's indices of the last batch (to name bad samples).
    """

    def __init__(
        self,
        reader: Any,
        *,
        batch_size: int,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        auto_rank, auto_world = _rank_and_world()
        rank = auto_rank if rank is None else rank
        world_size = auto_world if world_size is None else world_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size: must be an integer >= 1 (got {batch_size!r})")
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size)")
        self.reader = reader
        self.n = len(reader)
        if drop_last and self.n < world_size * batch_size:
            raise ConfigError(
                f"TRAIN_BATCH_SIZE / batch_size: {batch_size} x {world_size} process(es) is more than the "
                f"{self.n} training samples; lower the batch size"
            )
        self.batch_size, self.seed, self.shuffle, self.drop_last = (
            batch_size,
            int(seed),
            shuffle,
            drop_last,
        )
        self.rank, self.world_size = rank, world_size
        self.version_id = str(getattr(reader, "version_id", "") or "")
        self.epoch = 0
        self.cursor = 0
        self.last_indices: torch.Tensor | None = None
        self._order: tuple[int, np.ndarray] | None = None
        # A generator of the loader's own: creating an iterator draws a base seed from it
        # instead of from the global RNG, so a resume mid-epoch sees the same global RNG stream.
        self.loader = make_loader(
            reader,
            _Plan(self),
            num_workers=num_workers,
            pin_memory=pin_memory,
            generator=torch.Generator().manual_seed(self.seed),
        )

    # ------------------------------------------------------------------------- plan
    @property
    def global_batch(self) -> int:
        """Samples one step takes from the epoch's order, all ranks together."""
        return self.batch_size * self.world_size

    def _starts(self, cursor: int) -> range:
        g = self.global_batch
        return range(cursor, self.n - g + 1 if self.drop_last else self.n, g)

    def __len__(self) -> int:
        """Batches of a whole epoch (this rank)."""
        return len(self._starts(0))

    @property
    def batches_left(self) -> int:
        """Batches left in the current epoch (this rank)."""
        return len(self._starts(self.cursor))

    @property
    def at_epoch_end(self) -> bool:
        return self.batches_left == 0

    def order(self, epoch: int) -> np.ndarray:
        """The epoch's global sample order (every rank's)."""
        if self._order is None or self._order[0] != epoch:
            perm = (
                epoch_permutation(self.n, self.seed, epoch) if self.shuffle else np.arange(self.n)
            )
            self._order = (epoch, perm)
        return self._order[1]

    def plan(self, epoch: int | None = None, cursor: int = 0) -> list[list[int]]:
        """This rank's batches (split indices) of ``epoch`` from global position ``cursor``."""
        order = self.order(self.epoch if epoch is None else epoch)
        g, r, w = self.global_batch, self.rank, self.world_size
        full = (self.n - cursor) // g  # whole steps left: one reshape, one tolist
        out = order[cursor : cursor + full * g].reshape(full, g)[:, r::w].tolist()
        tail = order[cursor + full * g :][r::w]
        if not self.drop_last and len(tail):
            out.append(tail.tolist())
        return out

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.cursor = int(epoch), 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        starts = self._starts(self.cursor)
        for start, (x, y, idx) in zip(starts, self.loader, strict=False):
            # Counted when handed out, before the caller's step: a state_dict() taken after
            # the step includes this batch, whatever the loader prefetched.
            self.cursor = min(start + self.global_batch, self.n)
            self.last_indices = idx
            yield x, y
        self.epoch, self.cursor = self.epoch + 1, 0

    # ------------------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {
            "version_id": self.version_id,
            "seed": self.seed,
            "epoch": self.epoch,
            "cursor": self.cursor,
            # Informative: a resume may use another world size or batch size.
            "n": self.n,
            "world_size": self.world_size,
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue where ``state`` stopped. Refuses a state of another version or split (its
        indices would name other samples); adopts its seed (the order of the epoch in flight)."""
        saved = str(state.get("version_id") or "")
        if saved and self.version_id and saved != self.version_id:
            raise ValueError(
                f"data state is for version {saved}, this dataset is version {self.version_id}"
            )
        if "n" in state and int(state["n"]) != self.n:
            raise ValueError(
                f"data state covers {state['n']} samples, this split has {self.n} (another split?)"
            )
        if "cursor" in state:
            cursor = int(state["cursor"])
        else:
            # The trainer's earlier sampler state (epoch, position in batches): the same
            # global order and rank layout, so position x batch x world is its cursor.
            cursor = int(state["position"]) * int(state["batch_size"]) * int(state["world_size"])
        if not 0 <= cursor <= self.n:
            raise ValueError(f"data state cursor {cursor} is not in 0..{self.n}")
        seed = int(state.get("seed", self.seed))
        if seed != self.seed:
            log.warning(
                "data order: continuing with the checkpoint's seed %d, not %d", seed, self.seed
            )
            self.seed, self._order = seed, None
        self.epoch, self.cursor = int(state["epoch"]), cursor


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

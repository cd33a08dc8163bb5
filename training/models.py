"""The models: a small ResNet-style CNN for images, a ResNet-50-style net (bottlenecks, for the
GPU benchmark and big images), and an MLP for tables and arrays.

All residual blocks sit in one flat `blocks` sequence so gradient checkpointing can cut it into
segments (`checkpoint_segments`, default ceil(blocks / 4)).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.utils.checkpoint
from torch import nn

from training.config import ConfigError

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": lambda: nn.ReLU(inplace=True),
    "silu": lambda: nn.SiLU(inplace=True),
    "gelu": lambda: nn.GELU(),
}


class BasicBlock(nn.Module):
    """Two 3x3 convolutions with BatchNorm and a shortcut (a 1x1 projection when the shape changes)."""

    def __init__(self, cin: int, cout: int, stride: int, act: str) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.act1 = ACTIVATIONS[act]()
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.bn2.is_last_in_branch = True  # zero-initialised gamma: the block starts as identity
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        self.act2 = ACTIVATIONS[act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(self.conv2(self.act1(self.bn1(self.conv1(x)))))
        return self.act2(out + self.shortcut(x))


class Bottleneck(nn.Module):
    """ResNet-50's 1x1 → 3x3 → 1x1 block, expansion 4."""

    expansion = 4

    def __init__(self, cin: int, mid: int, stride: int, act: str) -> None:
        super().__init__()
        cout = mid * self.expansion
        self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(mid)
        self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(mid)
        self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.bn3.is_last_in_branch = True
        self.act = ACTIVATIONS[act]()
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.act(self.bn1(self.conv1(x)))
        out = self.act(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.act(out + self.shortcut(x))


class MLPBlock(nn.Module):
    def __init__(self, cin: int, cout: int, act: str) -> None:
        super().__init__()
        self.linear = nn.Linear(cin, cout, bias=False)
        self.norm = nn.BatchNorm1d(cout)
        self.act = ACTIVATIONS[act]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(self.linear(x)))


@contextlib.contextmanager
def _frozen_bn_stats(module: nn.Module) -> Iterator[None]:
    """BatchNorm without running-stat updates. The recomputation of a checkpointed segment runs
    its forward a second time in train mode; without this, every BN layer in it would fold the
    same batch into its running mean/var twice, and checkpointed training would evaluate
    differently from plain training."""
    saved = []
    for m in module.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.track_running_stats:
            saved.append((m, m.momentum, m.num_batches_tracked.clone()))
            m.momentum = 0.0  # running = running * 1 + batch * 0: exactly unchanged
    try:
        yield
    finally:
        for m, momentum, tracked in saved:
            m.momentum = momentum
            m.num_batches_tracked.copy_(tracked)


class CheckpointedBlocks(nn.Module):
    """A flat sequence of blocks that can recompute its activations in backward."""

    def __init__(self, blocks: Sequence[nn.Module]) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)
        self.segments = 0  # 0 = store all activations (no checkpointing)

    def enable_checkpointing(self, segments: int = 0) -> int:
        n = len(self.blocks)
        self.segments = min(segments or math.ceil(n / 4), n) if n else 0
        return self.segments

    def _segment_fn(self, mods: Sequence[nn.Module]) -> Callable[[torch.Tensor], torch.Tensor]:
        first = [True]

        def run(x: torch.Tensor) -> torch.Tensor:
            # The first call is the real forward; later calls are the backward's recomputation.
            ctx = contextlib.nullcontext() if first[0] else _frozen_bn_stats(nn.ModuleList(mods))
            first[0] = False
            with ctx:
                for m in mods:
                    x = m(x)
            return x

        return run

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.segments or not (self.training and torch.is_grad_enabled()):
            for m in self.blocks:
                x = m(x)
            return x
        n = len(self.blocks)
        size = math.ceil(n / self.segments)
        for start in range(0, n, size):
            mods = list(self.blocks[start : start + size])
            x = torch.utils.checkpoint.checkpoint(self._segment_fn(mods), x, use_reentrant=False)
        return x


class ResNet(nn.Module):
    """Small-image ResNet: a 3x3 stem, 3 stages (width, 2·width, 4·width) of ``depth`` basic
    blocks, stride 2 between stages, global average pooling."""

    def __init__(
        self,
        in_channels: int,
        num_classes: int,
        *,
        width: int = 32,
        depth: int = 2,
        act: str = "relu",
        dropout: float = 0.0,
        stages: int = 3,
    ) -> None:
        super().__init__()
        self.activation = act
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 3, 1, 1, bias=False),
            nn.BatchNorm2d(width),
            ACTIVATIONS[act](),
        )
        blocks: list[nn.Module] = []
        cin = width
        for s in range(stages):
            cout = width * 2**s
            for b in range(depth):
                blocks.append(BasicBlock(cin, cout, 2 if (b == 0 and s > 0) else 1, act))
                cin = cout
        self.body = CheckpointedBlocks(blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(cin, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)))


class ResNet50(nn.Module):
    """ResNet-50's layout ([3, 4, 6, 3] bottlenecks, 64→2048 channels, ~25.6 M parameters at
    1000 classes) with the ImageNet stem. Written here because torchvision is not available."""

    def __init__(
        self,
        in_channels: int = 3,
        num_classes: int = 1000,
        *,
        width: int = 64,
        layers: Sequence[int] = (3, 4, 6, 3),
        act: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.activation = act
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            ACTIVATIONS[act](),
            nn.MaxPool2d(3, 2, 1),
        )
        blocks: list[nn.Module] = []
        cin = width
        for s, n in enumerate(layers):
            mid = width * 2**s
            for b in range(n):
                blocks.append(Bottleneck(cin, mid, 2 if (b == 0 and s > 0) else 1, act))
                cin = mid * Bottleneck.expansion
        self.body = CheckpointedBlocks(blocks)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dropout(dropout), nn.Linear(cin, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)))


class MLP(nn.Module):
    """Flatten, then ``depth`` Linear-BN-activation blocks of ``width`` units, then a classifier."""

    def __init__(
        self,
        in_features: int,
        num_classes: int,
        *,
        width: int = 256,
        depth: int = 2,
        act: str = "relu",
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.activation = act
        self.flatten = nn.Flatten()
        dims = [in_features] + [width] * depth
        self.body = CheckpointedBlocks(
            [MLPBlock(a, b, act) for a, b in zip(dims[:-1], dims[1:], strict=True)]
        )
        self.head = nn.Sequential(nn.Dropout(dropout), nn.Linear(dims[-1], num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.flatten(x)))


def pick_architecture(requested: str, modality: str, sample_shape: Sequence[int]) -> str:
    """auto → resnet for images (C, H, W), mlp for tables and arrays."""
    if requested != "auto":
        return requested
    return "resnet" if modality == "image" and len(sample_shape) == 3 else "mlp"


def build_model(
    arch: str,
    sample_shape: Sequence[int],
    num_classes: int,
    *,
    width: int,
    depth: int,
    activation: str,
    dropout: float,
) -> nn.Module:
    if arch in ("resnet", "resnet50"):
        if len(sample_shape) != 3:
            raise ConfigError(
                f"TRAIN_MODEL / model: {arch} needs images (C, H, W), the version's samples have shape {tuple(sample_shape)}"
            )
        if arch == "resnet50":
            return ResNet50(sample_shape[0], num_classes, act=activation, dropout=dropout)
        return ResNet(
            sample_shape[0], num_classes, width=width, depth=depth, act=activation, dropout=dropout
        )
    if arch == "mlp":
        return MLP(
            math.prod(sample_shape),
            num_classes,
            width=width,
            depth=depth,
            act=activation,
            dropout=dropout,
        )
    raise ConfigError(f"TRAIN_MODEL / model: unknown architecture {arch!r}")


def enable_grad_checkpointing(model: nn.Module, segments: int = 0) -> int:
    """Turn on checkpointing in every `CheckpointedBlocks` of the model; return the segments used."""
    used = 0
    for m in model.modules():
        if isinstance(m, CheckpointedBlocks):
            used = m.enable_checkpointing(segments)
    return used

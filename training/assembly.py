"""The trainer's parts, built from a config and a train/val reader pair: the AMP plan, the
model (initialised from the seed, wrapped for DDP and compile), the optimizer and schedule,
the data in both splits, the loss and the device-side transform.

The order is part of the contract: the model is built right after ``seed_everything`` (so
every rank starts from the same weights), and the per-rank seed is set after it, before the
optimizer and the data. A run resumed from a checkpoint overwrites the weights later and is
never re-initialised.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from training.amp import AmpPlan, resolve_amp
from training.config import TrainConfig
from training.data import DeviceTransform, VersionDataset
from training.device import configure_backends
from training.distributed import DistInfo
from training.init import init_weights
from training.losses import RegressionLoss, RegressionTarget, build_loss, class_weights
from training.models import build_model, enable_grad_checkpointing, pick_architecture
from training.optim import build_optimizer
from training.rng import seed_everything
from training.schedule import default_warmup, make_scheduler


@dataclass
class VersionShape:
    """What the trainer needs to know of a version before it builds a model for it."""

    task: str  # classification | regression
    num_classes: int  # 1 for a regression head
    sample_shape: tuple[int, ...]
    arch: str

    @property
    def regression(self) -> bool:
        return self.task == "regression"


@dataclass
class Networks:
    model: nn.Module  # the plain module: state dicts, init, eval
    train_model: nn.Module  # what the step calls: DDP and/or compiled around ``model``
    segments: int  # gradient-checkpointing segments, 0 when off
    channels_last: bool


@dataclass
class Objective:
    loss_fn: nn.Module
    target: RegressionTarget | None  # the regression target's transform, None for classes


@dataclass
class Parts:
    plan: AmpPlan
    scaler: Any
    shape: VersionShape
    nets: Networks
    optimizer: torch.optim.Optimizer
    data: VersionDataset
    val_data: VersionDataset
    steps_per_epoch: int
    total_steps: int
    warmup: int
    scheduler: Any
    objective: Objective
    transform: DeviceTransform
    metric_name: str


def assemble(
    cfg: TrainConfig, train_reader: Any, val_reader: Any, device: torch.device, dist: DistInfo
) -> Parts:
    rt = cfg.runtime
    configure_backends(cfg, device)
    plan = resolve_amp(rt.amp, device)
    scaler = plan.make_scaler()
    shape = version_shape(cfg, train_reader)
    nets = build_networks(cfg, shape, device, dist)
    # Dropout and other global-RNG users differ per rank, as in any DDP run.
    torch.manual_seed(rt.seed + 1_000_003 * dist.rank)

    optimizer = build_optimizer(nets.model, cfg)
    data = VersionDataset(
        train_reader,
        batch_size=cfg.data.batch_size,
        seed=rt.seed,
        rank=dist.rank,
        world_size=dist.world_size,
        num_workers=cfg.data.num_workers,
        pin_memory=device.type == "cuda",
    )
    steps_per_epoch = len(data)
    total_steps = steps_per_epoch * rt.epochs
    warmup = default_warmup(total_steps, cfg.optim.warmup_steps)
    scheduler = make_scheduler(
        optimizer, warmup=warmup, total=total_steps, floor=cfg.optim.min_lr_ratio
    )
    objective = build_objective(cfg, train_reader, shape, device)
    transform = DeviceTransform.build(
        getattr(train_reader, "mean", None),
        getattr(train_reader, "std", None),
        shape.sample_shape,
        device,
        channels_last=nets.channels_last,
        augment=cfg.data.augment,
        seed=rt.seed,
    )
    val_data = VersionDataset(
        val_reader,
        batch_size=cfg.data.eval_batch_size,
        shuffle=False,
        drop_last=False,
        rank=dist.rank,
        world_size=dist.world_size,
    )
    metric_name = cfg.checkpoint.metric
    if shape.regression and metric_name == "val_accuracy":
        metric_name = "val_rmse"  # a regressor has no accuracy: the default becomes RMSE
    return Parts(
        plan=plan,
        scaler=scaler,
        shape=shape,
        nets=nets,
        optimizer=optimizer,
        data=data,
        val_data=val_data,
        steps_per_epoch=steps_per_epoch,
        total_steps=total_steps,
        warmup=warmup,
        scheduler=scheduler,
        objective=objective,
        transform=transform,
        metric_name=metric_name,
    )


def version_shape(cfg: TrainConfig, train_reader: Any) -> VersionShape:
    # A regression version (float32 targets) gets a one-output head and RegressionLoss.
    task = getattr(train_reader, "task", "classification")
    classes = list(train_reader.classes)
    sample_shape = tuple(
        getattr(train_reader, "sample_shape", None) or train_reader.get_batch([0])[0].shape[1:]
    )
    arch = pick_architecture(
        cfg.model.model, getattr(train_reader, "modality", "image"), sample_shape
    )
    num_classes = 1 if task == "regression" else max(len(classes), 1)
    return VersionShape(task, num_classes, sample_shape, arch)


def build_networks(
    cfg: TrainConfig, shape: VersionShape, device: torch.device, dist: DistInfo
) -> Networks:
    """The model built (and initialised) from the run's seed, the same on every rank."""
    rt = cfg.runtime
    seed_everything(rt.seed)
    model = build_model(
        shape.arch,
        shape.sample_shape,
        shape.num_classes,
        width=cfg.model.width,
        depth=cfg.model.depth,
        activation=cfg.model.activation,
        dropout=cfg.model.dropout,
    )
    init_weights(model, cfg.model.activation)
    segments = (
        enable_grad_checkpointing(model, rt.checkpoint_segments) if rt.grad_checkpointing else 0
    )
    channels_last = (
        rt.channels_last == "on" or (rt.channels_last == "auto" and device.type == "cuda")
    ) and len(shape.sample_shape) == 3
    model = model.to(device)
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    train_model: nn.Module = model
    if dist.enabled:
        from torch.nn.parallel import DistributedDataParallel as DDP

        train_model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    if rt.compile:
        train_model = torch.compile(train_model, backend=rt.compile_backend)
    return Networks(model, train_model, segments, channels_last)


def build_objective(
    cfg: TrainConfig, train_reader: Any, shape: VersionShape, device: torch.device
) -> Objective:
    """The training loss: a regression loss on the (transformed) target, or a classification
    loss with the class weights the config asks for, counted on the train split."""
    if shape.regression:
        target = RegressionTarget(
            np.asarray(train_reader.labels(), dtype=np.float64), cfg.loss.target_transform
        ).to(device)
        loss = RegressionLoss(target, cfg.loss.regression_loss, cfg.loss.huber_delta)
        return Objective(loss.to(device), target)
    counts = np.bincount(
        np.asarray(train_reader.labels(), dtype=np.int64), minlength=shape.num_classes
    )
    weight = class_weights(cfg.loss.class_weights, counts.tolist(), shape.num_classes)
    loss_fn = build_loss(
        cfg.loss.loss,
        label_smoothing=cfg.loss.label_smoothing,
        focal_gamma=cfg.loss.focal_gamma,
        weight=weight.to(device) if weight is not None else None,
    )
    return Objective(loss_fn.to(device), None)

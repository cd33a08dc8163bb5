"""The trainer's one typed config: what it trains and how.

Each part of the trainer has its own dataclass (data, model, optim, loss, runtime, checkpoint),
nested in `TrainConfig`. Every field has a flat, unique name, so that ``TRAIN_<FIELD>`` in the
environment and ``--<field>`` on the command line address it directly (``TRAIN_AMP=bf16``,
``--amp bf16``); `build_config` turns field name → raw value into a checked `TrainConfig`. A
bad value raises `ConfigError` naming both the variable and the field. Reading the
environment and the flags, and the deployment edge (`RunTarget`), is training/contract.py.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.training_params import BY_NAME

ENV_PREFIX = "TRAIN_"
TRUE_WORDS = {"1", "true", "yes", "on"}
FALSE_WORDS = {"0", "false", "no", "off", ""}


class ConfigError(ValueError):
    """A config value is invalid; the message names the environment variable and the field."""


def _f(
    default: Any,
    help: str,
    *,
    choices: Sequence[str] | None = None,
    lo: float | None = None,
    hi: float | None = None,
) -> Any:
    return field(
        default=default,
        metadata={"help": help, "choices": tuple(choices) if choices else None, "lo": lo, "hi": hi},
    )


def _shared(name: str) -> Any:
    """A field the launchers set too: default, help, choices and bounds from pipeline/training_params.py
    (declared there once, for the form, the env contract and this config)."""
    p = BY_NAME[name]
    return field(
        default=p.default,
        metadata={
            "help": p.help,
            "choices": p.choices,
            "lo": p.ge,
            "hi": p.le,
            "gt": p.gt,
            "lt": p.lt,
            "shared": True,
        },
    )


@dataclass
class DataConfig:
    batch_size: int = _shared("batch_size")
    eval_batch_size: int = _f(256, "Samples per evaluation batch.", lo=1)
    num_workers: int = _f(
        0,
        "DataLoader worker processes; 0 fetches in the main process (fastest for memory-mapped versions on few cores).",
        lo=0,
        hi=64,
    )
    augment: bool = _f(
        False, "Random horizontal flip and padded random crop, done on the device (images only)."
    )
    check_labels: bool = _f(
        True, "Stop when a split's label histogram differs from the manifest's counts."
    )
    check_leakage: bool = _f(
        True, "Refuse a version whose train and val splits share a sample md5."
    )
    allow_no_val: bool = _f(
        False,
        "Train on a version whose val split is empty (no best checkpoint, no val metrics); "
        "otherwise such a version is refused (exit 3).",
    )


@dataclass
class ModelConfig:
    model: str = _shared("model")
    width: int = _f(
        32,
        "ResNet: channels of the first stage (doubled per stage); MLP: hidden units.",
        lo=1,
        hi=8192,
    )
    depth: int = _f(
        2, "ResNet: residual blocks per stage (3 stages); MLP: hidden layers.", lo=1, hi=64
    )
    activation: str = _f(
        "relu",
        "Activation; initialisation follows it (He for relu, Xavier for silu/gelu).",
        choices=("relu", "silu", "gelu"),
    )
    dropout: float = _f(0.0, "Dropout before the classifier.", lo=0.0, hi=0.95)


@dataclass
class OptimConfig:
    optimizer: str = _f("adamw", "adamw, or sgd with momentum.", choices=("adamw", "sgd"))
    lr: float = _shared("lr")
    weight_decay: float = _f(
        0.01, "Decoupled weight decay; never applied to norm weights or biases.", lo=0.0
    )
    momentum: float = _f(0.9, "SGD momentum.", lo=0.0, hi=1.0)
    warmup_steps: int = _f(
        -1, "Linear warmup steps; -1 = max(100, 10% of total), capped at 20% of a tiny run.", lo=-1
    )
    min_lr_ratio: float = _f(0.01, "Cosine floor as a fraction of the peak LR.", lo=0.0, hi=1.0)
    clip_norm: float = _f(
        1.0,
        "Clip gradients to this global L2 norm; 0 disables clipping (the norm is logged anyway).",
        lo=0.0,
    )


@dataclass
class LossConfig:
    loss: str = _f("ce", "ce (cross-entropy) or focal.", choices=("ce", "focal"))
    label_smoothing: float = _f(
        0.0, "Label smoothing of the cross-entropy target.", lo=0.0, hi=0.99
    )
    focal_gamma: float = _f(2.0, "Focal-loss focusing parameter.", lo=0.0)
    class_weights: str = _f(
        "none",
        "none, balanced (inverse train frequency), or comma-separated weights, one per class.",
    )
    # Regression versions (recipe task = "regression") only; classification ignores these.
    regression_loss: str = _f(
        "mse",
        "Regression loss: mse or huber (on the standardised target).",
        choices=("mse", "huber"),
    )
    huber_delta: float = _f(1.0, "Huber loss threshold, in target standard deviations.", lo=0.001)
    target_transform: str = _f(
        "none",
        "Regression target transform: none or log1p (train on log1p(y), report metrics on y).",
        choices=("none", "log1p"),
    )


@dataclass
class RuntimeConfig:
    epochs: int = _shared("epochs")
    seed: int = _shared("seed")
    device: str = _f(
        "auto", "auto (cuda when available), cpu or cuda.", choices=("auto", "cpu", "cuda")
    )
    amp: str = _shared("amp")
    grad_checkpointing: bool = _shared("grad_checkpointing")
    checkpoint_segments: int = _f(0, "Gradient-checkpoint segments; 0 = ceil(blocks / 4).", lo=0)
    channels_last: str = _f(
        "auto",
        "NHWC memory format: auto (on for CUDA convnets), on, off.",
        choices=("auto", "on", "off"),
    )
    compile: bool = _f(False, "Wrap the model in torch.compile.")
    compile_backend: str = _f(
        "inductor", "torch.compile backend (inductor; eager or aot_eager for debugging)."
    )
    detect_anomaly: bool = _f(
        False, "Run autograd anomaly detection; a non-finite loss then reports the forward trace."
    )
    deterministic: str = _f(
        "auto",
        "torch.use_deterministic_algorithms: auto (on for CPU, off for CUDA), on, off.",
        choices=("auto", "on", "off"),
    )
    cudnn_benchmark: bool = _f(
        True, "cudnn.benchmark for fixed input shapes (CUDA, non-deterministic runs)."
    )
    set_to_none: bool = _f(
        True, "optimizer.zero_grad(set_to_none=True): free gradient memory between steps."
    )
    empty_cache: bool = _f(True, "torch.cuda.empty_cache() at epoch ends (CUDA only).")
    log_every: int = _f(1, "Write a metrics.jsonl train record every N steps.", lo=1)
    nproc: int = _f(
        0,
        "Training processes on this machine (DDP under torchrun): 0 = one per visible GPU "
        "(1 without CUDA or with device cpu); N = N processes (gloo on the CPU).",
        lo=0,
    )


@dataclass
class CheckpointConfig:
    checkpoint_every: int = _f(
        200,
        "Save a checkpoint every N optimizer steps (and at every epoch end); 0 = epoch ends only.",
        lo=0,
    )
    keep_last: int = _f(2, "Checkpoints kept besides the best one.", lo=1)
    metric: str = _f(
        "val_accuracy",
        "The metric that picks the best checkpoint (higher is better for accuracy, lower for "
        "loss, RMSE and MAE). A regression run asked for val_accuracy uses val_rmse.",
        choices=("val_accuracy", "val_loss", "val_rmse", "val_mae"),
    )
    resume: str = _f(
        "auto",
        "When the run has checkpoints but none is usable (all corrupt or missing): auto starts "
        "from step 0 with an error event on the run; require refuses (exit 3); never ignores "
        "every checkpoint and starts from step 0. A run with no checkpoint at all just starts.",
        choices=("auto", "require", "never"),
    )


SECTIONS: dict[str, type] = {
    "data": DataConfig,
    "model": ModelConfig,
    "optim": OptimConfig,
    "loss": LossConfig,
    "runtime": RuntimeConfig,
    "checkpoint": CheckpointConfig,
}


@dataclass
class TrainConfig:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

    def flat(self) -> dict[str, Any]:
        """field name → value, the form of the Airflow params and the run record."""
        return {name: getattr(getattr(self, sec), name) for name, (sec, _) in field_index().items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainConfig:
        """Rebuild from `to_dict()` or `flat()` output (unknown keys are refused)."""
        values: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, Mapping) and key in SECTIONS:
                values.update(value)
            else:
                values[key] = value
        return build_config(values, source="dict")


def field_index() -> dict[str, tuple[str, dataclasses.Field]]:
    index: dict[str, tuple[str, dataclasses.Field]] = {}
    for sec, klass in SECTIONS.items():
        for f in dataclasses.fields(klass):
            assert f.name not in index, f"duplicate config field {f.name}"
            index[f.name] = (sec, f)
    return index


def _label(name: str, source: str) -> str:
    if source == "env":
        return f"{ENV_PREFIX}{name.upper()} / {name}"
    if source == "cli":
        return f"--{name.replace('_', '-')} / {name}"
    return name


def _coerce(name: str, f: dataclasses.Field, raw: Any, source: str) -> Any:
    """Turn a raw value (string from env/CLI, or a typed value) into the field's type, checked."""
    label = _label(name, source)
    kind = type(f.default)
    meta = f.metadata
    try:
        if kind is bool:
            if isinstance(raw, bool):
                value: Any = raw
            else:
                word = str(raw).strip().lower()
                if word in TRUE_WORDS:
                    value = True
                elif word in FALSE_WORDS:
                    value = False
                else:
                    raise ConfigError(f"{label}: must be true or false (got {raw!r})")
        elif kind is int:
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError
            value = int(str(raw).strip()) if not isinstance(raw, int | float) else int(raw)
        elif kind is float:
            if isinstance(raw, bool):
                raise ValueError
            value = float(str(raw).strip()) if not isinstance(raw, int | float) else float(raw)
            if value != value or value in (float("inf"), float("-inf")):
                raise ConfigError(f"{label}: must be a finite number (got {raw!r})")
        else:
            value = str(raw).strip()
    except ConfigError:
        raise
    except (TypeError, ValueError):
        raise ConfigError(
            f"{label}: must be {'an integer' if kind is int else 'a number'} (got {raw!r})"
        ) from None
    choices = meta.get("choices")
    if choices and value not in choices:
        raise ConfigError(f"{label}: must be one of {', '.join(choices)} (got {raw!r})")
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and value < lo:
        raise ConfigError(f"{label}: must be >= {lo} (got {raw!r})")
    if hi is not None and value > hi:
        raise ConfigError(f"{label}: must be <= {hi} (got {raw!r})")
    gt, lt = meta.get("gt"), meta.get("lt")
    if gt is not None and value <= gt:
        raise ConfigError(f"{label}: must be > {gt} (got {raw!r})")
    if lt is not None and value >= lt:
        raise ConfigError(f"{label}: must be < {lt} (got {raw!r})")
    return value


def _check_class_weights(text: str, label: str) -> None:
    if text in ("none", "balanced"):
        return
    parts = [p.strip() for p in text.split(",")]
    try:
        weights = [float(p) for p in parts]
    except ValueError:
        raise ConfigError(
            f"{label}: must be none, balanced or comma-separated numbers (got {text!r})"
        ) from None
    if not weights or any(w < 0 or w != w for w in weights):
        raise ConfigError(f"{label}: weights must be non-negative numbers (got {text!r})")


def build_config(
    values: Mapping[str, Any], *, source: str = "dict", sources: Mapping[str, str] | None = None
) -> TrainConfig:
    """A `TrainConfig` from field name → raw value; unknown names are refused.

    ``sources`` optionally says per field whether its value came from ``env`` or ``cli``, so the
    error names the thing the user actually typed.
    """
    index = field_index()
    sections: dict[str, dict[str, Any]] = {sec: {} for sec in SECTIONS}
    for name, raw in values.items():
        src = (sources or {}).get(name, source)
        if name not in index:
            close = [n for n in index if n.startswith(name[:4])]
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise ConfigError(f"{_label(name, src)}: unknown training-config field{hint}")
        sec, f = index[name]
        sections[sec][name] = _coerce(name, f, raw, src)
    if "class_weights" in sections["loss"]:
        name = "class_weights"
        _check_class_weights(
            sections["loss"][name], _label(name, (sources or {}).get(name, source))
        )
    return TrainConfig(**{sec: SECTIONS[sec](**vals) for sec, vals in sections.items()})

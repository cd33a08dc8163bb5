"""The training parameters that a run is launched with, declared once.

The train DAG's form (``dags/train.py``), the launch contract
(``pipeline/orchestration/env_contract.py``: ``TRAIN_<FIELD>`` variables) and the trainer's
config (``training/config.py``) all derive these fields from here, so that a default, a range
or a choice cannot drift between them again (the form once defaulted the learning rate to 0.01
where the trainer's was 0.003, and its model choices lacked ``resnet50``).

Standard library only: the Airflow side imports this without torch, the trainer without Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TrainField:
    """One training parameter: its type, default, allowed values and words for people.

    Bounds: ``ge``/``le`` are inclusive, ``gt``/``lt`` exclusive (the learning rate must be
    above 0). ``title`` and ``help`` are what the form shows and what ``--help`` prints.
    """

    name: str
    kind: type  # int, float, bool or str
    default: Any
    title: str
    help: str
    choices: tuple[str, ...] | None = None
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    @property
    def env_name(self) -> str:
        return f"TRAIN_{self.name.upper()}"

    def problem(self, value: Any) -> str | None:
        """Why ``value`` (already of ``kind``) is not allowed, or None."""
        if self.choices is not None and value not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if self.kind in (int, float):
            if self.ge is not None and value < self.ge:
                return f"must be >= {_num(self.ge)}"
            if self.gt is not None and value <= self.gt:
                return f"must be > {_num(self.gt)}"
            if self.le is not None and value > self.le:
                return f"must be <= {_num(self.le)}"
            if self.lt is not None and value >= self.lt:
                return f"must be < {_num(self.lt)}"
        return None

    def to_env(self, value: Any) -> str:
        """The ``TRAIN_<FIELD>`` string of a value (as an environment holds it)."""
        if self.kind is bool:
            return "true" if value else "false"
        if self.kind is float:
            return repr(float(value))
        return str(value)

    def json_schema(self) -> dict[str, Any]:
        """Airflow ``Param`` keyword arguments (JSON Schema) for the form.

        Exclusive bounds only: the form's number field clamps to ``minimum``/``maximum`` when it
        loses focus (epochs -1 became 1 without a word); it ignores the exclusive ones, so an
        out-of-range value reaches the validation and is refused naming the field.
        """
        kind = {int: "integer", float: "number", bool: "boolean", str: "string"}[self.kind]
        out: dict[str, Any] = {"type": kind, "title": self.title, "description": self.help}
        if self.choices is not None:
            out["enum"] = list(self.choices)
        step = 1 if self.kind is int else 0
        if self.ge is not None:
            out["exclusiveMinimum"] = _num(self.ge - step) if step else self.ge
        if self.gt is not None:
            out["exclusiveMinimum"] = _num(self.gt)
        if self.le is not None:
            out["exclusiveMaximum"] = _num(self.le + step) if step else self.le
        if self.lt is not None:
            out["exclusiveMaximum"] = _num(self.lt)
        return out


def _num(x: float) -> int | float:
    return int(x) if float(x).is_integer() else x


AMP_MODES = ("auto", "fp16", "bf16", "off")
MODELS = ("auto", "resnet", "resnet50", "mlp")

# The fields a launcher sets (form → TRAIN_<FIELD>). The trainer has more (TRAIN_WIDTH, ...),
# declared in training/config.py; these are the ones both sides must agree on.
FIELDS: tuple[TrainField, ...] = (
    TrainField(
        "epochs",
        int,
        3,
        "Epochs",
        "Passes over the training split: 1 to 10,000.",
        ge=1,
        le=10_000,
    ),
    TrainField(
        "batch_size",
        int,
        64,
        "Batch size",
        "Samples per optimizer step (per GPU, per process under torchrun): 1 to 65,536.",
        ge=1,
        le=65_536,
    ),
    TrainField(
        "lr",
        float,
        3e-3,
        "Learning rate",
        "Peak learning rate of the schedule (after warmup): above 0.",
        # No upper bound: a run that diverges on purpose (lr 1e30) is how the trainer's
        # non-finite-loss report is tested.
        gt=0.0,
    ),
    TrainField(
        "amp",
        str,
        "auto",
        "Mixed precision",
        "auto: bf16 where the GPU supports it, else fp16 with a GradScaler; off on CPU. "
        "Or fp16, bf16, off.",
        choices=AMP_MODES,
    ),
    TrainField(
        "grad_checkpointing",
        bool,
        False,
        "Gradient checkpointing",
        "Trade compute for memory: recompute activations in the backward pass.",
    ),
    TrainField(
        "model",
        str,
        "auto",
        "Model",
        "auto picks from the data (a ResNet for images, an MLP for tables); or resnet, "
        "resnet50, mlp.",
        choices=MODELS,
    ),
    TrainField(
        "seed",
        int,
        0,
        "Seed",
        "Random seed of initialisation, shuffling, augmentation and dropout: 0 to 2147483647.",
        ge=0,
        le=2**31 - 1,
    ),
)

BY_NAME: Mapping[str, TrainField] = {f.name: f for f in FIELDS}


def defaults() -> dict[str, Any]:
    return {f.name: f.default for f in FIELDS}

"""The trainer's environment, built from scratch in one place.

Every launcher (local process, Docker, Kubernetes) hands the trainer the same variables: the
contract of docs/ARCHITECTURE.md (``DATASET_*``, ``DATA_ROOT``, ``METADATA_DB_URL``,
``CHECKPOINT_URL``, ``RUN_ID``, ``TRAIN_<FIELD>``) and boto3's own ``AWS_*`` variables. The
public part and the secret part are kept apart so that each launcher can pass secrets the way
its platform hides them (``private_environment`` for Docker, a Secret for Kubernetes); the
secret part is never logged, printed, returned from a task or put in XCom.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

# boto3 reads these itself; the secret ones never go into a rendered field or a log line.
AWS_PUBLIC_VARS = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL_S3")
AWS_SECRET_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

# What a minimal container image also has: enough for Python to start, find its tools and
# decode text, and nothing of the caller's environment besides.
BASIC_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")

AMP_MODES = ("auto", "fp16", "bf16", "off")
MODELS = ("auto", "resnet", "mlp")
LAUNCHERS = ("local", "docker", "kubernetes")


class ContractError(ValueError):
    """A training parameter is invalid; the message names the field."""


@dataclass(frozen=True)
class TrainParams:
    """The training parameters a run is launched with (the train DAG's form, resolved)."""

    dataset: str
    dataset_version: str
    epochs: int = 3
    batch_size: int = 64
    lr: float = 0.01
    amp: str = "auto"
    grad_checkpointing: bool = False
    model: str = "auto"
    seed: int = 0
    launcher: str = "local"
    gpus: int = -1  # -1: all GPUs of the machine, 0: CPU only, N: N GPUs
    extra: Mapping[str, str] = field(default_factory=dict)  # more TRAIN_<FIELD> values

    def __post_init__(self) -> None:
        from pipeline.datasets.recipes import DatasetNameError, check_dataset_name

        try:
            # load_recipe's rule: the name becomes DATASET_NAME, a path under DATA_ROOT.
            check_dataset_name(self.dataset)
        except DatasetNameError as exc:
            raise ContractError(f"dataset: {exc}") from None
        if not self.dataset_version:
            raise ContractError("dataset_version: must not be empty")
        checks = [
            ("epochs", self.epochs >= 1, "must be >= 1"),
            ("batch_size", self.batch_size >= 1, "must be >= 1"),
            ("lr", self.lr > 0, "must be > 0"),
            ("amp", self.amp in AMP_MODES, f"must be one of {', '.join(AMP_MODES)}"),
            ("model", self.model in MODELS, f"must be one of {', '.join(MODELS)}"),
            ("launcher", self.launcher in LAUNCHERS, f"must be one of {', '.join(LAUNCHERS)}"),
            ("gpus", self.gpus >= -1, "must be >= -1 (-1 = all GPUs, 0 = CPU only)"),
        ]
        for name, ok, why in checks:
            if not ok:
                raise ContractError(f"{name}: {why}, got {getattr(self, name)!r}")
        for key in self.extra:
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
                raise ContractError(
                    f"extra: TRAIN_ field names are upper-case identifiers, got {key!r}"
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrainParams:
        """From the DAG params (JSON): coerce types, refuse unknown values with the field name."""

        def num(name: str, kind: type, default: Any) -> Any:
            value = data.get(name, default)
            try:
                if kind is int and isinstance(value, float) and not value.is_integer():
                    raise ValueError
                return kind(value)
            except (TypeError, ValueError):
                raise ContractError(f"{name}: expected {kind.__name__}, got {value!r}") from None

        grad = data.get("grad_checkpointing", False)
        if isinstance(grad, str):
            grad = grad.strip().lower() in ("1", "true", "yes", "on")
        return cls(
            dataset=str(data.get("dataset") or ""),
            dataset_version=str(data.get("dataset_version") or "latest"),
            epochs=num("epochs", int, cls.epochs),
            batch_size=num("batch_size", int, cls.batch_size),
            lr=num("lr", float, cls.lr),
            amp=str(data.get("amp", cls.amp)),
            grad_checkpointing=bool(grad),
            model=str(data.get("model", cls.model)),
            seed=num("seed", int, cls.seed),
            launcher=str(data.get("launcher", cls.launcher)),
            gpus=num("gpus", int, cls.gpus),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "dataset_version": self.dataset_version,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "lr": self.lr,
            "amp": self.amp,
            "grad_checkpointing": self.grad_checkpointing,
            "model": self.model,
            "seed": self.seed,
            "launcher": self.launcher,
            "gpus": self.gpus,
        }

    def train_vars(self) -> dict[str, str]:
        """``TRAIN_<FIELD>`` variables (strings, as an environment holds them)."""
        out = {
            "TRAIN_EPOCHS": str(self.epochs),
            "TRAIN_BATCH_SIZE": str(self.batch_size),
            "TRAIN_LR": repr(float(self.lr)),
            "TRAIN_AMP": self.amp,
            "TRAIN_GRAD_CHECKPOINTING": "true" if self.grad_checkpointing else "false",
            "TRAIN_MODEL": self.model,
            "TRAIN_SEED": str(self.seed),
            # No GPU asked for: stay on the CPU even on a GPU host; else let the trainer pick.
            "TRAIN_DEVICE": "cpu" if self.gpus == 0 else "auto",
        }
        out.update({f"TRAIN_{k}": str(v) for k, v in self.extra.items()})
        return out


@dataclass(frozen=True)
class TrainerEnv:
    """The trainer's environment: ``public`` may be shown; ``secret`` never is."""

    public: dict[str, str]
    secret: dict[str, str] = field(repr=False)

    def merged(self) -> dict[str, str]:
        return {**self.public, **self.secret}

    def __repr__(self) -> str:  # never leak a secret through a repr in a log line
        return f"TrainerEnv(public={self.public!r}, secret=<{len(self.secret)} hidden>)"


def sanitize_run_id(dag_id: str, dag_run_id: str) -> str:
    """A RUN_ID that is stable across task retries of one DAG run and safe as a path/URL
    component and a Kubernetes label: ``<dag_id>-<run_id>`` reduced to [A-Za-z0-9_.-]."""
    raw = f"{dag_id}-{dag_run_id}"
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-.")
    if len(clean) > 120:
        import hashlib

        clean = clean[:100] + "-" + hashlib.sha1(raw.encode()).hexdigest()[:12]
    return clean


def aws_credentials(
    conn_id: str = "aws_default", environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """boto3's ``AWS_*`` variables: from the Airflow connection ``conn_id`` if it exists,
    else from the environment. Values are never logged."""
    environ = os.environ if environ is None else environ
    from_conn = _aws_from_connection(conn_id)
    if from_conn:  # an empty connection (no key, no endpoint) does not hide the environment
        return from_conn
    return {k: environ[k] for k in (*AWS_PUBLIC_VARS, *AWS_SECRET_VARS) if environ.get(k)}


def _aws_from_connection(conn_id: str) -> dict[str, str] | None:
    try:
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
    except ImportError:
        return None
    except Exception:  # not defined (AirflowNotFoundException), or no task context to ask
        return None
    out: dict[str, str] = {}
    if conn.login:
        out["AWS_ACCESS_KEY_ID"] = conn.login
    if conn.password:
        out["AWS_SECRET_ACCESS_KEY"] = conn.password
    extra = conn.extra_dejson or {}
    for key, var in (
        ("aws_session_token", "AWS_SESSION_TOKEN"),
        ("endpoint_url", "AWS_ENDPOINT_URL"),
        ("region_name", "AWS_DEFAULT_REGION"),
    ):
        if extra.get(key):
            out[var] = str(extra[key])
    log.info("S3 credentials: from the Airflow connection %r", conn_id)
    return out


def build_trainer_env(
    params: TrainParams,
    *,
    run_id: str,
    version_id: str,
    data_root: str,
    checkpoint_url: str,
    metadata_db_url: str | None,
    aws: Mapping[str, str] | None = None,
    basics: Mapping[str, str] | None = None,
) -> TrainerEnv:
    """The whole environment of one training run, from scratch (nothing inherited but
    ``basics``, which the local launcher fills with PATH/HOME/LANG-level variables)."""
    public: dict[str, str] = dict(basics or {})
    public.update(
        {
            "DATASET_NAME": params.dataset,
            "DATASET_VERSION": version_id,
            "DATA_ROOT": str(data_root),
            "CHECKPOINT_URL": checkpoint_url,
            "RUN_ID": run_id,
            "PYTHONUNBUFFERED": "1",  # lines reach the task log as they are printed
            # The trainer records the run too (same RUN_ID row): it names the launcher from this.
            "LAKETRAIN_LAUNCHER": params.launcher,
        }
    )
    secret: dict[str, str] = {}
    if metadata_db_url:
        # A URL with a password is a credential: it travels with the secrets.
        has_password = (
            bool(urlsplit(metadata_db_url).password) if "://" in metadata_db_url else False
        )
        (secret if has_password else public)["METADATA_DB_URL"] = metadata_db_url
    public.update(params.train_vars())
    for key, value in (aws or {}).items():
        if key in AWS_SECRET_VARS:
            secret[key] = value
        elif key.startswith("AWS_"):
            public[key] = value
    return TrainerEnv(public=public, secret=secret)


def basic_vars(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    out = {k: environ[k] for k in BASIC_VARS if environ.get(k)}
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out.setdefault("LANG", "C.UTF-8")
    return out

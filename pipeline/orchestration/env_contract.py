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

# The training fields, their defaults and choices are declared once in pipeline/training_params.py
# (stdlib only): the form, this contract and the trainer's config derive from it. AMP_MODES
# and MODELS are re-exported for the callers that name them here.
from pipeline.training_params import AMP_MODES, FIELDS, MODELS  # noqa: F401

log = logging.getLogger(__name__)

# boto3 reads these itself; the secret ones never go into a rendered field or a log line.
AWS_PUBLIC_VARS = ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_ENDPOINT_URL_S3")
AWS_SECRET_VARS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")

# What a minimal container image also has: enough for Python to start, find its tools and
# decode text, and nothing of the caller's environment besides.
BASIC_VARS = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")

LAUNCHERS = ("local", "docker", "kubernetes")

# A run's extra environment (the form's `env`) may add variables, never replace the contract.
ENV_NAME_RE = re.compile(r"[A-Z_][A-Z0-9_]*")
RESERVED_ENV_NAMES = ("DATA_ROOT", "RUN_ID", "CHECKPOINT_URL", "METADATA_DB_URL")
RESERVED_ENV_PREFIXES = ("AWS_", "DATASET_")
MAX_ENV_ENTRIES = 64
# Kubernetes resource quantities: 2, 0.5, 500m (CPU); 512Mi, 16Gi, 1G (memory).
QUANTITY_RE = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")

_D = {f.name: f.default for f in FIELDS}


class ContractError(ValueError):
    """A training parameter is invalid; the message names the field."""


@dataclass(frozen=True)
class TrainParams:
    """The parameters a run is launched with (the train DAG's form, resolved).

    The training fields (epochs ... seed) take their defaults and checks from
    ``pipeline.training_params.FIELDS``; the rest say what runs where: ``launcher``, ``gpus``, and for a
    user's own trainer ``image`` (docker/kubernetes; empty = ``LAKETRAIN_TRAINER_IMAGE``),
    ``command`` (empty = the built-in trainer), ``env`` (extra variables) and the Kubernetes
    ``cpu``/``memory`` requests (empty = none).
    """

    dataset: str
    dataset_version: str
    epochs: int = _D["epochs"]
    batch_size: int = _D["batch_size"]
    lr: float = _D["lr"]
    amp: str = _D["amp"]
    grad_checkpointing: bool = _D["grad_checkpointing"]
    model: str = _D["model"]
    seed: int = _D["seed"]
    launcher: str = "local"
    gpus: int = -1  # -1: all GPUs of the machine, 0: CPU only, N: N GPUs
    image: str = ""
    command: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    cpu: str = ""
    memory: str = ""
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
        for f in FIELDS:
            if why := f.problem(getattr(self, f.name)):
                raise ContractError(f"{f.name}: {why}, got {getattr(self, f.name)!r}")
        checks = [
            ("launcher", self.launcher in LAUNCHERS, f"must be one of {', '.join(LAUNCHERS)}"),
            ("gpus", self.gpus >= -1, "must be >= -1 (-1 = all GPUs, 0 = CPU only)"),
            ("image", not re.search(r"\s", self.image), "must not contain white space"),
            ("cpu", not self.cpu or QUANTITY_RE.fullmatch(self.cpu), "must be like 2, 0.5 or 500m"),
            (
                "memory",
                not self.memory or QUANTITY_RE.fullmatch(self.memory),
                "must be like 512Mi, 16Gi or 2G",
            ),
        ]
        for name, ok, why in checks:
            if not ok:
                raise ContractError(f"{name}: {why}, got {getattr(self, name)!r}")
        if self.command:
            command_argv(self.command)  # unbalanced quotes are refused here, not at launch
        check_user_env(self.env)
        for key in self.extra:
            if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
                raise ContractError(
                    f"extra: TRAIN_ field names are upper-case identifiers, got {key!r}"
                )

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> TrainParams:
        """From the DAG params (JSON): coerce types, refuse unknown values with the field name."""

        def coerce(name: str, kind: type, default: Any) -> Any:
            value = data.get(name, default)
            if value is None:
                value = default
            if kind is bool:
                if isinstance(value, str):
                    return value.strip().lower() in ("1", "true", "yes", "on")
                return bool(value)
            if kind is str:
                return str(value)
            try:
                if isinstance(value, bool) or (
                    kind is int and isinstance(value, float) and not value.is_integer()
                ):
                    raise ValueError
                return kind(value)
            except (TypeError, ValueError):
                raise ContractError(f"{name}: expected {kind.__name__}, got {value!r}") from None

        return cls(
            dataset=str(data.get("dataset") or ""),
            dataset_version=str(data.get("dataset_version") or "latest"),
            **{f.name: coerce(f.name, f.kind, f.default) for f in FIELDS},
            launcher=coerce("launcher", str, cls.launcher),
            gpus=coerce("gpus", int, cls.gpus),
            image=coerce("image", str, "").strip(),
            command=coerce("command", str, "").strip(),
            env=parse_user_env(data.get("env")),
            cpu=coerce("cpu", str, "").strip(),
            memory=coerce("memory", str, "").strip(),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "dataset_version": self.dataset_version,
            **{f.name: getattr(self, f.name) for f in FIELDS},
            "launcher": self.launcher,
            "gpus": self.gpus,
            "image": self.image,
            "command": self.command,
            "env": dict(self.env),
            "cpu": self.cpu,
            "memory": self.memory,
        }

    def train_vars(self) -> dict[str, str]:
        """``TRAIN_<FIELD>`` variables (strings, as an environment holds them)."""
        out = {f.env_name: f.to_env(getattr(self, f.name)) for f in FIELDS}
        # No GPU asked for: stay on the CPU even on a GPU host; else let the trainer pick.
        out["TRAIN_DEVICE"] = "cpu" if self.gpus == 0 else "auto"
        out.update({f"TRAIN_{k}": str(v) for k, v in self.extra.items()})
        return out


def command_argv(command: str) -> list[str]:
    """A command line as an argv (POSIX shell words, no shell runs it); ContractError names the
    field when it cannot be split."""
    import shlex

    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ContractError(f"command: {exc} in {command!r}") from None
    if not argv:
        raise ContractError("command: empty (leave it out for the built-in trainer)")
    return argv


def _contract_names() -> set[str]:
    # The TRAIN_ variables a launcher sets from the form's fields: set them there instead.
    return {f.env_name for f in FIELDS} | {"TRAIN_DEVICE"}


def check_user_env(env: Mapping[str, Any]) -> None:
    """The form's ``env``: names like ``[A-Z_][A-Z0-9_]*``, none of the contract's, at most 64."""
    if len(env) > MAX_ENV_ENTRIES:
        raise ContractError(f"env: at most {MAX_ENV_ENTRIES} variables, got {len(env)}")
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            raise ContractError(
                f"env: variable names must match [A-Z_][A-Z0-9_]* (upper case), got {name!r}"
            )
        if name in RESERVED_ENV_NAMES or name.startswith(RESERVED_ENV_PREFIXES):
            raise ContractError(
                f"env: {name} is part of the environment contract and cannot be overridden "
                "(AWS_*, DATASET_*, DATA_ROOT, RUN_ID, CHECKPOINT_URL, METADATA_DB_URL)"
            )
        if name in _contract_names():
            field_name = name.removeprefix("TRAIN_").lower()
            hint = "gpus" if name == "TRAIN_DEVICE" else field_name
            raise ContractError(f"env: {name} is set from the form's {hint!r} field; set it there")
        if not isinstance(value, str):
            raise ContractError(f"env: {name} must be a string, got {value!r}")
        if "\0" in value:
            raise ContractError(f"env: {name} must not contain a NUL character")


def parse_user_env(raw: Any) -> dict[str, str]:
    """The form's ``env`` (a JSON object, or its text) as name → string. Numbers and booleans
    become their JSON text; anything else is refused naming the variable."""
    import json

    if raw is None or raw == "":
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise ContractError(f"env: not a JSON object ({exc})") from None
    if not isinstance(raw, Mapping):
        raise ContractError(f"env: must be a JSON object of NAME: value, got {raw!r}")
    out: dict[str, str] = {}
    for name, value in raw.items():
        if isinstance(value, bool):
            value = "true" if value else "false"
        elif isinstance(value, int | float):
            value = json.dumps(value)
        elif not isinstance(value, str):
            raise ContractError(
                f"env: {name} must be a string, number or boolean, got {type(value).__name__}"
            )
        out[str(name)] = value
    check_user_env(out)
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
    cache: tuple[str, int] | None = None,
) -> TrainerEnv:
    """The whole environment of one training run, from scratch (nothing inherited but
    ``basics``, which the local launcher fills with PATH/HOME/LANG-level variables).
    ``cache``: (LAKETRAIN_CACHE_DIR, LAKETRAIN_CACHE_MB) of this host, given for an s3://
    DATA_ROOT so that a local trainer shares the host's read cache; a container launcher
    replaces them with its own (pipeline/orchestration/container_data.py)."""
    public: dict[str, str] = dict(basics or {})
    if cache is not None and str(data_root).startswith("s3://"):
        public["LAKETRAIN_CACHE_DIR"], public["LAKETRAIN_CACHE_MB"] = cache[0], str(cache[1])
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
    # The run's own variables: check_user_env has refused every name set above but the basics.
    public.update(params.env)
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

"""The typed config: TRAIN_<FIELD> from the environment, CLI flags that win, and errors that
name the variable and the field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from training.config import ConfigError, TrainConfig, build_config, field_index
from training.contract import resolve

BASE = {"DATASET_NAME": "digits", "RUN_ID": "r1", "CHECKPOINT_URL": "file:///tmp/x"}


def test_env_values_are_typed_and_flags_override_them() -> None:
    env = {
        **BASE,
        "TRAIN_EPOCHS": "7",
        "TRAIN_LR": "0.05",
        "TRAIN_AMP": "bf16",
        "TRAIN_GRAD_CHECKPOINTING": "true",
        "TRAIN_MODEL": "mlp",
    }
    cfg, target, _ = resolve(["--epochs", "3", "--grad-checkpointing", "off"], env)
    assert cfg.runtime.epochs == 3  # the flag wins
    assert cfg.optim.lr == 0.05 and isinstance(cfg.optim.lr, float)
    assert cfg.runtime.amp == "bf16" and cfg.model.model == "mlp"
    assert cfg.runtime.grad_checkpointing is False
    assert (target.dataset, target.version, target.run_id, target.checkpoint_url) == (
        "digits",
        "latest",
        "r1",
        "file:///tmp/x",
    )


def test_bare_bool_flag_means_true() -> None:
    cfg, _, _ = resolve(["--augment", "--compile"], BASE)
    assert cfg.data.augment is True and cfg.runtime.compile is True


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"TRAIN_AMP": "fp8"}, "TRAIN_AMP / amp: must be one of auto, fp16, bf16, off (got 'fp8')"),
        ({"TRAIN_EPOCHS": "ten"}, "TRAIN_EPOCHS / epochs: must be an integer"),
        ({"TRAIN_EPOCHS": "0"}, "TRAIN_EPOCHS / epochs: must be >= 1"),
        ({"TRAIN_LR": "nan"}, "TRAIN_LR / lr: must be a finite number"),
        (
            {"TRAIN_GRAD_CHECKPOINTING": "maybe"},
            "TRAIN_GRAD_CHECKPOINTING / grad_checkpointing: must be true or false",
        ),
        ({"TRAIN_EPOCH": "5"}, "TRAIN_EPOCH: unknown training-config field 'epoch'"),
        ({"TRAIN_CLASS_WEIGHTS": "1,x"}, "TRAIN_CLASS_WEIGHTS / class_weights"),
        ({"RUN_ID": ""}, "RUN_ID / --run-id: required"),
        ({"RUN_ID": "a/b"}, "RUN_ID / --run-id"),
        (
            {"CHECKPOINT_URL": "/tmp/x"},
            "CHECKPOINT_URL / --checkpoint-url: must start with file:// or s3://",
        ),
    ],
)
def test_bad_values_name_the_field(env: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve([], {**BASE, **env})
    assert needle in str(err.value)


def test_bad_flag_names_the_flag() -> None:
    with pytest.raises(ConfigError, match="--batch-size / batch_size: must be >= 1"):
        resolve(["--batch-size", "0"], BASE)


def test_every_field_has_help_and_round_trips() -> None:
    for name, (_, f) in field_index().items():
        assert f.metadata["help"], name
    cfg = build_config({"lr": "0.1", "loss": "focal", "class_weights": "balanced"})
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    assert TrainConfig.from_dict(cfg.flat()) == cfg


def test_invalid_env_exits_2_with_the_field_named() -> None:
    env = {"PATH": "/usr/bin:/bin", **BASE, "TRAIN_AMP": "fp8"}
    proc = subprocess.run(
        [sys.executable, "-m", "training"], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "TRAIN_AMP / amp: must be one of auto, fp16, bf16, off (got 'fp8')" in proc.stderr


def test_laketrain_train_takes_the_same_flags() -> None:
    exe = __import__("pathlib").Path(sys.executable).with_name("laketrain")
    proc = subprocess.run(
        [
            str(exe),
            "train",
            "--dataset",
            "digits",
            "--run-id",
            "r",
            "--checkpoint-url",
            "file:///tmp/x",
            "--lr",
            "-1",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    assert "--lr / lr: must be > 0.0" in proc.stderr
    proc = subprocess.run(
        [
            str(exe),
            "train",
            "--dataset",
            "digits",
            "--run-id",
            "r",
            "--checkpoint-url",
            "file:///tmp/x",
            "--epochs",
            "4",
            "--print-config",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert '"epochs": 4' in proc.stdout


@pytest.mark.parametrize("name", ["../../../etc", "a/b", "..", ".hidden", "_x"])
def test_a_dataset_name_outside_the_lake_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match=r"DATASET_NAME / --dataset: dataset name"):
        resolve([], {**BASE, "DATASET_NAME": name})


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("file://etc/x", "names a host"),
        ("file://localhost", "not absolute"),
        ("s3://AKIAKEYID:wJalrSECRET@bucket/x", "must not embed credentials"),
        ("s3://AKIAKEYID@bucket/x", "must not embed credentials"),
    ],
)
def test_a_bad_checkpoint_url_is_a_config_error_without_its_credentials(
    url: str, needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        resolve([], {**BASE, "CHECKPOINT_URL": url})
    message = str(err.value)
    assert message.startswith("CHECKPOINT_URL / --checkpoint-url: ") and needle in message
    assert "wJalrSECRET" not in message and "AKIAKEYID" not in message


def test_resume_and_allow_no_val_are_config_fields() -> None:
    cfg, _, _ = resolve(["--resume", "require"], {**BASE, "TRAIN_ALLOW_NO_VAL": "true"})
    assert cfg.checkpoint.resume == "require" and cfg.data.allow_no_val is True
    default, _, _ = resolve([], BASE)
    assert default.checkpoint.resume == "auto" and default.data.allow_no_val is False
    with pytest.raises(ConfigError, match="TRAIN_RESUME / resume: must be one of auto, require"):
        resolve([], {**BASE, "TRAIN_RESUME": "always"})


def _trainer(env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training", *args],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_path_escapes_and_url_credentials_exit_2_naming_the_variable() -> None:
    for env, var in [
        ({"DATASET_NAME": "../../../etc"}, "DATASET_NAME"),
        ({"CHECKPOINT_URL": "file://etc/x"}, "CHECKPOINT_URL"),
        ({"CHECKPOINT_URL": "s3://AKIAKEYID:wJalrSECRET@bucket"}, "CHECKPOINT_URL"),
    ]:
        proc = _trainer({**BASE, **env})
        assert proc.returncode == 2, (env, proc.stderr[-2000:])
        assert f"error: {var}" in proc.stderr and "Traceback" not in proc.stderr
        assert "wJalrSECRET" not in proc.stderr + proc.stdout


def test_print_config_masks_the_store_password() -> None:
    env = {**BASE, "METADATA_DB_URL": "postgresql+psycopg://laketrain:hunter2-pw@db:5432/lt"}
    proc = _trainer(env, "--print-config")
    assert proc.returncode == 0, proc.stderr
    assert "hunter2-pw" not in proc.stdout + proc.stderr
    target = __import__("json").loads(proc.stdout)["target"]
    assert target["metadata_db_url"] == "postgresql+psycopg://laketrain:***@db:5432/lt"

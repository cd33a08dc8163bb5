"""The trainer's environment: built from scratch, every contract variable, secrets kept apart
and never shown."""

from __future__ import annotations

import json
import logging

import pytest

from pipeline.orchestration.env_contract import (
    ContractError,
    TrainParams,
    aws_credentials,
    basic_vars,
    build_trainer_env,
    sanitize_run_id,
)

SECRET = "lt-secret-value-DO-NOT-LOG-42"


def env_for(**kw):
    params = TrainParams(
        dataset="digits",
        dataset_version="latest",
        epochs=2,
        batch_size=32,
        lr=0.05,
        amp="off",
        grad_checkpointing=True,
        model="mlp",
        seed=7,
        gpus=0,
    )
    defaults = dict(
        run_id="train-r1",
        version_id="abc123",
        data_root="/srv/data",
        checkpoint_url="s3://b/ck",
        metadata_db_url="postgresql+psycopg://postgres@db/lt",
        aws=None,
        basics={"PATH": "/usr/bin"},
    )
    defaults.update(kw)
    return build_trainer_env(params, **defaults)


def test_env_has_exactly_the_contract_variables() -> None:
    env = env_for(
        aws={
            "AWS_ENDPOINT_URL": "http://s3:9000",
            "AWS_ACCESS_KEY_ID": "AKIA1",
            "AWS_SECRET_ACCESS_KEY": SECRET,
        }
    )
    assert env.public == {
        "PATH": "/usr/bin",
        "DATASET_NAME": "digits",
        "DATASET_VERSION": "abc123",
        "DATA_ROOT": "/srv/data",
        "CHECKPOINT_URL": "s3://b/ck",
        "RUN_ID": "train-r1",
        "PYTHONUNBUFFERED": "1",
        "LAKETRAIN_LAUNCHER": "local",
        "METADATA_DB_URL": "postgresql+psycopg://postgres@db/lt",
        "TRAIN_EPOCHS": "2",
        "TRAIN_BATCH_SIZE": "32",
        "TRAIN_LR": "0.05",
        "TRAIN_AMP": "off",
        "TRAIN_GRAD_CHECKPOINTING": "true",
        "TRAIN_MODEL": "mlp",
        "TRAIN_SEED": "7",
        "TRAIN_DEVICE": "cpu",
        "AWS_ENDPOINT_URL": "http://s3:9000",
    }
    assert env.secret == {"AWS_ACCESS_KEY_ID": "AKIA1", "AWS_SECRET_ACCESS_KEY": SECRET}


def test_nothing_of_the_callers_environment_leaks_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_UNRELATED_TOKEN", "zzz")
    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "fff")
    env = env_for(basics=basic_vars())
    merged = env.merged()
    assert "SOME_UNRELATED_TOKEN" not in merged and not any(k.startswith("AIRFLOW") for k in merged)
    assert set(basic_vars()) <= {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"}


def test_a_database_url_with_a_password_is_a_secret() -> None:
    env = env_for(metadata_db_url=f"postgresql+psycopg://lt:{SECRET}@db/lt")
    assert "METADATA_DB_URL" not in env.public and SECRET in env.secret["METADATA_DB_URL"]


def test_secrets_never_show_in_repr_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    env = env_for(aws={"AWS_SECRET_ACCESS_KEY": SECRET, "AWS_SESSION_TOKEN": SECRET + "t"})
    caplog.set_level(logging.DEBUG)
    logging.getLogger("x").info("env %s %r", env, env)
    assert SECRET not in repr(env) and SECRET not in str(env) and SECRET not in caplog.text
    assert SECRET not in json.dumps(env.public)


def test_gpus_zero_means_cpu_and_other_values_let_the_trainer_choose() -> None:
    assert (
        TrainParams(dataset="d", dataset_version="latest", gpus=0).train_vars()["TRAIN_DEVICE"]
        == "cpu"
    )
    assert (
        TrainParams(dataset="d", dataset_version="latest", gpus=-1).train_vars()["TRAIN_DEVICE"]
        == "auto"
    )
    assert (
        TrainParams(dataset="d", dataset_version="latest", gpus=2).train_vars()["TRAIN_DEVICE"]
        == "auto"
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("epochs", 0),
        ("batch_size", -1),
        ("lr", 0),
        ("amp", "fp8"),
        ("model", "vit"),
        ("launcher", "slurm"),
        ("gpus", -2),
        ("dataset", ""),
        ("dataset", "a/b"),
    ],
)
def test_bad_params_are_refused_naming_the_field(field: str, value: object) -> None:
    data = {"dataset": "digits", "dataset_version": "latest", field: value}
    with pytest.raises(ContractError, match=f"^{field}:"):
        TrainParams.from_mapping(data)


def test_params_from_the_form_are_coerced_and_round_trip() -> None:
    p = TrainParams.from_mapping(
        {"dataset": "digits", "epochs": "4", "lr": "0.1", "grad_checkpointing": "true"}
    )
    assert (p.epochs, p.lr, p.grad_checkpointing, p.dataset_version) == (4, 0.1, True, "latest")
    assert TrainParams.from_mapping(p.to_dict()) == p
    with pytest.raises(ContractError, match="^epochs: expected int"):
        TrainParams.from_mapping({"dataset": "digits", "epochs": 1.5})


def test_run_id_is_stable_and_safe() -> None:
    a = sanitize_run_id("train", "manual__2026-11-29T16:38:02.174318+00:00")
    assert a == sanitize_run_id("train", "manual__2026-11-29T16:38:02.174318+00:00")
    assert a == "train-manual__2026-11-29T16-38-02.174318-00-00"
    long = sanitize_run_id("train", "x" * 400)
    assert len(long) <= 120 and long != sanitize_run_id("train", "x" * 399)
    assert sanitize_run_id("train", "a/../b c") == "train-a-..-b-c"


def test_aws_from_the_environment_when_no_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_AWS_DEFAULT", raising=False)
    env = {
        "AWS_ACCESS_KEY_ID": "AKIA2",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": "http://e",
        "HOME": "/h",
    }
    assert aws_credentials(environ=env) == {
        "AWS_ACCESS_KEY_ID": "AKIA2",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": "http://e",
    }


def test_aws_from_the_airflow_connection_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {
        "conn_type": "aws",
        "login": "AKIACONN",
        "password": SECRET,
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "eu-west-1"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_AWS_DEFAULT", json.dumps(conn))
    got = aws_credentials(environ={"AWS_SECRET_ACCESS_KEY": "from-env"})
    assert got == {
        "AWS_ACCESS_KEY_ID": "AKIACONN",
        "AWS_SECRET_ACCESS_KEY": SECRET,
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }


# ------------------------------------------------------------------ a user's own trainer


@pytest.mark.parametrize(
    ("env", "needle"),
    [
        ({"lower": "x"}, "env: variable names must match [A-Z_][A-Z0-9_]*"),
        ({"9LIVES": "x"}, "env: variable names must match"),
        ({"AWS_ACCESS_KEY_ID": "x"}, "env: AWS_ACCESS_KEY_ID is part of the environment contract"),
        ({"DATASET_VERSION": "x"}, "env: DATASET_VERSION is part of the environment contract"),
        ({"DATA_ROOT": "/x"}, "env: DATA_ROOT is part"),
        ({"RUN_ID": "x"}, "env: RUN_ID is part"),
        ({"CHECKPOINT_URL": "s3://x"}, "env: CHECKPOINT_URL is part"),
        ({"METADATA_DB_URL": "sqlite://"}, "env: METADATA_DB_URL is part"),
        ({"TRAIN_LR": "1"}, "env: TRAIN_LR is set from the form's 'lr' field"),
        ({"TRAIN_DEVICE": "cuda"}, "env: TRAIN_DEVICE is set from the form's 'gpus' field"),
        ({f"V{i}": "x" for i in range(65)}, "env: at most 64 variables, got 65"),
        ({"NESTED": {"a": 1}}, "env: NESTED must be a string, number or boolean"),
        ("[1, 2]", "env: must be a JSON object"),
        ("{not json", "env: not a JSON object"),
    ],
)
def test_an_env_that_would_break_the_contract_is_refused_naming_it(env, needle: str) -> None:
    with pytest.raises(ContractError) as info:
        TrainParams.from_mapping({"dataset": "digits", "env": env})
    assert needle in str(info.value)


def test_a_users_env_is_added_to_the_contract_as_strings() -> None:
    p = TrainParams.from_mapping(
        {
            "dataset": "digits",
            "env": '{"MY_WARMUP": 100, "USE_X": true, "NAME": "a b", "_PRIVATE": "1"}',
        }
    )
    assert dict(p.env) == {"MY_WARMUP": "100", "USE_X": "true", "NAME": "a b", "_PRIVATE": "1"}
    assert TrainParams.from_mapping(p.to_dict()) == p
    env = build_trainer_env(
        p,
        run_id="r",
        version_id="v" * 64,
        data_root="/d",
        checkpoint_url="s3://b",
        metadata_db_url=None,
        basics={"PATH": "/usr/bin"},
    )
    assert env.public["MY_WARMUP"] == "100" and env.public["RUN_ID"] == "r"
    assert TrainParams.from_mapping({"dataset": "digits", "env": {f"V{i}": "" for i in range(64)}})


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("cpu", "four", "cpu: must be like 2, 0.5 or 500m"),
        ("memory", "16 GB", "memory: must be like 512Mi, 16Gi or 2G"),
        ("image", "team/x:1 --privileged", "image: must not contain white space"),
        ("command", "python 'unterminated", "command: No closing quotation"),
    ],
)
def test_bad_launch_fields_are_refused_naming_them(field: str, value: str, needle: str) -> None:
    with pytest.raises(ContractError) as info:
        TrainParams.from_mapping({"dataset": "digits", field: value})
    assert needle in str(info.value)


def test_cpu_and_memory_take_kubernetes_quantities() -> None:
    p = TrainParams.from_mapping({"dataset": "digits", "cpu": "500m", "memory": "16Gi"})
    assert (p.cpu, p.memory) == ("500m", "16Gi")
    assert (
        TrainParams.from_mapping({"dataset": "digits", "cpu": "2.5", "memory": "1G"}).cpu == "2.5"
    )

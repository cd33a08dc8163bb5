"""A user's own image and command through the train DAG's launch task body (tasks.launch):
the Docker and Kubernetes operators get exactly that image, command, environment and GPU / CPU /
memory requests (no daemon or cluster here: the operator factories are captured, and the
captured arguments build the real operators and the real pod)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pipeline.orchestration import launchers, tasks
from pipeline.orchestration.env_contract import TrainParams

from .test_launchers import kubeconfig  # noqa: F401  (fixture)

SECRET = "lt-secret-user-launchers"
USER_IMAGE = "registry.example.com/team/trainer:7"
USER_COMMAND = "python examples/custom_trainer/train.py --log-every 'every 10'"


@pytest.fixture
def deployment(lt_env: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    from pipeline.settings import get_settings

    monkeypatch.setenv("CHECKPOINT_URL", "s3://ckpt/runs")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAUSER")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("LAKETRAIN_TRAINER_IMAGE", "laketrain-trainer:latest")
    monkeypatch.setenv("LAKETRAIN_HOST_DATA_ROOT", "/host/lt/data")
    get_settings.cache_clear()
    captured: dict = {}

    class Op:
        def __init__(self, kind: str, kwargs: dict) -> None:
            captured[kind] = kwargs

        def execute(self, context: object) -> None:
            captured["executed"] = context

    monkeypatch.setattr(launchers, "docker_operator", lambda **kw: Op("docker", kw))
    monkeypatch.setattr(launchers, "kubernetes_operator", lambda **kw: Op("kubernetes", kw))
    return captured


def user_params(**kw: object) -> TrainParams:
    return TrainParams.from_mapping(
        {
            "dataset": "digits",
            "dataset_version": "latest",
            "image": USER_IMAGE,
            "command": USER_COMMAND,
            "env": {"MY_WARMUP": "100", "WANDB_MODE": "offline"},
            **kw,
        }
    )


def expected_public(launcher: str) -> dict[str, str]:
    """Every variable the container gets in the clear: the contract (DATA_ROOT is the mount
    point; the SQLite store of the host is left out), the TRAIN_ values, the user's env."""
    return {
        "DATASET_NAME": "digits",
        "DATASET_VERSION": "ab" * 32,
        "DATA_ROOT": "/data",
        "CHECKPOINT_URL": "s3://ckpt/runs",
        "RUN_ID": "train-u1",
        "PYTHONUNBUFFERED": "1",
        "LAKETRAIN_LAUNCHER": launcher,
        "AWS_ENDPOINT_URL": "http://minio:9000",
        "TRAIN_EPOCHS": "3",
        "TRAIN_BATCH_SIZE": "64",
        "TRAIN_LR": "0.003",
        "TRAIN_AMP": "auto",
        "TRAIN_GRAD_CHECKPOINTING": "false",
        "TRAIN_MODEL": "auto",
        "TRAIN_SEED": "0",
        "TRAIN_DEVICE": "auto",
        "MY_WARMUP": "100",
        "WANDB_MODE": "offline",
    }


def test_docker_runs_the_users_image_and_command_with_the_contract(deployment: dict) -> None:
    from docker.types import DeviceRequest

    params = user_params(launcher="docker", gpus=2)
    assert tasks.launch(params, run_id="train-u1", version_id="ab" * 32, context="ctx") == 0
    kw = deployment["docker"]
    assert kw["image"] == USER_IMAGE
    assert kw["entrypoint"] == [
        "python",
        "examples/custom_trainer/train.py",
        "--log-every",
        "every 10",
    ]
    assert kw["command"] is None
    assert kw["environment"] == expected_public("docker")
    assert kw["private_environment"] == {
        "AWS_ACCESS_KEY_ID": "AKIAUSER",
        "AWS_SECRET_ACCESS_KEY": SECRET,
    }
    assert kw["device_requests"] == [DeviceRequest(count=2, capabilities=[["gpu"]])]
    assert kw["mounts"][0]["Source"] == "/host/lt/data"
    assert deployment["executed"] == "ctx"
    from airflow.providers.docker.operators.docker import DockerOperator

    op = DockerOperator(**kw)
    assert (op.image, op.entrypoint) == (USER_IMAGE, kw["entrypoint"])
    assert SECRET not in json.dumps(op.environment)


def test_docker_without_image_or_command_runs_the_built_in_trainer(deployment: dict) -> None:
    params = TrainParams.from_mapping(
        {"dataset": "digits", "launcher": "docker", "command": "python -m training"}
    )
    tasks.launch(params, run_id="train-u1", version_id="ab" * 32)
    kw = deployment["docker"]
    assert (kw["image"], kw["entrypoint"]) == (
        "laketrain-trainer:latest",
        launchers.TRAINER_COMMAND,
    )


def test_kubernetes_pod_runs_the_users_image_with_gpu_cpu_and_memory_requests(
    deployment: dict,
    kubeconfig: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator
    from kubernetes.client import ApiClient

    monkeypatch.setenv("LAKETRAIN_K8S_CONFIG_FILE", kubeconfig)
    params = user_params(launcher="kubernetes", gpus=1, cpu="4", memory="16Gi")
    tasks.launch(params, run_id="train-u1", version_id="ab" * 32)
    pod = KubernetesPodOperator(**deployment["kubernetes"]).build_pod_request_obj()
    container = ApiClient().sanitize_for_serialization(pod)["spec"]["containers"][0]
    assert container["image"] == USER_IMAGE
    assert container["command"] == [
        "python",
        "examples/custom_trainer/train.py",
        "--log-every",
        "every 10",
    ]
    assert {e["name"]: e["value"] for e in container["env"]} == expected_public("kubernetes")
    assert container["resources"] == {
        "limits": {"nvidia.com/gpu": "1"},
        "requests": {"cpu": "4", "memory": "16Gi"},
    }
    assert SECRET not in json.dumps(container)


def test_kubernetes_cpu_and_memory_requests_without_gpus(
    deployment: dict,
    kubeconfig: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LAKETRAIN_K8S_CONFIG_FILE", kubeconfig)
    tasks.launch(
        user_params(launcher="kubernetes", gpus=0, cpu="500m", memory=""),
        run_id="train-u1",
        version_id="ab" * 32,
    )
    kw = deployment["kubernetes"]
    assert kw["container_resources"].requests == {"cpu": "500m"}
    assert kw["container_resources"].limits is None and kw["tolerations"] is None


def test_the_local_launcher_runs_the_users_command_from_the_project_root(
    lt_env: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = lt_env / "mine.py"
    script.write_text(
        "import json, os, sys\n"
        "print('SEEN ' + json.dumps({'cwd': os.getcwd(), 'exe': sys.executable,"
        " 'flag': os.environ.get('MY_WARMUP'), 'version': os.environ['DATASET_VERSION']}))\n"
    )
    lines: list[str] = []
    monkeypatch.setattr(tasks, "_emit", lines.append)
    params = user_params(launcher="local", command="python mine.py")
    assert tasks.launch(params, run_id="train-u1", version_id="ab" * 32) == 0
    seen = json.loads(next(x for x in lines if x.startswith("SEEN ")).removeprefix("SEEN "))
    import sys

    assert seen == {
        "cwd": str(lt_env),  # LAKETRAIN_HOME, the project root
        "exe": sys.executable,  # a leading `python` is the worker's interpreter
        "flag": "100",
        "version": "ab" * 32,
    }
    assert os.environ.get("MY_WARMUP") is None

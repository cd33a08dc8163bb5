"""Launchers with DATA_ROOT on ``s3://``: no data volume anywhere. The Docker container and the
Kubernetes pod read the data root with the AWS variables (the pod's secrets from a Secret
reference), through a read cache in the container (an emptyDir in the pod). The exact
arguments, as tests/orchestration/test_launchers.py checks them for a mounted DATA_ROOT."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from pipeline.orchestration.env_contract import TrainerEnv, TrainParams, build_trainer_env
from pipeline.orchestration.launchers import (
    LauncherConfig,
    docker_kwargs,
    kubernetes_kwargs,
    kubernetes_operator,
)
from pipeline.orchestration.user_run import docker_run_argv

SECRET = "lt-secret-DO-NOT-LOG-launchers-s3"
DATA = "s3://lt-data/prod"


def trainer_env() -> TrainerEnv:
    params = TrainParams(dataset="digits", dataset_version="latest", epochs=2, gpus=1)
    return build_trainer_env(
        params,
        run_id="train-manual__1",
        version_id="ab" * 32,
        data_root=DATA,
        checkpoint_url="s3://ckpt/runs",
        metadata_db_url=f"postgresql+psycopg://lt:{SECRET}@db/lt",
        aws={
            "AWS_ENDPOINT_URL": "http://minio:9000",
            "AWS_ACCESS_KEY_ID": "AKIA",
            "AWS_SECRET_ACCESS_KEY": SECRET,
        },
        basics={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"},
        cache=("/srv/lt/var/cache", 20480),
    )


def _public(env: TrainerEnv, **extra: str) -> dict[str, str]:
    public = {
        k: v for k, v in env.public.items() if k not in ("PATH", "LANG", "LAKETRAIN_CACHE_MB")
    }
    assert public["DATA_ROOT"] == DATA  # the URL itself, not a mount point
    # The container's own cache: never the host's folder or bound.
    return {**public, "LAKETRAIN_CACHE_DIR": "/cache", **extra}


def test_a_local_trainer_shares_the_hosts_cache_and_a_local_data_root_gets_none() -> None:
    env = trainer_env()
    assert env.public["LAKETRAIN_CACHE_DIR"] == "/srv/lt/var/cache"
    assert env.public["LAKETRAIN_CACHE_MB"] == "20480"
    params = TrainParams(dataset="digits", dataset_version="latest")
    mounted = build_trainer_env(
        params,
        run_id="r",
        version_id="ab" * 32,
        data_root="/srv/lt/data",
        checkpoint_url="s3://c",
        metadata_db_url=None,
        cache=("/srv/lt/var/cache", 20480),
    )
    assert not {"LAKETRAIN_CACHE_DIR", "LAKETRAIN_CACHE_MB"} & set(mounted.public)


def test_docker_mounts_no_data_volume_and_reads_s3_through_its_cache() -> None:
    from docker.types import DeviceRequest

    env = trainer_env()
    cfg = LauncherConfig(trainer_image="registry/lt-trainer:1.2", docker_network="laketrain")
    kwargs = docker_kwargs(
        env,
        run_id="train-manual__1",
        gpus=1,
        host_data_root=DATA,  # what the train task passes: ignored for an s3:// data root
        checkpoint_url="s3://ckpt/runs",
        config=cfg,
    )
    assert kwargs == {
        "task_id": "train_docker",
        "image": "registry/lt-trainer:1.2",
        "entrypoint": ["python", "-m", "training"],
        "command": None,
        "container_name": "laketrain-train-manual__1",
        "docker_url": "unix://var/run/docker.sock",
        "environment": _public(env),
        "private_environment": {
            "AWS_ACCESS_KEY_ID": "AKIA",
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "METADATA_DB_URL": f"postgresql+psycopg://lt:{SECRET}@db/lt",
        },
        "mounts": [],
        "device_requests": [DeviceRequest(count=1, capabilities=[["gpu"]])],
        "auto_remove": "success",
        "mount_tmp_dir": False,
        "shm_size": 2 * 1024**3,
        "network_mode": "laketrain",
        "labels": {"laketrain.run_id": "train-manual__1"},
        "do_xcom_push": False,
    }
    assert SECRET not in json.dumps(kwargs["environment"])


def test_docker_keeps_the_cache_in_a_named_volume_when_configured() -> None:
    from docker.types import Mount

    cfg = LauncherConfig.from_env(
        {"LAKETRAIN_DOCKER_CACHE_VOLUME": "lt-cache", "LAKETRAIN_TRAINER_CACHE_MB": "4096"}
    )
    kwargs = docker_kwargs(
        trainer_env(), run_id="r", gpus=0, host_data_root=DATA, checkpoint_url="s3://c", config=cfg
    )
    assert kwargs["mounts"] == [
        Mount(target="/cache", source="lt-cache", type="volume", read_only=False)
    ]
    assert kwargs["environment"]["LAKETRAIN_CACHE_MB"] == "4096"
    assert kwargs["environment"]["LAKETRAIN_CACHE_DIR"] == "/cache"


def test_launcher_config_refuses_a_bad_cache_bound_naming_the_variable() -> None:
    with pytest.raises(ValueError, match="^LAKETRAIN_TRAINER_CACHE_MB='lots'"):
        LauncherConfig.from_env({"LAKETRAIN_TRAINER_CACHE_MB": "lots"})


def test_docker_run_for_a_user_image_mounts_no_data() -> None:
    argv = docker_run_argv(
        trainer_env(),
        image="me/trainer:1",
        command=["python", "train.py"],
        run_id="cli-1",
        gpus=0,
        host_data_root=DATA,
        checkpoint_url="s3://ckpt/runs",
    )
    assert "-v" not in argv
    assert argv[:8] == [
        "docker",
        "run",
        "--rm",
        "--name",
        "laketrain-cli-1",
        "--shm-size",
        "2g",
        "-e",
    ]
    assert "LAKETRAIN_CACHE_DIR" in argv and "DATA_ROOT" in argv
    assert SECRET not in " ".join(argv)


@pytest.fixture
def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        textwrap.dedent("""
        apiVersion: v1
        kind: Config
        clusters:
        - cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
          name: fake
        contexts:
        - context: {cluster: fake, user: fake, namespace: default}
          name: fake
        current-context: fake
        users:
        - name: fake
          user: {token: fake-token}
    """)
    )
    return str(path)


def test_kubernetes_pod_has_no_pvc_an_emptydir_cache_and_secrets_by_reference(
    kubeconfig: str,
) -> None:
    from kubernetes.client import ApiClient

    env = trainer_env()
    cfg = LauncherConfig(
        trainer_image="registry/lt-trainer:1.2",
        k8s_namespace="ml",
        k8s_config_file=kubeconfig,
        k8s_data_pvc="lt-data",
        k8s_aws_secret="lt-aws",
        cache_mb=10240,
    )
    kwargs = kubernetes_kwargs(
        env, run_id="train-manual__1", gpus=1, checkpoint_url="s3://ckpt/runs", config=cfg
    )
    spec = ApiClient().sanitize_for_serialization(
        kubernetes_operator(**kwargs).build_pod_request_obj()
    )
    container = spec["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "training"] and container["args"] == []
    assert {e["name"]: e["value"] for e in container["env"]} == _public(
        env, LAKETRAIN_CACHE_MB="10240"
    )
    assert all("valueFrom" not in e for e in container["env"])  # values are public only
    assert container["envFrom"] == [{"secretRef": {"name": "lt-aws", "optional": True}}]
    assert container["volumeMounts"] == [{"mountPath": "/cache", "name": "cache"}]
    assert spec["spec"]["volumes"] == [{"emptyDir": {"sizeLimit": "11328Mi"}, "name": "cache"}]
    assert "persistentVolumeClaim" not in json.dumps(spec)  # no PVC at all
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert SECRET not in json.dumps(spec)


def test_kubernetes_cache_without_a_bound_is_an_unsized_emptydir(kubeconfig: str) -> None:
    cfg = LauncherConfig(k8s_config_file=kubeconfig)
    kwargs = kubernetes_kwargs(
        trainer_env(), run_id="r", gpus=0, checkpoint_url="s3://c", config=cfg
    )
    (volume,) = kwargs["volumes"]
    assert volume.name == "cache" and volume.empty_dir.size_limit is None
    assert volume.persistent_volume_claim is None
    assert "LAKETRAIN_CACHE_MB" not in {e.name for e in kwargs["env_vars"]}

"""Launch the trainer in a Docker container or a Kubernetes pod; the deployment knobs of both.

Both get the same environment as the local process (``env_contract.build_trainer_env``; the
local process itself lives in ``local_launcher``). The Docker and Kubernetes parts are argument
builders plus operator factories: the arguments are plain data that tests compare exactly, and
the operators are built from them (Airflow providers are imported only inside the factories).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pipeline.orchestration.container_data import (  # noqa: F401 - re-exported
    CONTAINER_CACHE,
    CONTAINER_DATA_ROOT,
    _k8s_volumes,
    _positive_int,
    data_on_s3,
)
from pipeline.orchestration.env_contract import TrainerEnv

# The exit codes and their meaning for the task live with the user-command helpers;
# re-exported here, where the launcher tests and the DAG have always found them.
from pipeline.orchestration.usercode import (  # noqa: F401
    EXIT_BAD_CONFIG,
    EXIT_DATA_REFUSED,
    EXIT_FAILED,
    EXIT_NOT_EXECUTABLE,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TEMPFAIL,
    TrainerExit,
    exit_outcome,
    not_found_message,
)

CONTAINER_CHECKPOINTS = "/checkpoints"
TRAINER_COMMAND = ["python", "-m", "training"]


@dataclass(frozen=True)
class LauncherConfig:
    """Deployment knobs of the container launchers, from ``LAKETRAIN_*`` variables."""

    trainer_image: str = "laketrain-trainer:latest"
    host_data_root: str | None = None  # the HOST path of DATA_ROOT (Airflow itself in a container)
    docker_url: str = "unix://var/run/docker.sock"
    docker_network: str | None = None
    k8s_namespace: str = "default"
    k8s_data_pvc: str = "laketrain-data"
    k8s_aws_secret: str = "laketrain-aws"
    k8s_in_cluster: bool = False
    k8s_config_file: str | None = None
    kill_grace_seconds: float = 30.0
    # s3:// DATA_ROOT only: the trainer's cache bound (LAKETRAIN_CACHE_MB in the container;
    # also the size limit of the pod's emptyDir), and a Docker volume that keeps the cache
    # warm across runs (none: the container's own disk, gone with it).
    cache_mb: int | None = None
    docker_cache_volume: str | None = None

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> LauncherConfig:
        env = os.environ if environ is None else environ
        d = cls()
        return cls(
            trainer_image=env.get("LAKETRAIN_TRAINER_IMAGE") or d.trainer_image,
            host_data_root=env.get("LAKETRAIN_HOST_DATA_ROOT") or None,
            docker_url=env.get("LAKETRAIN_DOCKER_URL") or d.docker_url,
            docker_network=env.get("LAKETRAIN_DOCKER_NETWORK") or None,
            k8s_namespace=env.get("LAKETRAIN_K8S_NAMESPACE") or d.k8s_namespace,
            k8s_data_pvc=env.get("LAKETRAIN_K8S_DATA_PVC") or d.k8s_data_pvc,
            k8s_aws_secret=env.get("LAKETRAIN_K8S_AWS_SECRET") or d.k8s_aws_secret,
            k8s_in_cluster=(env.get("LAKETRAIN_K8S_IN_CLUSTER") or "").lower()
            in ("1", "true", "yes"),
            k8s_config_file=env.get("LAKETRAIN_K8S_CONFIG_FILE") or None,
            kill_grace_seconds=float(
                env.get("LAKETRAIN_KILL_GRACE_SECONDS") or d.kill_grace_seconds
            ),
            cache_mb=_positive_int(env, "LAKETRAIN_TRAINER_CACHE_MB"),
            docker_cache_volume=env.get("LAKETRAIN_DOCKER_CACHE_VOLUME") or None,
        )


# --------------------------------------------------------------------------- containers


def _container_env(
    env: TrainerEnv, checkpoint_url: str, config: LauncherConfig | None = None
) -> dict[str, str]:
    """The public env with host paths replaced by the container's mount points. An s3://
    DATA_ROOT stays as it is, with the cache in the container's own folder."""
    public = {
        k: v
        for k, v in env.public.items()
        if k not in ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR")
    }
    if data_on_s3(env):
        # The container's own cache: the host's folder and bound mean nothing in it.
        public["LAKETRAIN_CACHE_DIR"] = CONTAINER_CACHE
        public.pop("LAKETRAIN_CACHE_MB", None)
        if config is not None and config.cache_mb:
            public["LAKETRAIN_CACHE_MB"] = str(config.cache_mb)
    else:
        public["DATA_ROOT"] = CONTAINER_DATA_ROOT
    if checkpoint_url.startswith("file://"):
        public["CHECKPOINT_URL"] = f"file://{CONTAINER_CHECKPOINTS}"
    db = public.get("METADATA_DB_URL", "")
    if db.startswith("sqlite"):
        # A SQLite file on the host is not reachable (and the data volume is read-only): the
        # trainer's store is optional, the DAG records the run itself.
        public.pop("METADATA_DB_URL")
    return public


def docker_kwargs(
    env: TrainerEnv,
    *,
    run_id: str,
    gpus: int,
    host_data_root: str,
    checkpoint_url: str,
    config: LauncherConfig,
    task_id: str = "train_docker",
    image: str = "",
    command: list[str] | None = None,
) -> dict[str, Any]:
    """The DockerOperator's arguments: data mounted read-only, GPUs by device request, the
    secrets in ``private_environment`` (not rendered, not logged). ``image`` (default the
    trainer image) and ``command`` (default the built-in trainer) run a user's own trainer.
    An s3:// DATA_ROOT mounts no data (``host_data_root`` is ignored): the trainer reads it
    with the AWS variables, through its cache at CONTAINER_CACHE (a named volume when
    ``config.docker_cache_volume`` names one)."""
    from docker.types import DeviceRequest, Mount

    if data_on_s3(env):
        mounts = []
        if config.docker_cache_volume:
            mounts.append(
                Mount(
                    target=CONTAINER_CACHE,
                    source=config.docker_cache_volume,
                    type="volume",
                    read_only=False,
                )
            )
    else:
        mounts = [
            Mount(
                target=CONTAINER_DATA_ROOT, source=str(host_data_root), type="bind", read_only=True
            )
        ]
    if checkpoint_url.startswith("file://"):
        mounts.append(
            Mount(
                target=CONTAINER_CHECKPOINTS,
                source=_file_url_path(checkpoint_url),
                type="bind",
                read_only=False,
            )
        )
    kwargs: dict[str, Any] = {
        "task_id": task_id,
        "image": image or config.trainer_image,
        # The entrypoint, not the command: the trainer image's ENTRYPOINT is already
        # `python -m training`, and a command would only be appended to it as arguments. A
        # user's command replaces it the same way, so it runs as given in any image.
        "entrypoint": list(command or TRAINER_COMMAND),
        "command": None,
        "container_name": f"laketrain-{run_id}"[:128],
        "docker_url": config.docker_url,
        "environment": _container_env(env, checkpoint_url, config),
        "private_environment": dict(env.secret),
        "mounts": mounts,
        "device_requests": [DeviceRequest(count=gpus, capabilities=[["gpu"]])]
        if gpus != 0
        else None,
        "auto_remove": "success",
        "mount_tmp_dir": False,
        "shm_size": 2 * 1024**3,  # DataLoader workers share batches through /dev/shm
        "network_mode": config.docker_network,
        "labels": {"laketrain.run_id": run_id},
        "do_xcom_push": False,  # the last log line would land in XCom otherwise
    }
    return kwargs


def docker_operator(**kwargs: Any) -> Any:
    from airflow.providers.docker.operators.docker import DockerOperator

    return DockerOperator(**kwargs)


def kubernetes_kwargs(
    env: TrainerEnv,
    *,
    run_id: str,
    gpus: int,
    checkpoint_url: str,
    config: LauncherConfig,
    task_id: str = "train_kubernetes",
    image: str = "",
    command: list[str] | None = None,
    cpu: str = "",
    memory: str = "",
) -> dict[str, Any]:
    """The KubernetesPodOperator's arguments. Secrets are NOT copied into the pod spec: the
    pod reads them from the Kubernetes Secret ``config.k8s_aws_secret`` (``env_from``), so they
    never appear in the rendered pod or in Airflow. An s3:// DATA_ROOT has no PVC: the pod
    reads it through its cache in an ``emptyDir`` (sized by ``config.cache_mb`` when set)."""
    from kubernetes.client import models as k8s

    if checkpoint_url.startswith("file://"):
        raise ValueError(
            "CHECKPOINT_URL: the kubernetes launcher needs object storage (s3://...), "
            f"a pod cannot write the scheduler host's {checkpoint_url}"
        )
    public = _container_env(env, checkpoint_url, config)
    tolerations = None
    limits: dict[str, str] = {}
    # Requests only: the scheduler places the pod where they fit; the pod may use more.
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v}
    if gpus != 0:
        # A pod cannot ask for "all GPUs": -1 (all, for Docker) becomes one whole GPU here.
        limits["nvidia.com/gpu"] = str(gpus if gpus > 0 else 1)
        tolerations = [
            k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")
        ]
    resources = (
        k8s.V1ResourceRequirements(limits=limits or None, requests=requests or None)
        if limits or requests
        else None
    )
    label_run = _k8s_label(run_id)
    return {
        "task_id": task_id,
        "name": f"laketrain-train-{label_run}"[:63].rstrip("-."),
        "namespace": config.k8s_namespace,
        "image": image or config.trainer_image,
        "cmds": list(command or TRAINER_COMMAND),
        "env_vars": [k8s.V1EnvVar(name=k, value=v) for k, v in sorted(public.items())],
        "env_from": [
            k8s.V1EnvFromSource(
                secret_ref=k8s.V1SecretEnvSource(name=config.k8s_aws_secret, optional=True)
            )
        ],
        "container_resources": resources,
        "tolerations": tolerations,
        **_k8s_volumes(env, config),
        "labels": {"app": "laketrain-trainer", "laketrain/run-id": label_run},
        "in_cluster": config.k8s_in_cluster,
        "config_file": config.k8s_config_file,
        "get_logs": True,
        "on_finish_action": "delete_succeeded_pod",
        "do_xcom_push": False,
        "reattach_on_restart": True,  # a retried task finds its running pod instead of a second one
    }


def kubernetes_operator(**kwargs: Any) -> Any:
    from airflow.providers.cncf.kubernetes.operators.pod import KubernetesPodOperator

    return KubernetesPodOperator(**kwargs)


def _file_url_path(url: str) -> str:
    parts = urlsplit(url)
    from urllib.parse import unquote

    return str(Path(unquote(parts.path)))


def _k8s_label(value: str) -> str:
    import re

    clean = re.sub(r"[^a-z0-9.-]+", "-", value.lower()).strip("-.")
    return clean[:63].rstrip("-.") or "run"

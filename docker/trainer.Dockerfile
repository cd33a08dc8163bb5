# syntax=docker/dockerfile:1
# The GPU trainer image: `python -m training` on a CUDA runtime, with torch built for the same
# CUDA version. Everything it needs comes in through the environment (the trainer's env
# contract, docs/ARCHITECTURE.md); nothing secret is baked in.
#
#   docker build -f docker/trainer.Dockerfile -t laketrain-trainer:latest .
#   docker run --rm --gpus all --env-file trainer.env -v /srv/laketrain/data:/data:ro \
#     laketrain-trainer:latest
#
# Another CUDA line (e.g. for an older driver) is two build args away:
#   --build-arg CUDA_VERSION=12.6.3 --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126
# The build fails if torch's CUDA version differs from the base image's.

ARG CUDA_VERSION=13.0.2
ARG UBUNTU_VERSION=24.04
ARG UV_VERSION=0.9.30

FROM ghcr.io/astral-sh/uv:${UV_VERSION} AS uv

# ---- builder: a self-contained Python 3.11 and a virtualenv with the project -----------------
# Ubuntu 24.04 ships Python 3.12; the project is pinned to 3.11, so uv installs a standalone
# CPython under /opt/python. Both folders are copied unchanged (same paths) into the final stage.
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION} AS builder
ARG CUDA_VERSION
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cu130
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
COPY --from=uv /uv /usr/local/bin/uv
ENV UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed \
    UV_LINK_MODE=copy \
    UV_COMPILE_BYTECODE=1 \
    UV_NO_CACHE=1
RUN uv python install 3.11 && uv venv --python 3.11 /opt/venv
ENV VIRTUAL_ENV=/opt/venv PATH=/opt/venv/bin:$PATH

# torch first, from the PyTorch index of the CUDA line (its dependencies from PyPI), and check
# that its CUDA matches the base image: a mismatch would only show up on the GPU machine.
RUN uv pip install --index "${TORCH_INDEX_URL}" --default-index https://pypi.org/simple \
        "torch==${TORCH_VERSION}" \
 && python -c "import sys, torch; want='.'.join('${CUDA_VERSION}'.split('.')[:2]); \
got=torch.version.cuda or 'cpu'; print('torch', torch.__version__, 'cuda', got); \
sys.exit(0 if got == want else f'torch is built for CUDA {got}, the base image has {want}')"

# The project with its training extra only (no Airflow). The lock pins every other package to
# the versions CI tested; torch is left out of the constraints (the lock holds the CPU build).
WORKDIR /src
COPY requirements.lock ./
RUN grep -v '^torch==' requirements.lock | sed -E 's/^([A-Za-z0-9_.-]+)\[[^]]*\]==/\1==/' > /tmp/constraints.txt
COPY pyproject.toml README.md ./
COPY pipeline ./pipeline
COPY training ./training
RUN uv pip install --constraint /tmp/constraints.txt ".[training]" \
 && python -c "import importlib.util as u, sys; sys.exit('airflow must not be in the trainer image' if u.find_spec('airflow') else 0)" \
 && python -c "import training, pipeline.datasets.reader"

# ---- final: CUDA runtime + the copied interpreter and venv; no compilers, no uv, no sources ----
FROM nvidia/cuda:${CUDA_VERSION}-runtime-ubuntu${UBUNTU_VERSION}
ARG TRAINER_UID=10001
COPY --from=builder /opt/python /opt/python
COPY --from=builder /opt/venv /opt/venv
# A fixed uid in group 0, so a host folder mounted for file:// checkpoints can be opened to it.
RUN useradd --uid "${TRAINER_UID}" --gid 0 --create-home --shell /usr/sbin/nologin trainer
ENV VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    MPLCONFIGDIR=/tmp/matplotlib \
    DATA_ROOT=/data
# With no GPU (no --gpus, or TRAIN_DEVICE=cpu) torch reports cuda unavailable and the trainer
# falls back to the CPU: nothing here assumes a device.
# Numeric, so that Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER ${TRAINER_UID}
WORKDIR /home/trainer
ENTRYPOINT ["python", "-m", "training"]

"""The data side of a trainer container: a mounted DATA_ROOT, or, for an ``s3://`` one, no
data volume and a read cache (``pipeline/storage/cache.py``) at CONTAINER_CACHE: the
container's own disk or a named volume under Docker, an ``emptyDir`` in a pod."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pipeline.orchestration.env_contract import TrainerEnv
    from pipeline.orchestration.launchers import LauncherConfig

CONTAINER_DATA_ROOT = "/data"
CONTAINER_CACHE = "/cache"


def data_on_s3(env: TrainerEnv) -> bool:
    """Whether the run's DATA_ROOT is an s3:// data root (no data volume: a read cache)."""
    return env.public.get("DATA_ROOT", "").startswith("s3://")


def _positive_int(env: Mapping[str, str], var: str) -> int | None:
    raw = (env.get(var) or "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(f"{var}={raw!r}: must be a whole number of MB, at least 1")
    return int(raw)


def _k8s_volumes(env: TrainerEnv, config: LauncherConfig) -> dict[str, Any]:
    """The data PVC, read-only; or, for an s3:// DATA_ROOT, an emptyDir for the read cache
    (``LAKETRAIN_CACHE_DIR`` points into it), a little larger than the cache's own bound so
    that the kubelet never evicts the pod for the cache's bookkeeping files."""
    from kubernetes.client import models as k8s

    if data_on_s3(env):
        limit = f"{config.cache_mb + config.cache_mb // 10 + 64}Mi" if config.cache_mb else None
        return {
            "volumes": [
                k8s.V1Volume(name="cache", empty_dir=k8s.V1EmptyDirVolumeSource(size_limit=limit))
            ],
            "volume_mounts": [k8s.V1VolumeMount(name="cache", mount_path=CONTAINER_CACHE)],
        }
    return {
        "volumes": [
            k8s.V1Volume(
                name="data",
                persistent_volume_claim=k8s.V1PersistentVolumeClaimVolumeSource(
                    claim_name=config.k8s_data_pvc, read_only=True
                ),
            )
        ],
        "volume_mounts": [
            k8s.V1VolumeMount(name="data", mount_path=CONTAINER_DATA_ROOT, read_only=True)
        ],
    }

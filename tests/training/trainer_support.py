"""Support for the trainer tests: a real digits version built once per test session by the real
pipeline from the sample lake, the environment a `python -m training` subprocess gets, and a
small in-memory reader with the VersionReader interface for unit tests of single parts (NaN
samples, forged manifests and leaking splits cannot come out of the real pipeline, by design).

Test modules define thin fixtures over these functions (the S3 fixtures live in
tests/s3_fixtures.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]


_DIGITS: dict[str, Any] = {}


def digits_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """LAKE_DIR / DATA_ROOT with the digits sample lake and one version built from it (built
    once per test process, shared read-only: nothing writes to a published version)."""
    if _DIGITS:
        return _DIGITS
    home = tmp_path_factory.mktemp("digits_home")
    env = {
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "SETTLE_SECONDS": "0",
        "RECIPES_DIR": str(REPO / "recipes"),
        "CHECKPOINT_URL": (home / "objects").as_uri(),
    }
    (home / "lake").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("METADATA_DB_URL", raising=False)
        from pipeline.settings import get_settings

        get_settings.cache_clear()
        from pipeline.datasets.build import build
        from pipeline.lake.sample_lake import write_digits

        write_digits(home / "lake")
        version = build("digits")
        get_settings.cache_clear()
    assert version is not None
    _DIGITS.update({"home": home, "env": env, "version_id": version.version_id, "tag": version.tag})
    return _DIGITS


def base_env(
    digits_home: dict[str, Any], checkpoint_dir: Path, run_id: str, **train: Any
) -> dict[str, str]:
    """The environment contract for a trainer subprocess (nothing inherited but PATH & co)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRAIN_", "DATASET_", "RUN_ID", "METADATA_DB_URL"))
    }
    env.update(digits_home["env"])
    env.update(
        {
            "DATASET_NAME": "digits",
            "DATASET_VERSION": "latest",
            "CHECKPOINT_URL": checkpoint_dir
            if isinstance(checkpoint_dir, str)
            else checkpoint_dir.as_uri(),
            "RUN_ID": run_id,
            "PYTHONUNBUFFERED": "1",
            # One intra-op thread: the same float summation order in every run, and no fight over
            # the two cores with the other test processes.
            "OMP_NUM_THREADS": "1",
        }
    )
    for key, value in train.items():
        env[f"TRAIN_{key.upper()}"] = str(value)
    return env


def run_trainer(
    env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "training", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def read_result(checkpoint_dir: Path, run_id: str) -> dict[str, Any]:
    return json.loads((checkpoint_dir / run_id / "result.json").read_text())


class ArrayReader:
    """The VersionReader interface over in-memory arrays (unit tests of single parts)."""

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        *,
        classes: list[str] | None = None,
        val_mask: np.ndarray | None = None,
        md5s: list[str] | None = None,
        modality: str = "image",
        manifest_counts: dict | None = None,
        indices: np.ndarray | None = None,
        mean: Any = None,
        std: Any = None,
    ) -> None:
        self._x, self._y = x, np.asarray(y, dtype=np.int64)
        n = len(x)
        self._val = np.zeros(n, bool) if val_mask is None else val_mask
        self._md5 = md5s or [f"{i:032x}" for i in range(n)]
        self._idx = np.arange(n) if indices is None else indices
        self.classes = classes or [str(c) for c in range(int(self._y.max()) + 1)]
        self.modality = modality
        self.version_id, self.tag, self.dataset, self.manifest_sha256 = (
            "v" * 64,
            "fake_v1",
            "fake",
            "0" * 64,
        )
        self.mean = (
            mean if mean is not None else [float(x.mean())] * (x.shape[1] if x.ndim == 4 else 1)
        )
        self.std = (
            std if std is not None else [float(x.std()) or 1.0] * (x.shape[1] if x.ndim == 4 else 1)
        )
        counts = manifest_counts
        if counts is None:
            counts = {}
            for split, mask in (("train", ~self._val), ("val", self._val)):
                hist = np.bincount(self._y[mask], minlength=len(self.classes))
                counts[split] = {
                    "samples": int(mask.sum()),
                    "classes": {c: int(hist[i]) for i, c in enumerate(self.classes) if hist[i]},
                }
        self.manifest = {"counts": {"per_split": counts}, "modality": modality}

    @property
    def sample_shape(self) -> tuple[int, ...]:
        return tuple(self._x.shape[1:])

    def __len__(self) -> int:
        return len(self._idx)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        j = self._idx[i]
        return self._x[j], int(self._y[j])

    def get_batch(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        j = self._idx[np.asarray(indices, dtype=np.int64)]
        return self._x[j], self._y[j]

    def split(self, name: str) -> ArrayReader:
        mask = self._val[self._idx] if name == "val" else ~self._val[self._idx]
        sub = ArrayReader.__new__(ArrayReader)
        sub.__dict__.update(self.__dict__)
        sub._idx = self._idx[mask]
        return sub

    def labels(self) -> np.ndarray:
        return self._y[self._idx]

    def md5s(self) -> np.ndarray:
        return np.asarray([self._md5[j] for j in self._idx])

    def metadata(self, i: int) -> dict:
        j = int(self._idx[i])
        return {
            "path": f"fake/{self._y[j]}/{j:04d}.png",
            "md5": self._md5[j],
            "label": self.classes[self._y[j]],
        }


def digits_arrays(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Real digits (scikit-learn's 8x8 images, scaled to uint8 like the sample lake)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    rng = np.random.default_rng(seed)
    pick = rng.permutation(len(d.images))[:n]
    x = np.clip(d.images[pick] * (255.0 / 16.0), 0, 255).astype(np.uint8)[:, None]
    return x, d.target[pick].astype(np.int64)


def digits_reader(n: int = 400) -> ArrayReader:
    x, y = digits_arrays(n)
    val = np.zeros(len(x), bool)
    val[::5] = True
    return ArrayReader(x, y, val_mask=val)

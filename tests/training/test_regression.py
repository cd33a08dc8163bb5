"""The built-in trainer on a regression version: scikit-learn's diabetes data (shipped with the
package, no download) written as a CSV into a real lake, built by the real pipeline, trained
by ``python -m training``. The regressor must beat predicting the train mean on validation by
a clear margin; metrics are val RMSE / MAE (lower is better) and pick the best checkpoint."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[2]
RECIPE = (
    'modality = "table"\ntask = "regression"\n[table]\nlabel_column = "target"\n'
    "[split]\nval_fraction = 0.2\n"
)


@pytest.fixture(scope="module")
def diabetes_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The lake, the recipe and the built version, once for the module (the runs only read
    the version; each run writes under its own RUN_ID)."""
    from sklearn.datasets import load_diabetes

    home = tmp_path_factory.mktemp("diabetes_home")
    env = {
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "CHECKPOINT_URL": (home / "objects").as_uri(),
        "SETTLE_SECONDS": "0",
        "RECIPES_DIR": str(home / "recipes"),
    }
    data = load_diabetes()
    folder = home / "lake" / "diabetes"
    folder.mkdir(parents=True)
    header = ",".join([*data.feature_names, "target"])
    lines = [
        ",".join(f"{v:.8g}" for v in (*row, t))
        for row, t in zip(data.data, data.target, strict=True)
    ]
    (folder / "diabetes.csv").write_text(header + "\n" + "\n".join(lines) + "\n")
    (home / "recipes").mkdir()
    (home / "recipes" / "diabetes.toml").write_text(RECIPE)
    from pipeline.datasets.build import build
    from pipeline.settings import get_settings

    with pytest.MonkeyPatch.context() as mp:
        for key, value in env.items():
            mp.setenv(key, value)
        mp.delenv("METADATA_DB_URL", raising=False)
        get_settings.cache_clear()
        version = build("diabetes")
    get_settings.cache_clear()
    assert version is not None and version.samples == 442
    return env


@pytest.fixture
def diabetes(diabetes_home: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    for key, value in diabetes_home.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("METADATA_DB_URL", raising=False)
    from pipeline.settings import get_settings

    get_settings.cache_clear()
    yield Path(diabetes_home["LAKETRAIN_HOME"])
    get_settings.cache_clear()


def _train(home: Path, run_id: str, **train: object) -> tuple[dict, list[dict], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAIN_", "DATASET_"))}
    env.update(
        DATASET_NAME="diabetes",
        DATASET_VERSION="latest",
        RUN_ID=run_id,
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    env.pop("METADATA_DB_URL", None)
    env.update({f"TRAIN_{k.upper()}": str(v) for k, v in train.items()})
    proc = subprocess.run(
        [sys.executable, "-m", "training"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = Path(env["CHECKPOINT_URL"].removeprefix("file://")) / run_id
    result = json.loads((run_dir / "result.json").read_text())
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return result, rows, proc.stderr


def _mean_baseline() -> tuple[float, float]:
    """RMSE and MAE on val of predicting the train split's mean target."""
    from pipeline.datasets.reader import open_version

    r = open_version("diabetes")
    train, val = r.split("train").labels(), r.split("val").labels()
    assert train.dtype == np.float32 and len(val) > 50
    err = val.astype(np.float64) - float(train.astype(np.float64).mean())
    return float(np.sqrt((err**2).mean())), float(np.abs(err).mean())


def test_diabetes_regressor_beats_the_mean_baseline_on_validation(diabetes: Path) -> None:
    base_rmse, base_mae = _mean_baseline()
    result, rows, log = _train(diabetes, "diabetes-mse", epochs=40, batch_size=32, seed=1)
    assert result["status"] == "succeeded" and result["metric_name"] == "val_rmse"
    epochs = [r for r in rows if r["kind"] == "epoch"]
    assert len(epochs) == 40
    assert {"val_loss", "val_rmse", "val_mae"} <= set(epochs[0])
    assert "val_accuracy" not in epochs[0] and "train_accuracy" not in epochs[0]
    best = min(e["val_rmse"] for e in epochs)
    # The best checkpoint is the LOWEST val RMSE (the manager ranks negated values).
    assert result["best_metric"] == pytest.approx(best, rel=1e-6)
    assert best <= 0.9 * base_rmse, (best, base_rmse)
    best_epoch = min(epochs, key=lambda e: e["val_rmse"])
    assert best_epoch["val_mae"] <= 0.9 * base_mae, (best_epoch["val_mae"], base_mae)
    assert "rmse" in log
    # The best pointer names the step of that epoch.
    from training.checkpoint import CheckpointManager

    manager = CheckpointManager(os.environ["CHECKPOINT_URL"], "diabetes-mse")
    assert manager.best_pointer()["step"] == best_epoch["step"]


def test_huber_loss_with_a_log1p_target_reports_metrics_in_the_targets_unit(
    diabetes: Path,
) -> None:
    base_rmse, _ = _mean_baseline()
    result, rows, _ = _train(
        diabetes,
        "diabetes-huber",
        epochs=40,
        batch_size=32,
        seed=1,
        regression_loss="huber",
        target_transform="log1p",
        metric="val_mae",
    )
    assert result["metric_name"] == "val_mae"
    epochs = [r for r in rows if r["kind"] == "epoch"]
    # RMSE in the target's unit (the inverse of log1p applied): comparable to the baseline.
    assert min(e["val_rmse"] for e in epochs) <= 0.9 * base_rmse
    assert result["best_metric"] == pytest.approx(min(e["val_mae"] for e in epochs), rel=1e-6)


def test_log1p_target_round_trips_and_standardises() -> None:
    from training.losses import RegressionLoss, RegressionTarget

    y = torch.tensor([0.0, 10.0, 100.0, 1000.0])
    t = RegressionTarget(y, "log1p")
    enc = t.encode(y)
    assert float(enc.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(enc.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    assert torch.allclose(t.to_target(enc[:, None]), y, rtol=1e-4, atol=1e-4)
    # MSE on the encoded target: a perfect prediction costs nothing.
    assert float(RegressionLoss(t, "mse")(enc[:, None], y)) == pytest.approx(0.0, abs=1e-10)


def test_log1p_refuses_targets_at_or_below_minus_one() -> None:
    from training.config import ConfigError
    from training.losses import RegressionTarget

    with pytest.raises(ConfigError, match="TRAIN_TARGET_TRANSFORM=log1p"):
        RegressionTarget(torch.tensor([-1.0, 2.0]), "log1p")

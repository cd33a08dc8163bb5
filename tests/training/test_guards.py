"""Guards: a non-finite loss names the step, the samples and their files; leakage and a label
histogram that disagrees with the manifest refuse the version before training."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.training.trainer_support import ArrayReader
from training.config import build_config
from training.guards import (
    DataCheckError,
    NonFiniteLossError,
    check_label_distribution,
    refuse_leakage,
)
from training.loop import Trainer


def table_reader(n: int = 64, nan_at: int | None = None) -> ArrayReader:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 6)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    if nan_at is not None:
        x[nan_at, 3] = np.nan  # a corrupt row, as a broken table export would give
    return ArrayReader(x, y, modality="table", mean=np.zeros(6), std=np.ones(6))


def trainer_for(reader: ArrayReader, **values: object) -> Trainer:
    cfg = build_config(
        {"batch_size": 16, "width": 8, "depth": 1, "epochs": 1, "checkpoint_every": 0, **values}
    )
    return Trainer(cfg, reader, reader.split("val"), device=torch.device("cpu"))


@pytest.mark.parametrize("detect_anomaly", [False, True])
def test_non_finite_loss_stops_with_step_indices_and_paths(detect_anomaly: bool) -> None:
    bad = 37
    t = trainer_for(table_reader(nan_at=bad), detect_anomaly=detect_anomaly)
    batches = t.data.plan(0)
    bad_step = next(i for i, b in enumerate(batches) if bad in b)
    with pytest.raises(NonFiniteLossError) as err:
        t.fit()
    e = err.value
    assert e.step == bad_step and bad in e.indices
    assert e.indices == batches[bad_step]
    assert f"fake/{t.train_reader._y[bad]}/{bad:04d}.png" in e.paths
    assert f"at step {bad_step}" in str(e) and f"{bad}:fake/" in str(e)
    if detect_anomaly:
        assert e.trace and "anomaly trace" in str(e)
    else:
        assert e.trace is None
    # The parameters were not updated by the bad batch.
    assert all(torch.isfinite(p).all() for p in t.model.parameters())


def test_leakage_is_refused() -> None:
    x = np.zeros((10, 1, 2, 2), np.uint8)
    y = np.arange(10) % 2
    val = np.zeros(10, bool)
    val[8:] = True
    md5s = [f"{i:032x}" for i in range(10)]
    ok = ArrayReader(x, y, val_mask=val, md5s=md5s)
    refuse_leakage(ok)
    md5s[9] = md5s[2]  # the same content in train and val
    with pytest.raises(
        DataCheckError, match=r"leakage: .* 1 sample\(s\) in both train and val: " + md5s[2]
    ):
        refuse_leakage(ArrayReader(x, y, val_mask=val, md5s=md5s))


def test_label_distribution_mismatch_stops() -> None:
    x = np.zeros((10, 1, 2, 2), np.uint8)
    y = np.array([0, 0, 0, 1, 1, 1, 1, 0, 1, 0])
    val = np.zeros(10, bool)
    val[8:] = True
    check_label_distribution(ArrayReader(x, y, val_mask=val))  # consistent: passes
    forged = {"train": {"classes": {"0": 4, "1": 4}}, "val": {"classes": {"0": 2}}}
    with pytest.raises(
        DataCheckError,
        match=r"label distribution mismatch in val: 0: manifest 2, data 1; 1: manifest 0, data 1",
    ):
        check_label_distribution(ArrayReader(x, y, val_mask=val, manifest_counts=forged))
    unknown = {"train": {"classes": {"0": 4, "7": 4}}, "val": {"classes": {"0": 1, "1": 1}}}
    with pytest.raises(DataCheckError, match="class '7'"):
        check_label_distribution(ArrayReader(x, y, val_mask=val, manifest_counts=unknown))


def test_sigterm_during_a_step_finishes_it_saves_and_stops() -> None:
    """A real SIGTERM to this process, delivered in the middle of a forward pass."""
    import os
    import signal

    from training.preemption import Preemption, StopRequested

    saved: list[dict] = []
    x, y = np.random.default_rng(0).normal(size=(96, 6)).astype(np.float32), np.arange(96) % 2
    reader = ArrayReader(x, y, modality="table", mean=np.zeros(6), std=np.ones(6))
    t = trainer_for(reader, checkpoint_every=0, epochs=3)
    t.save_fn = lambda state, **kw: saved.append(state)
    calls = [0]

    def hook(module: torch.nn.Module, inputs: object, output: object) -> None:
        calls[0] += 1
        if calls[0] == 3:  # the forward of step index 2
            os.kill(os.getpid(), signal.SIGTERM)

    t.model.body.register_forward_hook(hook)
    flag = Preemption().install()
    t.stop_flag = flag
    try:
        with pytest.raises(StopRequested):
            t.fit()
    finally:
        flag.uninstall()
    assert t.step == 3  # the step in flight finished, no further one started
    assert len(saved) == 1 and saved[0]["step"] == 3 and saved[0]["data"]["cursor"] == 3 * 16
    assert signal.getsignal(signal.SIGTERM) != flag._handle  # the handler is uninstalled

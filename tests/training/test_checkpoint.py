"""CheckpointManager on file:// and on a real moto_server: commit marker, fallback, retention,
background errors, ranks, and a real SIGKILL in the middle of an upload."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from pipeline.storage import LocalStore, join, store_for
from tests.s3_fixtures import TEST_SECRET_ACCESS_KEY
from training.checkpoint import CheckpointError, CheckpointManager
from training.checkpoint_format import MARKER, STATE_FILE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["file", "s3"])
def base_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "file":
        return (tmp_path / "objects").as_uri()
    return f"{request.getfixturevalue('moto_server').url}/ckpts"


def make_state(step: int) -> dict:
    gen = torch.Generator().manual_seed(step)
    model = torch.nn.Linear(8, 3)
    with torch.no_grad():
        model.weight.copy_(torch.randn(3, 8, generator=gen))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(4, 8, generator=gen)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "rng": {"torch": torch.get_rng_state(), "python": [3, list(range(5)), None]},
        "epoch": step // 10,
        "sampler": {"position": step * 7},
        "config": {"lr": 0.1, "name": "x"},
    }


def assert_state_equal(a: dict, b: dict) -> None:
    assert a.keys() - {"step"} == b.keys() - {"step"}
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert torch.equal(a["rng"]["torch"], b["rng"]["torch"])
    momentum_a = a["optimizer"]["state"][0]["momentum_buffer"]
    assert torch.equal(momentum_a, b["optimizer"]["state"][0]["momentum_buffer"])
    assert a["sampler"] == b["sampler"] and a["config"] == b["config"] and a["epoch"] == b["epoch"]


def steps_in_storage(mgr: CheckpointManager) -> list[int]:
    return sorted(mgr._step_dirs())


def save_all(mgr: CheckpointManager, steps, metrics=None) -> dict[int, dict]:
    states = {}
    for i, step in enumerate(steps):
        states[step] = make_state(step)
        mgr.save(step, states[step], metric=None if metrics is None else metrics[i])
    mgr.wait()
    return states


# ---------------------------------------------------------------------------- round trip


def test_save_then_load_latest_round_trips_exactly(base_url: str, tmp_path: Path) -> None:
    mgr = CheckpointManager(base_url, "run-a", local_dir=tmp_path / "local")
    assert mgr.run_url == f"{base_url}/run-a"
    assert mgr.load_latest() is None  # nothing yet
    states = save_all(mgr, [10, 20])
    mgr.close()

    fresh = CheckpointManager(base_url, "run-a", local_dir=tmp_path / "local2")
    loaded = fresh.load_latest()
    assert loaded is not None and loaded["step"] == 20
    assert_state_equal(loaded, states[20])
    assert fresh.loaded_step == 20 and fresh.loaded_url == f"{base_url}/run-a/step-20"
    assert fresh.latest_pointer() == {"step": 20, "url": f"{base_url}/run-a/step-20"}

    store = store_for(base_url)
    marker = json.loads(store.read_bytes(join(base_url, "run-a", "step-20", MARKER)))
    assert set(marker["files"]) == {STATE_FILE}
    assert (
        marker["files"][STATE_FILE]["size"] > 0 and len(marker["files"][STATE_FILE]["sha256"]) == 64
    )
    assert marker["step"] == 20 and marker["run_id"] == "run-a"
    # The local snapshots are gone once uploaded.
    assert not any((tmp_path / "local").glob("step-*"))


def test_load_uses_weights_only(base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    mgr = CheckpointManager(base_url, "run-w")
    save_all(mgr, [1])
    mgr.close()
    calls = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    assert CheckpointManager(base_url, "run-w").load_latest()["step"] == 1
    assert calls == [True]


def test_state_that_weights_only_cannot_load_is_refused_at_save(tmp_path: Path) -> None:
    import numpy as np

    mgr = CheckpointManager((tmp_path / "o").as_uri(), "run-np", local_dir=tmp_path / "l")
    with pytest.raises(TypeError, match="weights_only"):
        mgr.save(1, {"numpy_rng": np.random.get_state()})
    assert not any((tmp_path / "l").glob("step-*"))
    mgr.close()
    assert not (tmp_path / "o" / "run-np").exists()


def test_save_returns_before_the_upload_finishes(tmp_path: Path) -> None:
    release = threading.Event()
    uploading = threading.Event()

    class GatedStore(LocalStore):
        def put_file(self, local: Path, key_url: str) -> None:
            uploading.set()
            assert release.wait(30)
            super().put_file(local, key_url)

    mgr = CheckpointManager((tmp_path / "o").as_uri(), "run-g")
    mgr.store = GatedStore()
    url = mgr.save(5, make_state(5))
    assert uploading.wait(30)
    # save() has returned while the upload is held: nothing is committed yet.
    assert mgr.committed_steps() == []
    assert CheckpointManager((tmp_path / "o").as_uri(), "run-g").load_latest() is None
    release.set()
    mgr.close()
    assert mgr.committed_steps() == [5]
    assert url == f"{mgr.run_url}/step-5"


# ------------------------------------------------------------------- validity & fallback


def corrupt(base_url: str, run: str, step: int, how: str, moto=None) -> None:
    store = store_for(base_url)
    url = join(base_url, run, f"step-{step}", STATE_FILE)
    data = store.read_bytes(url)
    if how == "flip":
        mid = len(data) // 2
        data = data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1 :]
    elif how == "truncate":
        data = data[: len(data) // 3]
    store.write_bytes(url, data)
    if how == "no-marker":
        store.delete(join(base_url, run, f"step-{step}", MARKER))
    if how == "bad-marker":
        store.write_bytes(join(base_url, run, f"step-{step}", MARKER), b"{not json")
    if how == "missing-file":
        store.delete(url)


# Every kind of damage on local files; the two main ones again over S3 (each S3 case costs
# a few round trips on this small machine).
CORRUPTIONS = [
    ("file", how) for how in ("flip", "truncate", "no-marker", "bad-marker", "missing-file")
]
CORRUPTIONS += [("s3", "flip"), ("s3", "no-marker")]


@pytest.mark.parametrize("backend, how", CORRUPTIONS)
def test_corrupt_newest_checkpoint_falls_back_to_previous(
    backend: str, how: str, request: pytest.FixtureRequest, tmp_path: Path, caplog
) -> None:
    if backend == "file":
        base_url = (tmp_path / "objects").as_uri()
    else:
        base_url = f"{request.getfixturevalue('moto_server').url}/ckpts"
    mgr = CheckpointManager(base_url, "run-c", keep_last=3)
    states = save_all(mgr, [1, 2, 3])
    mgr.close()
    corrupt(base_url, "run-c", 3, how)

    caplog.set_level(logging.WARNING, logger="training.checkpoint")
    loaded = CheckpointManager(base_url, "run-c").load_latest()
    assert loaded is not None and loaded["step"] == 2
    assert_state_equal(loaded, states[2])
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert f"{base_url}/run-c/step-3" in warnings[0].getMessage()


def test_every_checkpoint_corrupt_gives_none(base_url: str, caplog) -> None:
    mgr = CheckpointManager(base_url, "run-x")
    save_all(mgr, [1, 2])
    mgr.close()
    corrupt(base_url, "run-x", 1, "flip")
    corrupt(base_url, "run-x", 2, "no-marker")
    caplog.set_level(logging.WARNING, logger="training.checkpoint")
    assert CheckpointManager(base_url, "run-x").load_latest() is None
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2


def test_marker_write_failure_leaves_checkpoint_uncommitted(base_url: str, caplog) -> None:
    mgr = CheckpointManager(base_url, "run-m")
    save_all(mgr, [1])
    real_write = mgr.store.write_bytes

    def failing_write(url: str, data: bytes) -> None:
        if url.endswith(MARKER):
            raise OSError("injected: connection lost while writing the marker")
        real_write(url, data)

    mgr.store.write_bytes = failing_write  # type: ignore[method-assign]
    mgr.save(2, make_state(2))
    with pytest.raises(CheckpointError, match="injected"):
        mgr.close()
    store = store_for(base_url)
    assert store.exists(join(mgr.run_url, "step-2", STATE_FILE))  # data uploaded...
    assert not store.exists(join(mgr.run_url, "step-2", MARKER))  # ...but never committed
    assert mgr.latest_pointer()["step"] == 1  # latest moves only after a marker
    caplog.set_level(logging.WARNING, logger="training.checkpoint")
    assert CheckpointManager(base_url, "run-m").load_latest()["step"] == 1
    assert "no commit marker" in caplog.text and "step-2" in caplog.text


KILL_CHILD = textwrap.dedent(
    """
    import sys, time, torch
    from pathlib import Path
    from training.checkpoint import CheckpointManager
    from pipeline.storage import LocalStore

    base, flag = sys.argv[1], Path(sys.argv[2])
    mgr = CheckpointManager(base, "run-k")
    mgr.save(1, {"w": torch.full((1000,), 1.0)})
    mgr.wait()

    real_put = LocalStore.put_file
    def put_then_hang(self, local, key_url):
        real_put(self, local, key_url)   # state.pt is fully uploaded ...
        flag.write_text(key_url)         # ... tell the parent, then hang before the marker
        time.sleep(600)
    LocalStore.put_file = put_then_hang

    mgr.save(2, {"w": torch.full((1000,), 2.0)})
    time.sleep(600)
    """
)


def test_sigkill_during_upload_leaves_no_marker_and_resume_uses_previous(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = (tmp_path / "objects").as_uri()
    flag = tmp_path / "uploaded.flag"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen([sys.executable, "-c", KILL_CHILD, base, str(flag)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not flag.exists():
            assert child.poll() is None, f"child exited early with {child.returncode}"
            assert time.monotonic() < deadline, "child never reached the upload of step 2"
            time.sleep(0.05)
        child.send_signal(signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
    run_dir = tmp_path / "objects" / "run-k"
    assert (run_dir / "step-2" / STATE_FILE).exists()
    assert not (run_dir / "step-2" / MARKER).exists()
    assert json.loads((run_dir / "latest").read_text())["step"] == 1

    caplog.set_level(logging.WARNING, logger="training.checkpoint")
    mgr = CheckpointManager(base, "run-k")
    loaded = mgr.load_latest()
    assert loaded["step"] == 1 and torch.equal(loaded["w"], torch.full((1000,), 1.0))
    assert "step-2" in caplog.text

    # The resumed run saves step 2 again: it replaces the debris and commits normally.
    mgr.save(2, {"w": torch.full((1000,), 2.5)})
    mgr.close()
    again = CheckpointManager(base, "run-k").load_latest()
    assert again["step"] == 2 and torch.equal(again["w"], torch.full((1000,), 2.5))


def test_resaving_a_step_replaces_it(base_url: str) -> None:
    mgr = CheckpointManager(base_url, "run-r")
    mgr.save(3, {"w": torch.zeros(4)})
    mgr.save(3, {"w": torch.ones(4)})
    mgr.close()
    loaded = CheckpointManager(base_url, "run-r").load_latest()
    assert torch.equal(loaded["w"], torch.ones(4))


# ------------------------------------------------------------------------------ retention


def test_retention_keeps_last_k_and_the_best(base_url: str) -> None:
    mgr = CheckpointManager(base_url, "run-k2", keep_last=2)
    save_all(mgr, [1, 2, 3, 4, 5, 6], metrics=[0.1, 0.9, 0.3, 0.2, 0.4, 0.5])
    mgr.close()
    assert steps_in_storage(mgr) == [2, 5, 6]
    assert mgr.best_pointer() == {"step": 2, "url": f"{mgr.run_url}/step-2", "metric": 0.9}
    assert mgr.latest_pointer()["step"] == 6


def test_retention_with_keep_last_one_and_new_best(base_url: str) -> None:
    mgr = CheckpointManager(base_url, "run-k1", keep_last=1)
    save_all(mgr, [1, 2, 3], metrics=[0.5, 0.4, 0.7])
    mgr.close()
    assert steps_in_storage(mgr) == [3]  # step 3 is both the newest and the best
    assert mgr.best_pointer()["step"] == 3


def test_is_best_flag_overrides_metric_comparison(tmp_path: Path) -> None:
    mgr = CheckpointManager((tmp_path / "o").as_uri(), "run-f", keep_last=1)
    mgr.save(1, {"w": torch.zeros(1)}, metric=0.9)
    mgr.save(2, {"w": torch.zeros(1)}, metric=0.1, is_best=True)
    mgr.save(3, {"w": torch.zeros(1)}, metric=0.05)
    mgr.wait()
    assert steps_in_storage(mgr) == [2, 3]
    assert mgr.best_pointer()["step"] == 2
    # Without the flag, a higher metric than the best so far makes a new best.
    mgr.save(4, {"w": torch.zeros(1)}, metric=0.2)
    mgr.close()
    assert steps_in_storage(mgr) == [4]
    assert mgr.best_pointer() == {"step": 4, "url": f"{mgr.run_url}/step-4", "metric": 0.2}


def test_resumed_run_remembers_its_best(base_url: str) -> None:
    first = CheckpointManager(base_url, "run-b", keep_last=1)
    save_all(first, [1, 2], metrics=[0.8, 0.3])
    first.close()
    second = CheckpointManager(base_url, "run-b", keep_last=1)
    assert second.load_latest()["step"] == 2
    save_all(second, [3, 4], metrics=[0.5, 0.6])
    second.close()
    assert steps_in_storage(second) == [1, 4]
    assert second.best_pointer()["step"] == 1


def test_old_checkpoints_deleted_only_after_new_one_commits(tmp_path: Path) -> None:
    base = (tmp_path / "o").as_uri()
    mgr = CheckpointManager(base, "run-d", keep_last=1)
    save_all(mgr, [1])
    real_write = mgr.store.write_bytes

    def failing_marker(url: str, data: bytes) -> None:
        if url.endswith(MARKER):
            raise OSError("injected marker failure")
        real_write(url, data)

    mgr.store.write_bytes = failing_marker  # type: ignore[method-assign]
    mgr.save(2, make_state(2))
    with pytest.raises(CheckpointError):
        mgr.close()
    # Step 2 never committed, so step 1 (the only good one) must still be there.
    assert CheckpointManager(base, "run-d").load_latest()["step"] == 1


def test_corrupt_newer_checkpoints_are_cleaned_after_the_next_commit(tmp_path: Path) -> None:
    base = (tmp_path / "o").as_uri()
    mgr = CheckpointManager(base, "run-cl", keep_last=2)
    save_all(mgr, [1, 2, 3])
    mgr.close()
    corrupt(base, "run-cl", 3, "flip")
    resumed = CheckpointManager(base, "run-cl", keep_last=2)
    assert resumed.load_latest()["step"] == 2
    assert steps_in_storage(resumed) == [2, 3]  # keep_last=2 had already removed step 1
    resumed.save(2, make_state(2))  # the resumed run reaches step 2 again and commits it
    resumed.close()
    assert steps_in_storage(resumed) == [2]  # the corrupt step 3 is gone after that commit


# ------------------------------------------------------------------ errors surface later


def test_background_error_surfaces_at_next_save(moto_server, tmp_path: Path) -> None:
    mgr = CheckpointManager("s3://lt-no-such-bucket-abc/ckpts", "run-e", local_dir=tmp_path)
    url = mgr.save(1, make_state(1))  # returns: the upload runs in the background
    assert url == "s3://lt-no-such-bucket-abc/ckpts/run-e/step-1"
    with pytest.raises(CheckpointError, match="NoSuchBucket"):
        mgr.save(2, make_state(2))
    mgr.close()  # reported once, at the save


def test_background_error_surfaces_at_close(moto_server) -> None:
    mgr = CheckpointManager("s3://lt-no-such-bucket-abc/ckpts", "run-e2")
    mgr.save(1, make_state(1))
    mgr.wait()  # waiting alone never raises
    with pytest.raises(CheckpointError, match="lt-no-such-bucket-abc"):
        mgr.close()
    mgr.close()  # idempotent


def test_server_dying_mid_run_surfaces_at_close(
    private_moto_server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")  # boto3's own knob: fail fast on a dead endpoint
    mgr = CheckpointManager(f"{private_moto_server.url}/ckpts", "run-s", local_dir=tmp_path)
    mgr.save(1, make_state(1))
    mgr.wait()
    assert mgr.committed_steps() == [1]
    private_moto_server.process.stop(signal.SIGKILL)
    mgr.save(2, make_state(2))  # the local snapshot still works
    with pytest.raises(CheckpointError, match="step-2"):
        mgr.close()


def test_credentials_never_logged_during_checkpointing(
    moto_server, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    mgr = CheckpointManager(f"{moto_server.url}/c", "run-sec")
    save_all(mgr, [1, 2])
    mgr.close()
    CheckpointManager(f"{moto_server.url}/c", "run-sec").load_latest()
    bad = CheckpointManager("s3://lt-no-such-bucket-sec/c", "run-sec")
    bad.save(1, {"w": torch.zeros(1)})
    with pytest.raises(CheckpointError) as info:
        bad.close()
    out = capsys.readouterr()
    ours = "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("training"))
    assert "committed" in ours
    for text in (caplog.text, out.out, out.err, str(info.value)):
        assert TEST_SECRET_ACCESS_KEY not in text
    assert os.environ["AWS_ACCESS_KEY_ID"] not in ours  # our own loggers never name the key id


# ------------------------------------------------------------------------- ranks & extras


def test_only_rank_zero_writes(base_url: str, tmp_path: Path) -> None:
    other = CheckpointManager(base_url, "run-rk", rank=1)
    url = other.save(7, make_state(7))
    assert url == f"{base_url}/run-rk/step-7"
    assert other.write_result({"status": "x"}) is None
    src = tmp_path / "plot.png"
    src.write_bytes(b"png")
    assert other.upload_file("plot.png", src) is None
    other.close()
    assert store_for(base_url).list(join(base_url, "run-rk")) == []

    writer = CheckpointManager(base_url, "run-rk", rank=0)
    states = save_all(writer, [7])
    writer.close()
    loaded = CheckpointManager(base_url, "run-rk", rank=1).load_latest()  # every rank reads
    assert_state_equal(loaded, states[7])


def test_results_and_files_beside_checkpoints(base_url: str, tmp_path: Path) -> None:
    mgr = CheckpointManager(base_url, "run-o")
    assert mgr.read_result() is None
    result = {"status": "succeeded", "best_metric": 0.97, "steps": 120}
    assert mgr.write_result(result) == f"{base_url}/run-o/result.json"
    assert mgr.read_result() == result
    plot = tmp_path / "loss.png"
    plot.write_bytes(b"\x89PNG fake")
    assert mgr.upload_file("loss.png", plot) == f"{base_url}/run-o/loss.png"
    assert store_for(base_url).read_bytes(f"{base_url}/run-o/loss.png") == b"\x89PNG fake"
    for bad in ("step-3/x", "../escape", "latest", ""):
        with pytest.raises(ValueError):
            mgr.upload_file(bad, plot)
    mgr.close()


def test_commit_and_delete_hooks(tmp_path: Path) -> None:
    committed, deleted = [], []

    def on_commit(info):
        committed.append((info["step"], info["is_best"]))
        if info["step"] == 2:
            raise RuntimeError("metadata store down")  # logged, not fatal

    mgr = CheckpointManager(
        (tmp_path / "o").as_uri(),
        "run-h",
        keep_last=1,
        on_commit=on_commit,
        on_delete=lambda step, url: deleted.append(step),
    )
    save_all(mgr, [1, 2, 3], metrics=[0.9, 0.1, 0.2])
    mgr.close()
    assert committed == [(1, True), (2, False), (3, False)]
    assert deleted == [2]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"base_url": "http://x/y", "run_id": "r"}, "base_url"),
        ({"base_url": "file:///tmp/x", "run_id": "a/b"}, "run_id"),
        ({"base_url": "file:///tmp/x", "run_id": ""}, "run_id"),
        ({"base_url": "file:///tmp/x", "run_id": "r", "keep_last": 0}, "keep_last"),
        ({"base_url": "file:///tmp/x", "run_id": "r", "rank": -1}, "rank"),
    ],
)
def test_bad_arguments_name_the_field(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        CheckpointManager(**kwargs)


def test_bad_save_arguments(tmp_path: Path) -> None:
    mgr = CheckpointManager((tmp_path / "o").as_uri(), "r")
    with pytest.raises(ValueError, match="step"):
        mgr.save(-1, {})
    with pytest.raises(TypeError, match="dict"):
        mgr.save(1, [1, 2])  # type: ignore[arg-type]
    mgr.close()
    with pytest.raises(CheckpointError, match="close"):
        mgr.save(1, {})


# ------------------------------------------------------- best pointer, unusable, fresh start


@pytest.mark.parametrize("how", ["flip", "no-marker", "deleted"])
def test_a_bad_best_pointer_falls_back_to_the_best_valid_checkpoint(
    base_url: str, how: str, caplog
) -> None:
    mgr = CheckpointManager(base_url, "run-bp", keep_last=3)
    save_all(mgr, [1, 2, 3], metrics=[0.5, 0.9, 0.7])
    mgr.close()
    assert mgr.best_pointer()["step"] == 2
    if how == "deleted":
        store_for(base_url).delete_prefix(join(base_url, "run-bp", "step-2"))
    else:
        corrupt(base_url, "run-bp", 2, how)
    caplog.set_level(logging.WARNING, logger="training.checkpoint")
    fresh = CheckpointManager(base_url, "run-bp")
    best = fresh.best_pointer()
    assert best == {"step": 3, "url": f"{fresh.run_url}/step-3", "metric": 0.7}
    assert any("best pointer" in r.getMessage() for r in caplog.records)
    # The pointer itself was rewritten, so a plain read now agrees.
    assert json.loads(fresh.store.read_bytes(join(fresh.run_url, "best")))["step"] == 3


def test_a_bad_best_pointer_with_no_other_metric_is_removed(base_url: str) -> None:
    mgr = CheckpointManager(base_url, "run-bq", keep_last=2)
    save_all(mgr, [1, 2], metrics=[0.8, None])
    mgr.close()
    corrupt(base_url, "run-bq", 1, "flip")
    fresh = CheckpointManager(base_url, "run-bq")
    assert fresh.best_pointer() is None
    assert not fresh.store.exists(join(fresh.run_url, "best"))


def test_a_stale_best_does_not_outrank_new_checkpoints_after_resume(tmp_path: Path) -> None:
    base = (tmp_path / "o").as_uri()
    first = CheckpointManager(base, "run-bs", keep_last=1)
    save_all(first, [1, 2], metrics=[0.99, 0.1])
    first.close()
    corrupt(base, "run-bs", 1, "flip")  # the best checkpoint went bad in storage
    second = CheckpointManager(base, "run-bs", keep_last=1)
    assert second.load_latest()["step"] == 2
    save_all(second, [3], metrics=[0.5])
    second.close()
    assert second.best_pointer()["step"] == 3  # not the corrupt step 1 with its 0.99
    assert 1 not in steps_in_storage(second)  # and retention no longer keeps it


def test_unusable_tells_a_run_whose_checkpoints_are_all_bad_from_a_fresh_run(
    tmp_path: Path,
) -> None:
    base = (tmp_path / "o").as_uri()
    fresh = CheckpointManager(base, "run-new")
    assert fresh.load_latest() is None and not fresh.unusable and fresh.skipped == []

    mgr = CheckpointManager(base, "run-u", keep_last=2)
    save_all(mgr, [1, 2])
    mgr.close()
    corrupt(base, "run-u", 1, "flip")
    corrupt(base, "run-u", 2, "no-marker")
    again = CheckpointManager(base, "run-u")
    assert again.load_latest() is None and again.unusable
    assert [(s["step"], s["reason"].split()[0]) for s in again.skipped] == [
        (2, "has"),
        (1, "is"),
    ]
    # Every step folder deleted, only the pointers left: the checkpoints are missing.
    store_for(base).delete_prefix(join(base, "run-u", "step-1"))
    store_for(base).delete_prefix(join(base, "run-u", "step-2"))
    gone = CheckpointManager(base, "run-u")
    assert gone.load_latest() is None and gone.unusable and gone.skipped == []
    assert gone.pointers_found == ["latest"]  # the best pointer had no metric to point at


def test_start_fresh_ignores_old_checkpoints_and_removes_them_after_the_first_commit(
    tmp_path: Path,
) -> None:
    base = (tmp_path / "o").as_uri()
    old = CheckpointManager(base, "run-f", keep_last=2)
    save_all(old, [10, 20], metrics=[0.9, 0.95])
    old.close()
    new = CheckpointManager(base, "run-f", keep_last=2)
    assert new.start_fresh() == 2
    assert new.best_pointer() is None  # the old best no longer counts
    assert steps_in_storage(new) == [10, 20]  # nothing deleted before a new checkpoint exists
    save_all(new, [1], metrics=[0.3])
    new.close()
    assert steps_in_storage(new) == [1]
    assert new.best_pointer()["step"] == 1
    assert CheckpointManager(base, "run-f").load_latest()["step"] == 1

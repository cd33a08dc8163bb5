"""training/torchrun.py without processes: how many workers a run wants, and how their exit codes
become the run's."""

from __future__ import annotations

import pytest

from training.config import build_config
from training.torchrun import EXIT_DIR_ENV, combined_exit_code, processes_wanted, record_exit_code


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([0, 0], 0),
        ([75, 75], 75),
        ([75, 0], 75),  # one rank had finished its last step when the stop came
        ([3, 1], 3),  # rank 0 refused the data; rank 1 was torn down
        ([1, 2], 2),
        ([75, 1], 1),  # a crash is not a clean preemption
        ([0, -9], 1),
        ([], 1),
    ],
)
def test_combined_exit_code(codes: list[int], expected: int) -> None:
    assert combined_exit_code(codes) == expected


def test_processes_wanted(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from training.config import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert processes_wanted(build_config({"nproc": "3"})) == 3  # gloo processes
    assert processes_wanted(build_config({})) == 1
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert processes_wanted(build_config({})) == 4  # one per visible GPU
    assert processes_wanted(build_config({"device": "cpu"})) == 1
    assert processes_wanted(build_config({"device": "cpu", "nproc": "8"})) == 8
    assert processes_wanted(build_config({"nproc": "2"})) == 2
    with pytest.raises(ConfigError, match="TRAIN_NPROC / nproc: 5 processes, but 4 GPU"):
        processes_wanted(build_config({"nproc": "5"}))


def test_a_worker_records_its_exit_code_only_under_the_launcher(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EXIT_DIR_ENV, str(tmp_path))
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    record_exit_code(3)  # a plain run: nothing to tell
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    record_exit_code(75)
    assert (tmp_path / "1").read_text() == "75" and len(list(tmp_path.iterdir())) == 1
    monkeypatch.setenv(EXIT_DIR_ENV, str(tmp_path / "gone"))  # the launcher died with it
    record_exit_code(1)  # no error: nobody is left to tell

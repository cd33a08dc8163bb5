"""``laketrain train --command "…"``: a user's own trainer (tests/orchestration/user_trainer.py,
a real subprocess) gets the full environment contract, is recorded like a train DAG run, and
a SIGTERM'd run resumes when it is run again with the same RUN_ID."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pipeline.orchestration.env_contract import TrainerEnv

from .test_dag_runs import write_digits_subset

REPO = Path(__file__).resolve().parents[2]
LAKETRAIN = str(Path(sys.executable).with_name("laketrain"))
USER = "python tests/orchestration/user_trainer.py"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A lake with a small digits version, and the environment the CLI runs with: the project
    root (LAKETRAIN_HOME) is the repository, so relative command paths resolve there."""
    root = tmp_path_factory.mktemp("usercmd")
    env = {
        **{
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW", "AWS_", "TRAIN_", "DATASET_", "RUN_ID"))
        },
        "LAKETRAIN_HOME": str(REPO),
        "LAKE_DIR": str(root / "lake"),
        "DATA_ROOT": str(root / "data"),
        "CHECKPOINT_URL": (root / "objects").as_uri(),
        "METADATA_DB_URL": f"sqlite:///{root / 'metadata.db'}",
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
    }
    write_digits_subset(root / "lake", per_class=2)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        from pipeline.settings import get_settings

        get_settings.cache_clear()
        from pipeline.datasets.build import build

        version = build("digits")
        get_settings.cache_clear()
    assert version is not None
    return {"root": root, "env": env, "version_id": version.version_id}


def cli(home: dict, *args: str, **user_env: str) -> subprocess.CompletedProcess:
    """``laketrain train --dataset digits ARGS``; ``user_env`` goes in as ``--env`` flags (the
    command's environment is built from scratch: the CLI's own variables do not leak in)."""
    flags = [x for k, v in user_env.items() for x in ("--env", f"{k}={v}")]
    return subprocess.run(
        [LAKETRAIN, "train", "--dataset", "digits", *args, *flags],
        env=home["env"],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=home["root"],
    )


def run_row(home: dict, run_id: str) -> dict:
    from pipeline.metadata.store import open_store
    from pipeline.runs import get_run

    row = get_run(run_id, store=open_store(home["env"]["METADATA_DB_URL"]))
    assert row is not None, run_id
    return row


def contract_line(stdout: str) -> dict:
    line = next(x for x in stdout.splitlines() if x.startswith("CONTRACT "))
    return json.loads(line.removeprefix("CONTRACT "))


def test_a_user_command_gets_the_contract_and_is_recorded(home: dict) -> None:
    proc = cli(
        home, "--command", USER, "--run-id", "u-ok", "--epochs", "2", "--env", "USER_FLAG=on"
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = contract_line(proc.stdout)
    # DATASET_VERSION is the id, resolved before launch (the flag said "latest")
    assert seen["DATASET_VERSION"] == home["version_id"]
    assert (seen["DATASET_NAME"], seen["RUN_ID"], seen["DATA_ROOT"]) == (
        "digits",
        "u-ok",
        home["env"]["DATA_ROOT"],
    )
    assert seen["CHECKPOINT_URL"] == home["env"]["CHECKPOINT_URL"]
    assert seen["TRAIN"]["TRAIN_EPOCHS"] == "2" and seen["TRAIN"]["TRAIN_LR"] == "0.003"
    assert seen["TRAIN"]["TRAIN_DEVICE"] == "cpu"  # --gpus defaults to 0 here
    assert seen["USER_FLAG"] == "on"
    assert seen["cwd"] == str(REPO)  # run from the project root
    assert "RUN_ID=u-ok" in proc.stderr
    row = run_row(home, "u-ok")
    assert (row["status"], row["launcher"], row["version_id"]) == (
        "succeeded",
        "local",
        home["version_id"],
    )
    assert row["params"]["command"] == USER and row["params"]["env"] == {"USER_FLAG": "on"}
    assert row["best_metric"] == 0.5 and row["checkpoint_url"].endswith("/u-ok/step.json")


def test_sigterm_stops_the_command_and_the_same_run_id_resumes_it(home: dict) -> None:
    proc = subprocess.Popen(
        [LAKETRAIN, "train", "--dataset", "digits", "--command", USER, "--run-id", "u-resume"]
        + ["--env", "USER_STEPS=4", "--env", "USER_PAUSE_AT=2"],
        env=home["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=home["root"],
    )
    # One reader per pipe, each to EOF: communicate() beside a reader thread would race it for
    # stdout's last lines (seen in CI: the "stopped after" line went to communicate()).
    lines: list[str] = []
    errors: list[str] = []
    readers = [
        threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, ""))),
        threading.Thread(target=lambda: errors.extend(iter(proc.stderr.readline, ""))),
    ]
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + 120
    while not any(line.startswith("PAUSED step=2") for line in list(lines)):
        assert time.monotonic() < deadline and proc.poll() is None, lines
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)  # what Airflow sends a task it stops
    proc.wait(timeout=120)
    for reader in readers:
        reader.join(timeout=30)
    out, err = "".join(lines), "".join(errors)
    assert proc.returncode == 75, out + err
    assert "stopped after step 2: checkpoint saved" in out
    assert run_row(home, "u-resume")["status"] == "preempted"

    again = cli(home, "--command", USER, "--run-id", "u-resume", USER_STEPS="4")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "resumed from step 2" in again.stdout
    steps_log = Path(home["root"], "objects", "u-resume", "steps.log").read_text().split()
    assert steps_log == ["1", "2", "3", "4"]  # no step repeated or skipped
    row = run_row(home, "u-resume")
    assert row["status"] == "succeeded" and row["attempts"] == 2


def test_no_result_json_records_the_exit_status_and_says_the_result_was_missing(
    home: dict,
) -> None:
    failed = cli(home, "--command", USER, "--run-id", "u-nores", USER_NO_RESULT="1", USER_EXIT="4")
    assert failed.returncode == 4
    row = run_row(home, "u-nores")
    assert row["status"] == "failed"
    assert f"{USER}: exited with code 4" in row["error"]
    assert "no result.json at " in row["error"] and "recorded from the exit status" in row["error"]

    ok = cli(home, "--command", USER, "--run-id", "u-nores-ok", USER_NO_RESULT="1")
    assert ok.returncode == 0
    row = run_row(home, "u-nores-ok")
    assert row["status"] == "succeeded"
    assert [e["level"] for e in row["events"]] == ["WARNING"]
    assert "no result.json" in row["events"][0]["message"]


def test_a_command_that_is_not_found_fails_with_exit_127_saying_so(home: dict) -> None:
    proc = cli(home, "--command", "no-such-trainer-xyz --fast", "--run-id", "u-missing")
    assert proc.returncode == 127
    assert "command not found: 'no-such-trainer-xyz' (exit 127)" in proc.stdout
    row = run_row(home, "u-missing")
    assert row["status"] == "failed"
    assert "command not found: 'no-such-trainer-xyz' (exit 127)" in row["error"]


def test_a_command_exiting_127_is_reported_as_not_found(home: dict) -> None:
    proc = cli(home, "--command", "sh -c 'exit 127'", "--run-id", "u-127")
    assert proc.returncode == 127
    assert "command not found: 'sh' (exit 127)" in proc.stdout
    assert "command not found" in run_row(home, "u-127")["error"]


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("AWS_SECRET_ACCESS_KEY=x", "env: AWS_SECRET_ACCESS_KEY is part of the environment"),
        ("RUN_ID=other", "env: RUN_ID is part of the environment contract"),
        ("lower=x", "env: variable names must match [A-Z_][A-Z0-9_]*"),
        ("TRAIN_EPOCHS=9", "env: TRAIN_EPOCHS is set from the form's 'epochs' field"),
    ],
)
def test_an_env_that_would_override_the_contract_is_refused(
    home: dict, flag: str, needle: str
) -> None:
    proc = cli(home, "--command", USER, "--run-id", "u-env", "--env", flag)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr


def test_docker_run_for_an_image_has_the_launchers_mounts_and_no_secret_values() -> None:
    from pipeline.orchestration.user_run import docker_run_argv

    env = TrainerEnv(
        public={
            "PATH": "/usr/bin",
            "DATASET_NAME": "digits",
            "DATA_ROOT": "/srv/data",
            "CHECKPOINT_URL": "file:///srv/ck",
            "RUN_ID": "r9",
        },
        secret={"AWS_SECRET_ACCESS_KEY": "s3cr3t"},
    )
    argv = docker_run_argv(
        env,
        image="team/trainer:7",
        command=["python", "train.py", "--fast"],
        run_id="r9",
        gpus=2,
        host_data_root="/host/data",
        checkpoint_url="file:///srv/ck",
    )
    assert argv == [
        "docker", "run", "--rm", "--name", "laketrain-r9", "--shm-size", "2g",
        "-v", "/host/data:/data:ro", "-v", "/srv/ck:/checkpoints", "--gpus", "2",
        "-e", "AWS_SECRET_ACCESS_KEY", "-e", "CHECKPOINT_URL", "-e", "DATASET_NAME",
        "-e", "DATA_ROOT", "-e", "RUN_ID",
        "--entrypoint", "python", "team/trainer:7", "train.py", "--fast",
    ]  # fmt: skip
    assert "s3cr3t" not in " ".join(argv)


def test_image_runs_docker_with_the_contract_passed_by_name(home: dict, tmp_path: Path) -> None:
    """--image: `docker run` (here a stand-in `docker` first on PATH, no daemon needed) gets the
    mounts, the image and the command; the values reach it through its environment only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "docker"
    fake.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys\n"
        "names = [sys.argv[i + 1] for i, a in enumerate(sys.argv) if a == '-e']\n"
        "print('DOCKER ' + json.dumps({'argv': sys.argv[1:],"
        " 'env': {n: os.environ.get(n) for n in names}}))\n"
    )
    fake.chmod(0o755)
    env = {**home["env"], "PATH": f"{bin_dir}:{home['env']['PATH']}"}
    proc = subprocess.run(
        [LAKETRAIN, "train", "--dataset", "digits", "--image", "team/trainer:7"]
        + ["--command", "python train.py --fast", "--run-id", "u-docker", "--gpus", "-1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=home["root"],
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("DOCKER "))
    seen = json.loads(line.removeprefix("DOCKER "))
    argv = seen["argv"]
    assert argv[:2] == ["run", "--rm"]
    assert argv[-5:] == ["--entrypoint", "python", "team/trainer:7", "train.py", "--fast"]
    assert f"{home['env']['DATA_ROOT']}:/data:ro" in argv and "--gpus" in argv
    assert argv[argv.index("--gpus") + 1] == "all"
    assert seen["env"]["DATA_ROOT"] == "/data"
    assert seen["env"]["CHECKPOINT_URL"] == "file:///checkpoints"
    assert seen["env"]["DATASET_VERSION"] == home["version_id"]
    assert seen["env"]["RUN_ID"] == "u-docker" and seen["env"]["LAKETRAIN_LAUNCHER"] == "docker"
    assert "METADATA_DB_URL" not in seen["env"]  # a host SQLite file is not reachable there
    row = run_row(home, "u-docker")
    assert (row["launcher"], row["params"]["image"]) == ("docker", "team/trainer:7")

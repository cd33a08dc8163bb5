"""``dag.test()`` runs of lake_ingest and train on a temporary lake: real scan, build, trainer
process and metadata store (SQLite here; the end-to-end test uses PostgreSQL). One subprocess
runs the whole sequence, since Airflow reads AIRFLOW_HOME once per process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Slow: one subprocess runs 13 dag.test() runs, trainers included (28-67 s by machine).
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
USER_TRAINER = Path(__file__).with_name("user_trainer.py")
FAST_TRAIN = {
    "dataset": "digits",
    "epochs": 1,
    "batch_size": 16,
    "model": "mlp",
    "gpus": 0,
    "seed": 1,
}
USER_TRAIN = {**FAST_TRAIN, "dataset_version": "latest"}


def write_digits_subset(lake: Path, per_class: int) -> int:
    import numpy as np
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    count: dict[int, int] = {}
    for i, (image, label) in enumerate(zip(digits.images, digits.target, strict=True)):
        label = int(label)
        if count.get(label, 0) >= per_class:
            continue
        count[label] = count.get(label, 0) + 1
        folder = lake / "digits" / str(label)
        folder.mkdir(parents=True, exist_ok=True)
        pixels = np.clip(image * (255.0 / 16.0), 0, 255).astype("uint8")
        Image.fromarray(pixels, mode="L").save(folder / f"{i:04d}.png")
    return sum(count.values())


@pytest.fixture(scope="module")
def dag_runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("dagtest")
    lake = home / "lake"
    files = write_digits_subset(lake, per_class=6)
    (lake / "digits" / "3" / "broken.png").write_bytes(b"not a png at all")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "AWS_"))},
        "LAKETRAIN_HOME": str(home),
        "LAKE_DIR": str(lake),
        "DATA_ROOT": str(home / "data"),
        "CHECKPOINT_URL": (home / "objects").as_uri(),
        "METADATA_DB_URL": f"sqlite:///{home / 'metadata.db'}",
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
        "PYTHONPATH": str(REPO),
    }
    spec = {
        "home": str(home),
        "runs": [
            ["lake_ingest", None, "ingest"],
            ["lake_ingest", None, "ingest-again"],
            ["train", FAST_TRAIN, "train"],
            [
                "train",
                {**FAST_TRAIN, "dataset_version": "digits_v19990101_deadbeef"},
                "train-missing-version",
            ],
            ["train", {**FAST_TRAIN, "epochs": 0}, "train-bad-conf"],
            # Over REST this returned 200 and trained with the default 3 epochs.
            ["train", {**FAST_TRAIN, "epoch": 2}, "train-typo-key"],
            ["train", {**FAST_TRAIN, "gpus": -2}, "train-gpus-minus-2"],
            ["train", {**FAST_TRAIN, "dataset": "photos"}, "train-unlabelled"],
            # A user's own trainer (a real script reading the contract) through the form's fields.
            # dataset_version explicit: dag.test() in one process keeps the conf of an earlier
            # run (train-missing-version) in the DAG's params.
            [
                "train",
                {**USER_TRAIN, "command": f"python {USER_TRAINER}", "env": {"USER_FLAG": "dag"}},
                "train-user-command",
            ],
            [
                "train",
                {**USER_TRAIN, "command": f"python {USER_TRAINER}", "env": {"USER_NO_RESULT": "1"}},
                "train-user-no-result",
            ],
            ["train", {**USER_TRAIN, "command": "no-such-trainer-xyz"}, "train-user-not-found"],
            ["train", {**USER_TRAIN, "env": {"DATA_ROOT": "/elsewhere"}}, "train-env-refused"],
            ["lake_ingest", {"dataset": "../x"}, "ingest-with-conf"],
        ],
    }
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("run_dags.py")), json.dumps(spec)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=home,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, (out.stdout[-3000:], out.stderr[-5000:])
    result = json.loads(lines[-1].removeprefix("RESULT "))
    result["by_label"] = {r["label"]: r for r in result["runs"]}
    # Task logs go to the process's stdout/stderr (structlog), not only to the redirected buffer.
    result["env"], result["files"], result["stderr"] = env, files, out.stdout + out.stderr
    return result


def store_env(dag_runs: dict, monkeypatch: pytest.MonkeyPatch):
    from pipeline.metadata.store import open_store
    from pipeline.settings import get_settings

    for key in (
        "METADATA_DB_URL",
        "DATA_ROOT",
        "LAKE_DIR",
        "CHECKPOINT_URL",
        "LAKETRAIN_HOME",
        "RECIPES_DIR",
    ):
        monkeypatch.setenv(key, dag_runs["env"][key])
    get_settings.cache_clear()
    return open_store(dag_runs["env"]["METADATA_DB_URL"])


def test_ingest_builds_a_version_and_announces_it(
    dag_runs: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert dag_runs["import_errors"] == {}
    run = dag_runs["by_label"]["ingest"]
    assert run["state"] == "success", run["tasks"]
    assert any(k.startswith("process[") for k in run["tasks"])
    events = [e for e in run["events"] if e["uri"].startswith("laketrain://datasets/")]
    assert [e["uri"] for e in events] == ["laketrain://datasets/digits"]
    extra = events[0]["extra"]
    assert set(extra) >= {"dataset", "version_id", "tag", "samples", "added", "removed"}
    assert (extra["dataset"], extra["samples"], extra["added"], extra["removed"]) == (
        "digits",
        dag_runs["files"],
        dag_runs["files"],
        0,
    )
    store = store_env(dag_runs, monkeypatch)
    from pipeline.datasets.queries import list_versions

    versions = list_versions("digits", store=store)
    assert [v["version_id"] for v in versions] == [extra["version_id"]]


def test_ingest_log_shows_the_scan_summary_and_the_invalid_file(dag_runs: dict) -> None:
    log = dag_runs["by_label"]["ingest"]["log"] + dag_runs["stderr"]
    assert "scan summary:" in log
    assert "digits/3/broken.png" in log
    assert "XCom not found" not in log  # no error lines for nothing


def test_a_second_ingest_with_no_change_publishes_nothing(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["ingest-again"]
    assert run["state"] == "success", run["tasks"]
    assert not [e for e in run["events"] if e["uri"].startswith("laketrain://datasets/")]
    assert not any(k.startswith("process[") and v == "success" for k, v in run["tasks"].items())


def test_train_runs_the_trainer_and_records_lineage(
    dag_runs: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = dag_runs["by_label"]["train"]
    assert run["state"] == "success", (run["tasks"], run["log"][-3000:])
    version_id = dag_runs["by_label"]["ingest"]["events"][0]["extra"]["version_id"]
    store = store_env(dag_runs, monkeypatch)
    from pipeline.orchestration.env_contract import sanitize_run_id
    from pipeline.runs import runs_for_version

    # the runs of the user-command cases below are on the same version: this one's is one row
    runs = runs_for_version(version_id, store=store)
    mine = [r for r in runs if r["run_id"] == sanitize_run_id("train", run["run_id"])]
    assert len(mine) == 1
    row = mine[0]
    assert (row["status"], row["dag_id"], row["dag_run_id"], row["launcher"]) == (
        "succeeded",
        "train",
        run["run_id"],
        "local",
    )
    assert row["params"]["epochs"] == 1 and row["params"]["model"] == "mlp"
    assert row["checkpoint_url"].startswith(
        dag_runs["env"]["CHECKPOINT_URL"] + "/" + row["run_id"] + "/"
    )
    result = Path(dag_runs["env"]["DATA_ROOT"]).parent / "objects" / row["run_id"] / "result.json"
    assert json.loads(result.read_text())["status"] == "succeeded"
    models = [e for e in run["events"] if e["uri"] == "laketrain://models/digits"]
    assert len(models) == 1 and models[0]["extra"]["version_id"] == version_id
    assert models[0]["extra"]["run_id"] == row["run_id"]


def test_train_on_a_missing_version_fails_clearly(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["train-missing-version"]
    assert run["state"] == "failed"
    assert run["tasks"]["resolve[-1]"] == "failed"
    assert run["tasks"]["launch[-1]"] == "upstream_failed"
    assert "digits_v19990101_deadbeef" in run["log"] + dag_runs["stderr"]
    assert "dataset_version:" in run["log"] + dag_runs["stderr"]


def test_train_refuses_a_bad_conf_before_running(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["train-bad-conf"]
    assert (
        run["state"] is None and "ParamValidationError" in run["error"] and "epochs" in run["error"]
    )


def test_train_with_a_typo_key_fails_at_resolve_listing_the_allowed_keys(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["train-typo-key"]
    assert run["state"] == "failed", run["tasks"]
    assert run["tasks"]["resolve[-1]"] == "failed"
    assert run["tasks"]["launch[-1]"] == "upstream_failed"
    log = run["log"] + dag_runs["stderr"]
    assert "unknown conf key(s) 'epoch' (did you mean 'epochs'?)" in log
    assert "allowed keys: dataset, dataset_version, epochs, batch_size, lr" in log


def test_gpus_minus_two_is_refused_naming_the_field(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["train-gpus-minus-2"]
    assert run["state"] is None and "ParamValidationError" in run["error"], run
    assert "-2" in run["error"] and "gpus" in run["error"]


def test_an_unlabelled_dataset_is_not_a_choice_of_the_train_form(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["train-unlabelled"]
    assert run["state"] is None and "ParamValidationError" in run["error"], run
    assert "'photos' is not one of ['digits']" in run["error"]


def test_the_ingest_refuses_a_conf_it_would_ignore(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["ingest-with-conf"]
    assert run["state"] == "failed", run["tasks"]
    assert run["tasks"]["scan[-1]"] == "failed"
    log = run["log"] + dag_runs["stderr"]
    assert "lake_ingest: unknown conf key(s) 'dataset'" in log


def run_record(dag_runs: dict, label: str, monkeypatch: pytest.MonkeyPatch) -> dict:
    from pipeline.orchestration.env_contract import sanitize_run_id
    from pipeline.runs import get_run

    store = store_env(dag_runs, monkeypatch)
    row = get_run(sanitize_run_id("train", dag_runs["by_label"][label]["run_id"]), store=store)
    assert row is not None, label
    return row


def test_a_users_command_runs_with_the_contract_and_is_recorded(
    dag_runs: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = dag_runs["by_label"]["train-user-command"]
    assert run["state"] == "success", (run["tasks"], run["log"][-3000:])
    log = run["log"] + dag_runs["stderr"]
    line = next(x for x in log.splitlines() if "CONTRACT {" in x)
    seen = json.loads(line.split("CONTRACT ", 1)[1])
    version_id = dag_runs["by_label"]["ingest"]["events"][0]["extra"]["version_id"]
    row = run_record(dag_runs, "train-user-command", monkeypatch)
    assert seen["DATASET_VERSION"] == version_id  # resolved to the id before launch
    assert (seen["RUN_ID"], seen["USER_FLAG"]) == (row["run_id"], "dag")
    assert seen["TRAIN"]["TRAIN_EPOCHS"] == "1" and seen["TRAIN"]["TRAIN_DEVICE"] == "cpu"
    assert seen["cwd"] == dag_runs["env"]["LAKETRAIN_HOME"]  # the project root
    assert (row["status"], row["launcher"], row["best_metric"]) == ("succeeded", "local", 0.5)
    assert row["params"]["command"] == f"python {USER_TRAINER}"
    assert [e["uri"] for e in run["events"]] == ["laketrain://models/digits"]


def test_a_command_without_result_json_is_recorded_from_its_exit_status(
    dag_runs: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = dag_runs["by_label"]["train-user-no-result"]
    assert run["state"] == "success", (run["tasks"], run["log"][-3000:])
    row = run_record(dag_runs, "train-user-no-result", monkeypatch)
    assert row["status"] == "succeeded"
    assert [e["level"] for e in row["events"]] == ["WARNING"]
    assert "exit code 0; no result.json at " in row["events"][0]["message"]
    assert "no result.json at " in run["log"] + dag_runs["stderr"]


def test_a_command_not_found_fails_with_exit_127_in_the_log_and_on_the_run(
    dag_runs: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = dag_runs["by_label"]["train-user-not-found"]
    assert run["state"] == "failed", run["tasks"]
    assert run["tasks"]["launch[-1]"] == "failed"
    assert run["tasks"]["record_result[-1]"] == "failed"
    log = run["log"] + dag_runs["stderr"]
    assert "error: command not found: 'no-such-trainer-xyz' (exit 127)" in log
    row = run_record(dag_runs, "train-user-not-found", monkeypatch)
    assert row["status"] == "failed"
    assert "command not found: 'no-such-trainer-xyz' (exit 127)" in row["error"]
    assert "no result.json" in row["error"]


def test_an_env_overriding_the_contract_is_refused_at_resolve(dag_runs: dict) -> None:
    run = dag_runs["by_label"]["train-env-refused"]
    assert run["state"] == "failed", run["tasks"]
    assert run["tasks"]["resolve[-1]"] == "failed"
    assert run["tasks"]["launch[-1]"] == "upstream_failed"
    assert "env: DATA_ROOT is part of the environment contract" in run["log"] + dag_runs["stderr"]

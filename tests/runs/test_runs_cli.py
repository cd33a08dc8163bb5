"""``laketrain runs / run / compare / models / promote / reproduce / lineage`` on both backends,
over real CPU training runs (``laketrain train --command "python -m training"`` through the
entry point: the built-in trainer under the local launcher) on real versions. The commands that
only read or write the store run in this process (``cli``); the exit codes a caller acts on and
every launch (train, reproduce) go through the ``laketrain`` script."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from .conftest import REPO, TRAIN_FLAGS, cli, laketrain

# Slow: the module fixture trains five runs through the entry point (30-75 s by machine).
pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]


def train(home: dict, run_id: str, version: str, *extra: str, check: bool = True) -> Any:
    return laketrain(
        home["env"],
        "train",
        "--command",
        "python -m training",
        "--dataset",
        "digits",
        "--version",
        version,
        "--run-id",
        run_id,
        *TRAIN_FLAGS,
        *extra,
        check=check,
    )


def show(home: dict, ref: str) -> dict:
    return json.loads(cli(home["env"], "run", ref, "--json").stdout)


@pytest.fixture(scope="module")
def trained(runs_home: dict) -> dict:
    """ok: v1, seed 3; v2run: v2, another lr; bad: a config error (exit 2); retry: failed,
    then run again under the same RUN_ID and succeeded."""
    v1, v2 = runs_home["v1"]["version_id"], runs_home["v2"]["version_id"]
    train(runs_home, "ok", v1[:10], "--seed", "3")
    train(runs_home, "v2run", v2, "--seed", "3", "--lr", "0.01")
    bad = train(runs_home, "bad", v1, "--env", "TRAIN_NOPE=1", check=False)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    first = train(runs_home, "retry", v1, "--env", "TRAIN_NOPE=1", check=False)
    assert first.returncode == 2
    train(runs_home, "retry", v1)
    return runs_home


def test_a_local_run_records_everything_that_reproduces_it(trained: dict) -> None:
    row = show(trained, "ok")
    v1 = trained["v1"]
    assert row["status"] == "succeeded" and row["launcher"] == "local"
    assert row["name"] == f"digits-{v1['version_id'][:8]}-1"
    assert row["version_id"] == v1["version_id"] and row["version_tag"] == v1["tag"]
    assert row["manifest_sha256"] == row["version"]["manifest_sha256"]
    manifest = Path(trained["env"]["DATA_ROOT"]) / v1["path"] / "manifest.json"
    assert row["manifest_sha256"] == hashlib.sha256(manifest.read_bytes()).hexdigest()
    assert row["command"] == ["python", "-m", "training"]
    assert row["config"]["seed"] == 3 and row["config"]["model"] == "mlp"
    assert row["params"]["env"] == {"OMP_NUM_THREADS": "1"}
    assert row["code_version"]["source"] == "git" and len(row["code_version"]["commit"]) == 40
    lock = (REPO / "requirements.lock").read_bytes()
    assert row["lock_sha256"] == hashlib.sha256(lock).hexdigest()
    assert row["started_at"] and row["finished_at"] and row["duration_s"] > 0
    assert row["metric_name"] == "val_accuracy" and row["best_metric"] is not None
    [attempt] = row["attempt_log"]
    assert (attempt["n"], attempt["exit_code"], attempt["error"]) == (1, 0, None)
    assert row["checkpoints"] and all(c["url"].startswith("file://") for c in row["checkpoints"])
    # the per-epoch table, from metrics.jsonl beside the checkpoints
    epochs = row["metrics"]["epochs"]
    assert [e["epoch"] for e in epochs] == [0, 1]
    assert {"train_loss", "val_loss", "val_accuracy"} <= set(row["metrics"]["columns"])
    text = cli(trained["env"], "run", row["name"]).stdout
    assert "per-epoch metrics" in text and row["checkpoints"][-1]["url"] in text


def test_a_failed_run_records_its_error_text(trained: dict) -> None:
    row = show(trained, "bad")
    assert row["status"] == "failed"
    assert "TRAIN_NOPE" in row["error"]  # the trainer's own words, not only "exit code 2"
    [attempt] = row["attempt_log"]
    assert attempt["exit_code"] == 2 and "TRAIN_NOPE" in attempt["error"]


def test_a_retried_run_has_two_attempts(trained: dict) -> None:
    row = show(trained, "retry")
    assert row["status"] == "succeeded" and row["attempts"] == 2 and row["error"] is None
    first, second = row["attempt_log"]
    assert (first["n"], first["status"], first["exit_code"]) == (1, "failed", 2)
    assert "TRAIN_NOPE" in first["error"]
    assert (second["n"], second["status"], second["exit_code"], second["error"]) == (
        2,
        "succeeded",
        0,
        None,
    )


def test_runs_lists_and_filters(trained: dict) -> None:
    page = json.loads(cli(trained["env"], "runs", "digits", "--json").stdout)
    assert page["total"] == 4
    by_id = {r["run_id"]: r for r in page["runs"]}
    assert by_id["bad"]["status"] == "failed" and by_id["ok"]["version_tag"] == trained["v1"]["tag"]
    failed = json.loads(cli(trained["env"], "runs", "--status", "failed", "--json").stdout)
    assert [r["run_id"] for r in failed["runs"]] == ["bad"]
    text = cli(trained["env"], "runs").stdout
    assert by_id["ok"]["name"] in text and "succeeded" in text
    assert json.loads(cli(trained["env"], "runs", "nothere", "--json").stdout)["total"] == 0
    bad = laketrain(trained["env"], "run", "no-such-run", check=False)
    assert bad.returncode == 1 and "no run 'no-such-run'" in bad.stderr


def test_compare_shows_params_metrics_and_the_data_diff(trained: dict) -> None:
    d = json.loads(cli(trained["env"], "compare", "ok", "v2run", "--json").stdout)
    assert {"name": "lr", "a": 0.003, "b": 0.01} in d["params"]
    assert all(p["a"] != p["b"] for p in d["params"])
    assert d["metrics"][0]["a"] == show(trained, "ok")["best_metric"]
    diff = d["data"]["diff"]
    assert diff["counts"] == {"added": 20, "removed": 0, "changed": 0}
    assert {c["label"]: (c["a"], c["b"]) for c in d["data"]["class_counts"]}["3"] == (6, 8)
    text = cli(trained["env"], "compare", "ok", "v2run").stdout
    assert "+20 added" in text and "laketrain diff" in text and "lr" in text


def test_models_promote_and_the_champion(trained: dict) -> None:
    env = trained["env"]
    models = json.loads(cli(env, "models", "digits", "--json").stdout)
    assert {m["run_id"] for m in models} == {"ok", "v2run", "retry"}
    assert all(m["checkpoint_url"].startswith("file://") for m in models)
    refused = laketrain(env, "promote", "bad", check=False)
    assert refused.returncode == 1 and "only a succeeded run" in refused.stderr
    out = json.loads(cli(env, "promote", "ok", "--json").stdout)
    assert (out["run_id"], out["by"], out["alias"]) == ("ok", "tester", "champion")
    assert out["at"]
    again = json.loads(cli(env, "promote", "v2run", "--by", "ann", "--json").stdout)
    assert (again["previous"], again["by"]) == ("ok", "ann")
    models = {m["run_id"]: m for m in json.loads(cli(env, "models", "--json").stdout)}
    assert models["v2run"]["aliases"] == ["champion"] and models["ok"]["aliases"] == []
    assert "champion" in cli(env, "models").stdout


def test_lineage_reads_both_ways(trained: dict) -> None:
    env = trained["env"]
    down = json.loads(cli(env, "lineage", "ok", "--json").stdout)
    assert down["kind"] == "run" and down["model"]["checkpoint_url"]
    assert down["version"]["version_id"] == trained["v1"]["version_id"]
    assert down["files"]["total"] == 60
    path = down["files"]["files"][0]["path"]
    up = json.loads(cli(env, "lineage", path, "--json").stdout)
    assert up["kind"] == "file"
    holders = {v["version_id"]: {r["run_id"] for r in v["runs"]} for v in up["versions"]}
    assert holders[trained["v1"]["version_id"]] >= {"ok", "bad", "retry"}
    assert holders[trained["v2"]["version_id"]] == {"v2run"}
    assert "→ run" in cli(env, "lineage", path).stdout


def _final_weights(home: dict, run_id: str) -> dict:
    import torch

    run_dir = Path(home["root"]) / "objects" / run_id
    steps = sorted(int(p.name.split("-")[1]) for p in run_dir.glob("step-*"))
    state = torch.load(run_dir / f"step-{steps[-1]}" / "state.pt", weights_only=True)
    return {"step": steps[-1], "model": state["model"]}


def test_reproduce_gives_bitwise_equal_final_weights(trained: dict) -> None:
    import torch

    env = trained["env"]
    proc = laketrain(env, "reproduce", "ok", "--run-id", "ok-again")
    row, again = show(trained, "ok"), show(trained, "ok-again")
    assert again["status"] == "succeeded"
    assert (again["version_id"], again["command"]) == (row["version_id"], row["command"])
    assert again["config"] == row["config"]
    assert "config differs" not in proc.stderr
    assert any("reproduction of ok" in e["message"] for e in again["events"])
    a, b = _final_weights(trained, "ok"), _final_weights(trained, "ok-again")
    assert a["step"] == b["step"] and a["model"].keys() == b["model"].keys()
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    assert again["best_metric"] == row["best_metric"]


def test_reproduce_print_gives_the_conf_and_env_for_another_launcher(trained: dict) -> None:
    out = cli(trained["env"], "reproduce", "ok", "--print", "--run-id", "elsewhere").stdout
    conf_line = next(line for line in out.splitlines() if "--conf" in line)
    conf = json.loads(conf_line.split("--conf '", 1)[1].rstrip("'"))
    assert conf["dataset_version"] == trained["v1"]["version_id"]  # the id, never "latest"
    assert (conf["seed"], conf["model"], conf["env"]) == (3, "mlp", {"OMP_NUM_THREADS": "1"})
    assert "RUN_ID=elsewhere" in out and "TRAIN_SEED=3" in out
    assert f"DATASET_VERSION={trained['v1']['version_id']}" in out


def test_reproduce_warns_when_the_recorded_code_version_differs(trained: dict) -> None:
    from pipeline.runs import record_run_details

    from .conftest import store_of

    record_run_details(
        "bad",
        code_version={"source": "git", "commit": "0" * 40, "dirty": False},
        lock_sha256="f" * 64,
        store=store_of(trained),
    )
    proc = cli(trained["env"], "reproduce", "bad", "--print")
    assert "warning: code version differs" in proc.stderr
    assert "warning: requirements.lock differs" in proc.stderr

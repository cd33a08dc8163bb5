"""Every DAG file parses cleanly and fast, with no database, connection or network access at
parse time: each file is parsed in a fresh process whose databases are unreachable, with every
DB connect and socket connection recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DAG_FILES = sorted((REPO / "dags").glob("*.py"))
PARSE_BUDGET_S = 2.0


def parse(path: Path, tmp_path: Path, **env: str) -> dict:
    unreachable = tmp_path / "no-such-dir" / "x.db"
    run_env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{unreachable}",
        "METADATA_DB_URL": "postgresql+psycopg://nobody@127.0.0.1:1/nothing",
        "LAKETRAIN_HOME": str(tmp_path),
        "RECIPES_DIR": str(REPO / "recipes"),
        "PYTHONPATH": str(REPO),
        **env,
    }
    out = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("parse_dags.py")), str(path)],
        env=run_env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    return json.loads(lines[-1].removeprefix("RESULT "))


@pytest.mark.parametrize("path", DAG_FILES, ids=[p.stem for p in DAG_FILES])
def test_dag_file_parses_without_db_or_network(path: Path, tmp_path: Path) -> None:
    result = parse(path, tmp_path)
    assert result["import_errors"] == {}
    assert result["attempts"] == []  # no DB connect, no socket connection while parsing
    assert list(result["dags"]) == [path.stem]  # dag_id = file name, one DAG per file
    assert result["dags"][path.stem]["doc_md"]
    # The stated budget is 2 s; this machine is shared and noisy, so the assertion leaves room
    # and the figure is printed (pytest -s) rather than being a flaky tight bound.
    print(f"{path.name}: parsed in {result['seconds']:.2f}s (budget {PARSE_BUDGET_S}s)")
    assert result["seconds"] < PARSE_BUDGET_S * 3


def test_lake_ingest_is_watched_and_reconciled(tmp_path: Path) -> None:
    dag = parse(
        REPO / "dags" / "lake_ingest.py",
        tmp_path,
        LAKE_DIR=str(tmp_path / "lake"),
        SETTLE_SECONDS="3",
        LAKETRAIN_POLL_SECONDS="1.5",
    )["dags"]["lake_ingest"]
    assert dag["timetable"] == "AssetOrTimeSchedule"  # the watcher, or hourly as a reconcile
    assert dag["max_active_runs"] == 1
    assert dag["tasks"] == ["approve", "commit", "held", "plan", "process", "scan"]
    assert [a.rstrip("/") for a in dag["assets"]] == ["laketrain://lake"]
    assert dag["watchers"] == [
        {
            "name": "lake_watcher",
            "trigger": [
                "pipeline.orchestration.trigger.LakeTrigger",
                {
                    "lake": str(tmp_path / "lake"),
                    "poll_seconds": 1.5,
                    "settle_seconds": 3.0,
                    "max_defer_seconds": 30.0,
                },
            ],
        }
    ]


def test_train_form_has_every_field_documented(tmp_path: Path) -> None:
    dag = parse(REPO / "dags" / "train.py", tmp_path)["dags"]["train"]
    expected = [
        "dataset",
        "dataset_version",
        "epochs",
        "batch_size",
        "lr",
        "amp",
        "grad_checkpointing",
        "model",
        "seed",
        "launcher",
        "gpus",
        "image",
        "command",
        "env",
        "cpu",
        "memory",
    ]
    assert list(dag["params"]) == expected
    for name, schema in dag["params"].items():
        assert schema.get("title"), name
        assert dag["param_descriptions"][name], name
    from pipeline.datasets.recipes import list_recipes

    # photos (unlabelled) cannot be trained: not offered
    assert dag["params"]["dataset"]["enum"] == [
        n for n in list_recipes(REPO / "recipes") if n != "photos"
    ]
    assert dag["params"]["launcher"]["enum"] == ["local", "docker", "kubernetes"]
    # the form once lacked resnet50, which the trainer has (one declaration: pipeline/training_params.py)
    assert dag["params"]["model"]["enum"] == ["auto", "resnet", "resnet50", "mlp"]
    assert dag["param_defaults"]["lr"] == 0.003
    assert dag["param_defaults"]["command"] == "python -m training"
    assert dag["param_defaults"]["image"] == "laketrain-trainer:latest"
    assert dag["param_defaults"]["env"] == {}
    assert dag["params"]["env"]["type"] == "object"
    assert dag["param_defaults"]["dataset_version"] == "latest"
    assert dag["param_defaults"]["launcher"] == "local"


def test_train_is_scheduled_on_the_auto_train_datasets_only(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "auto.toml").write_text('modality = "image"\nauto_train = true\n')
    (recipes / "manual.toml").write_text('modality = "image"\nauto_train = false\n')
    dag = parse(REPO / "dags" / "train.py", tmp_path, RECIPES_DIR=str(recipes))["dags"]["train"]
    assert dag["params"]["dataset"]["enum"] == ["auto", "manual"]
    assert dag["timetable"] == "AssetTriggeredTimetable"
    assert dag["assets"] == ["laketrain://datasets/auto"]


def test_train_without_auto_train_recipes_is_manual_only(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "manual.toml").write_text('modality = "image"\n')
    dag = parse(REPO / "dags" / "train.py", tmp_path, RECIPES_DIR=str(recipes))["dags"]["train"]
    assert dag["timetable"] == "NullTimetable" and dag["assets"] == []


def test_the_default_launcher_comes_from_the_deployment(tmp_path: Path) -> None:
    # The compose stack's Airflow image has no torch: there the form must default to docker.
    dag = parse(REPO / "dags" / "train.py", tmp_path, LAKETRAIN_DEFAULT_LAUNCHER="docker")
    assert dag["dags"]["train"]["param_defaults"]["launcher"] == "docker"
    bad = parse(REPO / "dags" / "train.py", tmp_path, LAKETRAIN_DEFAULT_LAUNCHER="slurm")
    assert "LAKETRAIN_DEFAULT_LAUNCHER='slurm'" in " ".join(bad["import_errors"].values())


# The train form's number fields (Chakra/zag NumberInput) clamp the value to the schema's
# `minimum`/`maximum` when the field loses focus: epochs -1 became 1 and was submitted as 1.
# The form ignores `exclusiveMinimum`/`exclusiveMaximum`, and Airflow validates them.
CLAMPED_BY_THE_FORM = ("minimum", "maximum")


@pytest.fixture(scope="module")
def train_params(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The train DAG's param schemas, parsed once for the tests below."""
    tmp = tmp_path_factory.mktemp("train-params")
    return parse(REPO / "dags" / "train.py", tmp)["dags"]["train"]["params"]


def test_no_number_field_is_clamped_by_the_form(train_params: dict) -> None:
    for name, schema in train_params.items():
        if schema.get("type") in ("integer", "number"):
            assert not set(CLAMPED_BY_THE_FORM) & set(schema), (name, schema)


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("gpus", -1, True),  # all GPUs
        ("gpus", 0, True),
        ("gpus", 64, True),
        ("gpus", -2, False),
        ("gpus", 65, False),
        ("epochs", 1, True),
        ("epochs", -1, False),
        ("epochs", 0, False),
        ("epochs", 10_000, True),
        ("epochs", 10_001, False),
        ("batch_size", -1, False),
        ("seed", 0, True),
        ("seed", -1, False),
        ("lr", 0.001, True),
        ("lr", -1, False),
        ("lr", 0, False),
    ],
)
def test_train_params_accept_minus_one_only_where_it_means_something(
    train_params: dict, field: str, value: float, ok: bool
) -> None:
    import jsonschema

    schema = train_params[field]
    # What Airflow's Param.resolve runs on a trigger's conf.
    if ok:
        jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())
    else:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def test_the_form_offers_only_trainable_datasets_and_says_why(tmp_path: Path) -> None:
    recipes = tmp_path / "recipes"
    recipes.mkdir()
    (recipes / "digits.toml").write_text('modality = "image"\n')
    (recipes / "photos.toml").write_text('modality = "image"\n[labels]\nrule = "none"\n')
    dag = parse(REPO / "dags" / "train.py", tmp_path, RECIPES_DIR=str(recipes))["dags"]["train"]
    assert dag["params"]["dataset"]["enum"] == ["digits"]
    assert "Not offered: photos (no labels)." in dag["param_descriptions"]["dataset"]


@pytest.mark.parametrize("field", ["image", "cpu", "memory"])
def test_optional_text_fields_accept_the_forms_empty_value(train_params: dict, field: str) -> None:
    """The trigger form sends an emptied text field as null; a plain "string" schema then marks
    the field invalid and the Trigger button stays disabled (seen in Chromium)."""
    import jsonschema

    from pipeline.orchestration.env_contract import TrainParams

    jsonschema.validate(None, train_params[field])
    assert getattr(TrainParams.from_mapping({"dataset": "digits", field: None}), field) == ""


def test_every_default_of_the_train_form_is_valid(tmp_path: Path) -> None:
    import jsonschema

    dag = parse(REPO / "dags" / "train.py", tmp_path)["dags"]["train"]
    for name, schema in dag["params"].items():
        jsonschema.validate(dag["param_defaults"][name], schema)

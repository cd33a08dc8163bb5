"""The training parameters are declared once (pipeline/training_params.py): the train form, the launch
contract (TrainParams → TRAIN_<FIELD>) and the trainer's config must agree with it, field by
field: defaults, choices, bounds and the round trip through the environment."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from pipeline.orchestration.env_contract import MODELS, TrainParams
from pipeline.training_params import FIELDS

from .test_dags_parse import REPO, parse


@pytest.fixture(scope="module")
def form(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("form")
    return parse(REPO / "dags" / "train.py", tmp)["dags"]["train"]


def test_params_module_imports_with_the_standard_library_only() -> None:
    code = (
        "import sys, pipeline.training_params; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'airflow', 'numpy', 'pydantic', 'sqlalchemy', 'pipeline', 'training') "
        "and m not in ('pipeline', 'pipeline.training_params')); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_form_offers_each_field_as_declared(form: dict) -> None:
    for f in FIELDS:
        schema = form["params"][f.name]
        assert form["param_defaults"][f.name] == f.default, f.name
        assert schema.get("enum") == (list(f.choices) if f.choices else None), f.name
        assert schema["title"] == f.title and form["param_descriptions"][f.name] == f.help
        # exclusive bounds, so that the form's blur never clamps an out-of-range value
        assert "minimum" not in schema and "maximum" not in schema, f.name
        if f.ge is not None:
            assert schema["exclusiveMinimum"] == f.ge - 1, f.name
        if f.le is not None:
            assert schema["exclusiveMaximum"] == f.le + 1, f.name
        if f.gt is not None:
            assert schema["exclusiveMinimum"] == f.gt, f.name


def test_the_launch_contract_has_the_declared_defaults_and_checks() -> None:
    p = TrainParams(dataset="digits", dataset_version="latest")
    for f in FIELDS:
        assert getattr(p, f.name) == f.default, f.name
    assert "resnet50" in MODELS  # the drift the issue names
    assert p.lr == 0.003


def test_the_trainer_config_has_the_declared_defaults_choices_and_help() -> None:
    from training.config import TrainConfig, field_index

    index = field_index()
    flat = TrainConfig().flat()
    for f in FIELDS:
        _, cfg_field = index[f.name]
        assert flat[f.name] == f.default, f.name
        assert type(cfg_field.default) is f.kind, f.name
        assert cfg_field.metadata["choices"] == f.choices, f.name
        assert cfg_field.metadata["help"] == f.help, f.name


@pytest.mark.parametrize("model", MODELS)
def test_every_value_the_form_sends_the_trainer_reads_back(model: str) -> None:
    """TRAIN_<FIELD> from the launcher → training.config: the same values, no config error."""
    from training.contract import resolve

    params = TrainParams(
        dataset="digits",
        dataset_version="latest",
        epochs=7,
        batch_size=5,
        lr=1.5e-4,
        amp="bf16",
        grad_checkpointing=True,
        model=model,
        seed=2**31 - 1,
        gpus=0,
    )
    env = {
        **params.train_vars(),
        "DATASET_NAME": "digits",
        "RUN_ID": "r1",
        "CHECKPOINT_URL": "file:///tmp/ck",
    }
    cfg, _, _ = resolve([], env)
    flat = cfg.flat()
    for f in FIELDS:
        assert flat[f.name] == getattr(params, f.name), f.name
    assert flat["device"] == "cpu"


@pytest.mark.parametrize(
    ("name", "value"),
    [("epochs", 0), ("epochs", 10_001), ("batch_size", 0), ("lr", 0.0), ("seed", -1)],
)
def test_both_sides_refuse_the_same_out_of_range_value(name: str, value: object) -> None:
    from pipeline.orchestration.env_contract import ContractError
    from training.config import ConfigError, build_config

    with pytest.raises(ContractError, match=f"^{name}:"):
        TrainParams.from_mapping({"dataset": "digits", name: value})
    with pytest.raises(ConfigError, match=f"^{name}:"):
        build_config({name: value})


def test_every_config_field_the_params_module_does_not_declare_is_the_trainers_own() -> None:
    """The launcher sets only declared fields; a field declared twice would be a drift."""
    from training.config import SECTIONS

    declared = {f.name for f in FIELDS}
    shared = {
        fld.name
        for klass in SECTIONS.values()
        for fld in dataclasses.fields(klass)
        if fld.metadata.get("shared")
    }
    assert shared == declared
    assert (REPO / "pipeline" / "training_params.py").exists()

"""The Airflow image carries no ``training/`` package: the DAGs, the storage layer, the
launchers and the CLI must work without it. A subprocess hides the package (a meta-path
finder that refuses ``training``) and imports what the Airflow side runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

_HIDE = """
import importlib.abc, sys
class _NoTraining(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "training" or name.startswith("training."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, _NoTraining())
"""


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _HIDE + code, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_airflow_side_imports_without_the_training_package() -> None:
    proc = _run(
        "import runpy, sys\n"
        "import pipeline.storage, pipeline.training_params, pipeline.orchestration.launchers\n"
        "import pipeline.orchestration.local_launcher\n"
        "import pipeline.orchestration.env_contract, pipeline.orchestration.user_run\n"
        "import pipeline.orchestration.results, pipeline.runs.queries, pipeline.cli\n"
        "import pipeline.storage.s3\n"
        "assert not [m for m in sys.modules if m.split('.')[0] == 'training'], 'training loaded'\n"
        "print('ok')\n"
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


def test_laketrain_train_without_the_builtin_trainer_says_how_to_get_it() -> None:
    proc = _run(
        "import sys\nfrom pipeline.cli import main\nsys.argv = ['laketrain', 'train']\nmain()\n"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "built-in trainer is not installed" in proc.stderr
    assert "--command" in proc.stderr

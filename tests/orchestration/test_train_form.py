"""The train DAG as a user meets it on a real stack (the dev stack's four components): the
trigger form in a headless Chromium, and a REST trigger with a typo key followed by
``make run``'s follow-along."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pipeline.orchestration import devstack
from pipeline.orchestration.follow import Follower

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def stack(
    tmp_path_factory: pytest.TempPathFactory, airflow_db_template: Path
) -> Iterator[devstack.DevStack]:
    home = tmp_path_factory.mktemp("formstack")
    (home / "lake").mkdir()
    env = {
        "LAKE_DIR": str(home / "lake"),
        "DATA_ROOT": str(home / "data"),
        "CHECKPOINT_URL": (home / "objects").as_uri(),
        "METADATA_DB_URL": f"sqlite:///{home / 'metadata.db'}",
        "RECIPES_DIR": str(REPO / "recipes"),
        "SETTLE_SECONDS": "0",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
        "PYTHONPATH": "",
    }
    cfg = devstack.StackConfig(
        home=home / "airflow",
        port=devstack.free_port(),
        parallelism=2,
        grace_seconds=15.0,
        extra_env=env,
    )
    from pipeline.metadata.store import MetadataStore

    MetadataStore(env["METADATA_DB_URL"]).dispose()  # migrated once, before the tasks use it
    from tests.orchestration.airflow_db import seed_home

    seed_home(cfg.home, airflow_db_template)
    s = devstack.DevStack(cfg, log=lambda _msg: None)
    s.start(timeout=240, prepare=False, migrate=False)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:  # the dag-processor's first parse
            status, _ = s.api.get("/api/v2/dags/train")
            if status == 200:
                break
            time.sleep(0.2)
        yield s
    finally:
        # Everything is read by now: 2 s before SIGKILL, not 15 (the triggerer alone takes ~15 s
        # to leave gracefully).
        s.cfg.grace_seconds = 2.0
        s.stop()


def wait_run(stack: devstack.DevStack, run_id: str, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    body: dict = {}
    while time.monotonic() < deadline:
        _, body = stack.api.get(f"/api/v2/dags/train/dagRuns/{run_id}")
        if isinstance(body, dict) and body.get("state") in ("success", "failed"):
            return body
        time.sleep(0.2)
    pytest.fail(f"run {run_id} not finished after {timeout}s: {body}")


def test_a_typo_key_over_rest_fails_the_run_and_make_run_prints_why(
    stack: devstack.DevStack,
) -> None:
    status, run = stack.api.trigger("train", {"dataset": "digits", "epoch": 2})
    assert status == 200, run  # Airflow takes any key: the run must refuse it itself
    assert wait_run(stack, run["dag_run_id"])["state"] == "failed"
    lines: list[str] = []
    Follower(stack.api, stack.env, log=lines.append).poll()
    line = next((ln for ln in lines if ln.lstrip().startswith("run ")), None)
    assert line is not None, lines
    assert "failed: resolve: train: unknown conf key(s) 'epoch' (did you mean 'epochs'?)" in line
    assert "None" not in line


@pytest.fixture
def page(stack: devstack.DevStack):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is missing: apt-get install chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu", "--no-first-run"]
        )
        pg = browser.new_page(viewport={"width": 1400, "height": 1600})
        pg.set_default_timeout(30_000)
        pg.goto(stack.cfg.url + "/auth/login")
        pg.fill("input[name=username]", devstack.ADMIN_USER)
        pg.fill("input[name=password]", stack.password)
        pg.locator("button[type=submit]").click()
        pg.wait_for_url(stack.cfg.url + "/", timeout=60_000)
        yield pg
        browser.close()


def number_field(form, name: str):
    """The text input of the form's NumberInput for param ``name``."""
    inc = form.locator(f"[id='number-input:element_{name}:inc']")
    return form.locator(f"[id='{inc.get_attribute('aria-controls')}']")


def test_the_form_keeps_minus_one_and_does_not_turn_it_into_a_valid_value(
    stack: devstack.DevStack, page
) -> None:
    page.goto(stack.cfg.url + "/dags/train")
    page.get_by_role("button", name="Trigger Dag").click()
    form = page.get_by_role("dialog")
    form.get_by_text("Dataset version").first.wait_for()
    gpus = number_field(form, "gpus")
    assert gpus.input_value() == "-1"  # the default: all GPUs
    gpus.fill("-1")
    gpus.press("Tab")
    assert gpus.input_value() == "-1"
    epochs = number_field(form, "epochs")
    epochs.fill("-1")
    epochs.press("Tab")  # blur: the field clamped to its minimum here (-1 became 1)
    assert epochs.input_value() == "-1"
    posted = []
    page.on(
        "response",
        lambda r: (
            posted.append(r) if r.url.endswith("/dagRuns") and r.request.method == "POST" else None
        ),
    )
    form.get_by_test_id("trigger-dag-submit").click()
    page.wait_for_timeout(3000)
    # Refused with a message (by the form, or by the API naming the field), never run as 1.
    for r in posted:
        assert r.status >= 400 and "epochs" in r.text(), r.text()
    _, body = stack.api.get("/api/v2/dags/train/dagRuns?limit=100")
    confs = [run.get("conf") or {} for run in body.get("dag_runs", [])]
    assert not [c for c in confs if c.get("epochs") in (1, -1)], confs

"""The Datasets page and the training journey in a real browser (headless Debian Chromium,
Playwright) against the running Airflow: log in, click through, and save screenshots to
tests/artifacts/."""

from __future__ import annotations

import time

import pytest

from tests.ui.lakedata import EVIL_LABEL, EVIL_PATH

pytestmark = pytest.mark.slow


@pytest.fixture
def page(browser, ui_stack):
    context = browser.new_context(viewport={"width": 1400, "height": 1600})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.dialogs = []  # type: ignore[attr-defined]
    # Any alert() anywhere (the page or its iframe) would land here instead of blocking.
    pg.on("dialog", lambda d: (pg.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    login(pg, ui_stack.stack.url)
    yield pg
    context.close()


def login(pg, url: str, user: str = "admin", password: str = "admin") -> None:
    pg.goto(url + "/auth/login")
    pg.fill("input[name=username]", user)
    pg.fill("input[name=password]", password)
    pg.locator("button[type=submit]").click()
    pg.wait_for_url(url + "/", timeout=60_000)


def datasets_frame(pg):
    """Click the "Datasets" nav link; the page lives in an iframe inside Airflow's UI."""
    pg.get_by_role("link", name="Datasets").click()
    pg.wait_for_url("**/plugin/datasets**")
    return pg.frame_locator("iframe[title=Datasets]")


def test_nav_to_a_version_then_a_diff_with_hostile_names_as_text(page, ui_stack, artifacts):
    b = ui_stack.built
    frame = datasets_frame(page)
    rows = frame.locator("table.versions tbody tr")
    rows.first.wait_for()
    assert [r.get_attribute("data-version") for r in rows.all()] == [
        b.v2["version_id"],
        b.v1["version_id"],
    ]
    page.screenshot(path=str(artifacts / "ui-1-datasets.png"))

    frame.get_by_role("link", name=b.v2["tag"], exact=True).first.click()
    frame.locator("h1", has_text=b.v2["tag"]).wait_for()
    # The hostile class name is shown as text, in the chart's table.
    frame.locator("table.classes td", has_text=EVIL_LABEL).wait_for(state="visible")
    frame.locator("table.invalid td", has_text=b.invalid).wait_for(state="visible")
    assert frame.locator(".parent a").inner_text() == b.v1["tag"]
    assert b.v2["version_id"] in frame.locator("pre.train-shell").inner_text()
    # decode() resolves once the PNG is loaded and decoded, and rejects if it is broken.
    natural = frame.locator("img.thumbnails").evaluate(
        "img => img.decode().then(() => img.naturalWidth)"
    )
    assert natural and natural > 0
    page.screenshot(path=str(artifacts / "ui-2-version.png"), full_page=True)

    frame.get_by_role("button", name="Show diff").click()
    frame.locator("p.counts").wait_for()
    counts = frame.locator("p.counts").inner_text()
    assert (
        f"+{len(b.added)} added" in counts
        and f"−{len(b.removed)} removed" in counts
        and "~1 changed" in counts
    )
    added = frame.locator("table.diff-added td.mono", has_text=EVIL_PATH)
    added.wait_for(state="visible")
    assert added.first.inner_text() == EVIL_PATH
    page.screenshot(path=str(artifacts / "ui-3-diff.png"), full_page=True)

    frame.get_by_role("searchbox").fill(EVIL_PATH)
    frame.get_by_role("button", name="Search").click()
    frame.locator("table.matches td", has_text=EVIL_PATH).first.wait_for(state="visible")
    page.screenshot(path=str(artifacts / "ui-4-search.png"))

    # No script from a file name ever ran: no dialog, and the frame holds no <script> at all.
    page.wait_for_timeout(300)
    assert page.dialogs == []
    assert frame.locator("script").count() == 0


def test_training_journey_from_the_trigger_form_to_the_version_page(page, ui_stack, artifacts):
    b = ui_stack.built
    url = ui_stack.stack.url
    page.goto(url + "/dags/train")
    page.get_by_role("button", name="Trigger Dag").click()
    form = page.get_by_role("dialog")
    form.get_by_text("Dataset version").first.wait_for()
    # Every run parameter carries a description under its field (a user has nothing else).
    helps = form.evaluate(
        """el => Array.from(el.querySelectorAll('label[data-part=label][data-required]')).map(l => {
             const root = l.closest('[data-scope=field][data-part=root]');
             const h = root && root.querySelector('[data-part=helper-text]');
             return [l.textContent.replace('*', '').trim(), h ? h.textContent.trim() : ''];
           })"""
    )
    assert len(helps) >= 4 and {"Dataset", "Dataset version", "Epochs"} <= {
        name for name, _ in helps
    }
    assert [name for name, text in helps if not text] == [], helps
    # Dataset: a select built from the recipes; version: pinned by a unique id prefix.
    form.locator("input[name=element_dataset]").locator("xpath=..").get_by_role("combobox").click()
    page.get_by_role("option", name="digits", exact=True).click()
    form.locator("#element_dataset_version").fill(b.v2["version_id"][:12])
    epochs = form.locator("[id='number-input:element_epochs:inc']").get_attribute("aria-controls")
    form.locator(f"[id='{epochs}']").fill("1")
    page.screenshot(path=str(artifacts / "ui-5-trigger-form.png"), full_page=True)
    with page.expect_response(
        lambda r: r.url.endswith("/dagRuns") and r.request.method == "POST"
    ) as posted:
        form.get_by_test_id("trigger-dag-submit").click()
    assert posted.value.status == 200, posted.value.text()
    run = posted.value.json()
    assert run["conf"]["dataset"] == "digits" and run["conf"]["epochs"] == 1
    assert run["conf"]["dataset_version"] == b.v2["version_id"][:12]
    run_id = run["dag_run_id"]

    # Watch the run in the UI's own run page until it shows success.
    state = None
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        state = page.request.get(f"{url}/api/v2/dags/train/dagRuns/{run_id}").json()["state"]
        if state in ("success", "failed"):
            break
        time.sleep(0.5)
    page.goto(f"{url}/dags/train/runs/{run_id}")
    page.wait_for_timeout(1500)
    page.screenshot(path=str(artifacts / "ui-6-run.png"))
    assert state == "success", ui_stack.stack.log_tail("scheduler")

    # The run is on the version's page, with its best metric.
    page.goto(url + "/")
    frame = datasets_frame(page)
    frame.get_by_role("link", name=b.v2["tag"], exact=True).first.click()
    run_link = frame.locator(".runs a", has_text=run_id)
    run_link.wait_for(state="visible")
    assert "val_accuracy" in frame.locator(".runs").inner_text()
    frame.locator("img.thumbnails").evaluate("img => img.decode()")
    page.screenshot(path=str(artifacts / "ui-7-version-with-run.png"), full_page=True)
    # ...and on the list, next to the version.
    page.goto(url + "/plugin/datasets")
    frame = page.frame_locator("iframe[title=Datasets]")
    frame.locator(f"tr[data-version='{b.v2['version_id']}'] .run", has_text=run_id).wait_for(
        state="visible"
    )

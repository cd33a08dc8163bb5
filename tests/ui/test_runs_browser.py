"""The runs journey in a real browser (headless Debian Chromium, Playwright) inside the running
Airflow: two real training runs (one per version of digits), then open a run from the version
page, see its curves, compare it with the other run and see both curves and the data diff.
Screenshots go to tests/artifacts/ (ui-runs-*.png)."""

from __future__ import annotations

import pytest

from tests.ui.lakedata import lake_env
from tests.ui.runs_support import train_run
from tests.ui.test_browser import login

pytestmark = pytest.mark.slow

DAG_RUN = "manual__2026-12-01T09:00:00+00:00"


@pytest.fixture(scope="module")
def two_runs(ui_stack) -> tuple[str, str]:
    env = lake_env(ui_stack.home)
    b = ui_stack.built
    a, c = "journey-run-a", "journey-run-b"
    train_run(env, ui_stack.store_url, a, b.v1["version_id"], dag_run_id=DAG_RUN, lr=0.05)
    train_run(env, ui_stack.store_url, c, b.v2["version_id"], lr=0.01)
    return a, c


@pytest.fixture
def page(browser, ui_stack):
    context = browser.new_context(viewport={"width": 1400, "height": 1400})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    login(pg, ui_stack.stack.url)
    yield pg
    context.close()


def test_open_a_run_from_the_version_page_see_its_curves_then_compare(
    page, ui_stack, two_runs, artifacts
):
    a, b = two_runs
    built = ui_stack.built
    page.get_by_role("link", name="Datasets").click()
    page.wait_for_url("**/plugin/datasets**")
    frame = page.frame_locator("iframe[title=Datasets]")
    frame.get_by_role("link", name=built.v2["tag"], exact=True).first.click()
    frame.locator("h1", has_text=built.v2["tag"]).wait_for()

    # The version page links its run by its readable name.
    link = frame.locator("a.run-page[href$='/runs/journey-run-b']")
    link.wait_for(state="visible")
    name_b = link.inner_text()
    assert name_b.startswith(f"digits-{built.v2['version_id'][:8]}-")
    link.click()

    # The run page: its name, three charts, a drawn loss line.
    frame.locator("h1 .run-name", has_text=name_b).wait_for()
    loss = frame.locator("svg.chart-loss")
    loss.wait_for(state="visible")
    assert frame.locator("figure.chart-box svg").count() == 3
    assert loss.locator("g.series[data-series='val loss'] circle").count() == 3
    box = loss.bounding_box()
    assert box and box["width"] > 300 and box["height"] > 150
    assert frame.locator("svg.chart-accuracy g.series").count() == 2
    page.screenshot(path=str(artifacts / "ui-runs-1-run.png"), full_page=True)

    # Compare with the other run: both curves on one chart, the data diff.
    frame.locator("form.compare select").select_option(a)
    frame.get_by_role("button", name="Compare").click()
    frame.locator("h1", has_text="Compare").wait_for()
    series = frame.locator("svg.chart-loss g.series")
    assert series.count() == 4
    names = [series.nth(i).get_attribute("data-series") for i in range(4)]
    assert any(n.startswith("A ") for n in names) and any(n.startswith("B ") for n in names)
    counts = frame.locator("p.data-diff").inner_text()
    # A is this run (on v2), B the other (on v1): the diff goes from v2 back to v1.
    assert f"+{len(built.removed)} added" in counts and f"−{len(built.added)} removed" in counts
    page.screenshot(path=str(artifacts / "ui-runs-2-compare.png"), full_page=True)

    # The Runs view in the nav, filtered to succeeded runs.
    page.get_by_role("link", name="Runs").click()
    page.wait_for_url("**/plugin/runs**")
    runs = page.frame_locator("iframe[title=Runs]")
    runs.locator("form.run-filters select[name=status]").select_option("succeeded")
    runs.get_by_role("button", name="Filter").click()
    runs.locator(f"tr[data-run='{a}']").wait_for(state="visible")
    assert runs.locator(f"tr[data-run='{b}']").count() == 1
    assert runs.locator("tr.run-failed").count() == 0
    page.screenshot(path=str(artifacts / "ui-runs-3-list.png"), full_page=True)

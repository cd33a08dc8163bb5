"""The version page's Quality section: a quarantined version shows its status, the gate's
reasons, the review history and a link to Airflow's Required Actions; the listed groups get
thumbnails drawn from the stored samples; the JSON API serves the same."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from pipeline.ui.app import create_app
from tests.datasets.conftest import SMALL_IMAGE_RECIPE, image_lake, write_jpeg, write_recipe

HOLD = SMALL_IMAGE_RECIPE + "\n[quality]\nmin_val_samples = 1000\napproval = 'on_failure'\n"


def _allow() -> None:
    return None


@pytest.fixture
def held(store, lt_env):
    from pipeline.datasets.build import run_build

    image_lake(lt_env, per_class=3)
    run_build("pets", workers=1, store=store)
    write_recipe(lt_env, "pets", HOLD)
    write_jpeg(lt_env / "lake" / "pets" / "cat" / "new.jpg", seed=4242)
    return run_build("pets", workers=1, store=store).version


@pytest.fixture
def client(store) -> TestClient:
    return TestClient(create_app(_allow, get_store=lambda: store))


def test_a_quarantined_version_page_shows_why_and_its_reviews(store, held, client) -> None:
    from pipeline.datasets.quality.review import reject

    reject(held.tag, who="dana", reason="too few val samples")
    page = client.get(f"/versions/{held.tag}")
    assert page.status_code == 200, page.text
    html = page.text
    assert 'id="quality"' in html and "Quarantined" in html
    assert "val_samples" in html  # the gate's reason, as recorded at commit
    assert "/required_actions" in html and f"laketrain approve {held.tag}" in html
    assert "dana" in html and "too few val samples" in html and "Rejected" in html

    api = client.get(f"/api/versions/{held.version_id}/quality")
    assert api.status_code == 200
    body = api.json()
    assert body["status"] == "quarantined" and body["standing"] == "reject"
    assert [r["decision"] for r in body["reviews"]] == ["quarantine", "reject"]


def test_a_committed_version_page_has_a_quality_section_without_the_warning(
    store, held, client
) -> None:
    from pipeline.datasets.queries import get_version

    latest = get_version("latest", dataset="pets", store=store)
    html = client.get(f"/versions/{latest['version_id']}").text
    assert 'id="quality"' in html and "Quarantined" not in html


def test_a_listed_group_gets_thumbnails_and_a_missing_one_is_404(store, held, client) -> None:
    from sqlalchemy import update

    from pipeline.metadata.datasets import DatasetVersion

    # A label conflict listed in the report (what the report's computation writes), on two of
    # the version's real samples: the thumbnails are drawn from their stored arrays.
    report = {
        "label_conflicts": {
            "count": 1,
            "listed": [
                {
                    "md5": "0" * 32,
                    "paths": ["pets/cat/000.jpg", "pets/dog/000.jpg"],
                    "labels": ["cat", "dog"],
                }
            ],
        }
    }
    with store.session() as s:
        s.execute(
            update(DatasetVersion)
            .where(DatasetVersion.version_id == held.version_id)
            .values(quality=report)
        )
    html = client.get(f"/versions/{held.version_id}").text
    assert "Label conflicts" in html and "pets/dog/000.jpg" in html
    src = f"/api/versions/{held.version_id}/quality/label_conflicts/0.png"
    assert src in html
    png = client.get(src)
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")
    assert (
        client.get(f"/api/versions/{held.version_id}/quality/label_conflicts/1.png").status_code
        == 404
    )
    assert client.get(f"/api/versions/{held.version_id}/quality/bogus/0.png").status_code == 404

"""Credentials in URLs are masked wherever laketrain prints them."""

from __future__ import annotations

import pytest

from pipeline.redact import redact_text, redact_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "postgresql+psycopg://laketrain:s3cret@db:5432/lt",
            "postgresql+psycopg://laketrain:***@db:5432/lt",
        ),
        ("postgresql://only-user@db/lt", "postgresql://only-user@db/lt"),
        ("s3://AKIAKEY:wJalrSECRET@bucket/prefix", "s3://***@bucket/prefix"),
        ("s3://AKIAKEY@bucket/prefix", "s3://***@bucket/prefix"),
        ("sqlite:////var/data/metadata.db", "sqlite:////var/data/metadata.db"),
        ("file:///tmp/objects", "file:///tmp/objects"),
    ],
)
def test_redact_url_masks_passwords_and_object_store_keys(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_text_masks_every_url_inside_a_message() -> None:
    message = (
        "could not connect to 'postgresql://lt:hunter2@10.0.0.5/lt' "
        "(checkpoints at s3://KEY:SECRET@bucket/run)"
    )
    redacted = redact_text(message)
    assert "hunter2" not in redacted and "SECRET" not in redacted and "KEY:" not in redacted
    assert "postgresql://lt:***@10.0.0.5/lt" in redacted
    assert "s3://***@bucket/run" in redacted


@pytest.mark.parametrize(
    ("url", "secret"),
    [
        ("postgresql://lt:pa/ss@db/lt", "pa/ss"),  # a '/' in an unencoded password
        ("postgresql://lt:p@ss@db/lt", "p@ss"),  # an '@' in an unencoded password
        ("postgresql://db/lt?user=lt&password=hunter2", "hunter2"),
        ("s3://KEY:SE/CRET@bucket/x", "SE/CRET"),
    ],
)
def test_redact_text_masks_unencoded_and_query_string_passwords(url: str, secret: str) -> None:
    redacted = redact_text(f"cannot open {url} now")
    assert secret not in redacted and "***" in redacted


@pytest.mark.parametrize(
    "value",
    ["laketrain:hunter2@db:5432/lt", "postgresql:/laketrain:hunter2@db/lt", "hunter2@db"],
)
def test_redact_url_masks_a_malformed_url_up_to_its_last_at(value: str) -> None:
    redacted = redact_url(value)
    assert "hunter2" not in redacted and redacted.endswith("@" + value.rpartition("@")[2])


def test_redact_leaves_text_without_credentials_alone() -> None:
    text = "checkpoint s3://bucket/runs/r1/step-5 at file:///tmp/x@y and http://host:8080/a"
    assert redact_text(text) == text

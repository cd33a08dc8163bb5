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

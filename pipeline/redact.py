"""Credentials never reach a printed config, an error or a log line: one place that masks them.

A URL's userinfo (``user:password@`` or ``key:secret@``) keeps its user name and loses the rest;
free text (an exception message, a log line) has every such URL inside it masked the same way.
A password in a query string (``?password=...``) is masked too. Stdlib only: the trainer, the
CLI and the Airflow tasks all import it.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://user[:password]@ — the user name holds no ':', '/', '@' or whitespace (SQLAlchemy's
# own rule); the password may hold '/' and '@' (a user who did not percent-encode it), so it
# runs to the LAST '@' of the token. The password part is optional: ``s3://AKIA...@bucket``
# puts an access key where a user name goes, which is a secret too.
_USERINFO = re.compile(
    r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)"
    r"(?P<user>[^:/@\s'\"]*)(?P<password>:[^\s'\"]*)?@"
)
# ?password=... / &secret=... in a URL's query string (libpq and some drivers accept these).
_QUERY_SECRET = re.compile(
    r"(?P<key>[?&;](?:password|passwd|pwd|secret|token|access_key|secret_key|"
    r"aws_secret_access_key|sessiontoken)=)[^&;\s'\"]*",
    re.IGNORECASE,
)


def _mask(match: re.Match[str]) -> str:
    scheme, user, password = match.group("scheme"), match.group("user"), match.group("password")
    if scheme.lower().startswith(("s3", "gs", "az", "abfs")):
        return f"{scheme}{MASK}@"  # object-store URLs carry keys, not user names
    return f"{scheme}{user}:{MASK}@" if password else f"{scheme}{user}@"


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL inside it replaced by ``***``: a password
    keeps its user name, object-store keys are masked whole, query-string secrets lose their
    value."""
    return _QUERY_SECRET.sub(lambda m: f"{m.group('key')}{MASK}", _USERINFO.sub(_mask, text))


def redact_url(url: str) -> str:
    """One URL (or a value meant to be one) with its credentials masked. Unlike free text, a
    malformed value without ``://`` that holds an '@' is masked up to its last '@', since a
    settings error must not echo ``user:password@host`` because the scheme was mistyped."""
    text = str(url)
    if "://" not in text and "@" in text:
        # ``user:pw@host/db``, ``postgresql:/u:p@h``: everything before the last '@' may be a
        # credential.
        return redact_text(f"{MASK}@{text.rpartition('@')[2]}")
    return redact_text(text)

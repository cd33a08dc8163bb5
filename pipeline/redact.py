"""Credentials never reach a printed config, an error or a log line: one place that masks them.

A URL's userinfo (``user:password@`` or ``key:secret@``) keeps its user name and loses the rest;
free text (an exception message, a log line) has every such URL inside it masked the same way.
Stdlib only: the trainer, the CLI and the Airflow tasks all import it.
"""

from __future__ import annotations

import re

MASK = "***"

# scheme://userinfo@ — userinfo holds no '/', '@' or whitespace. The password part is optional:
# ``s3://AKIA...@bucket`` puts an access key where a user name goes, which is a secret too.
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>[^/@\s'\"]+)@")


def _mask(match: re.Match[str]) -> str:
    scheme, userinfo = match.group("scheme"), match.group("userinfo")
    user, sep, _password = userinfo.partition(":")
    if scheme.lower().startswith(("s3", "gs", "az", "abfs")):
        return f"{scheme}{MASK}@"  # object-store URLs carry keys, not user names
    return f"{scheme}{user}:{MASK}@" if sep else f"{scheme}{user}@"


def redact_text(text: str) -> str:
    """``text`` with the credentials of every URL inside it replaced by ``***``: a password
    keeps its user name, object-store keys are masked whole."""
    return _USERINFO.sub(_mask, text)


redact_url = redact_text  # one URL is the simplest text; the name says what a caller holds

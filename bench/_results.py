"""Write one benchmark's section of bench/RESULTS.md, leaving the other sections alone."""

from __future__ import annotations

import fcntl
import os
import platform
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = "# Benchmark results\n\nEach section is rewritten by its script (`make bench`). Ratios compare the project's figure with a baseline measured in the same run.\n"


def machine() -> str:
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def write_section(name: str, body: str, *, where: str | None = None) -> None:
    """Replace the `## name` section of RESULTS.md with ``body`` (under a file lock).
    ``where`` names the machine when the figures came from another one (a borrowed GPU box)."""
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = f"## {name}\n\n_{stamp}, {where or machine()}_\n\n{body.strip()}\n"
    RESULTS.touch()
    with open(RESULTS, "r+", encoding="utf-8") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        text = fh.read() or HEADER
        pattern = re.compile(rf"^## {re.escape(name)}\n.*?(?=^## |\Z)", re.S | re.M)
        if pattern.search(text):
            text = pattern.sub(lambda _: section + "\n", text)
        else:
            text = text.rstrip("\n") + "\n\n" + section
        fh.seek(0)
        fh.truncate()
        fh.write(text.rstrip("\n") + "\n")


def figures_table(rows: list[tuple[str, str]]) -> str:
    """A two-column Markdown table of (measure, figure) rows."""
    return "| measure | figure |\n|---|---|\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)


def quartiles(ratios: list[float]) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile) of paired ratios; one ratio is all three."""
    q1, _, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return q1, statistics.median(ratios), q3


def report(name: str, body: str, *, write: bool, where: str | None = None) -> None:
    """Print a benchmark's section, and write it into RESULTS.md unless told not to."""
    print(body)
    if write:
        write_section(name, body, where=where)

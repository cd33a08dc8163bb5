"""The object-storage benchmarks: an ``s3://`` lake and an ``s3://`` DATA_ROOT, each against a
bare boto3 client doing the same work in the same run, on a real ``moto_server`` (moto
measures S3's behaviour, not its speed: the figures are requests and ratios).

- ``bench/s3_lake.py``: the no-change rescan of N objects (default 20,000) against a bare
  paginated list (target <= 1.5x), with its requests; the cold scan against a plain
  concurrent GET + md5 loop (target >= 0.8x).
- ``bench/s3_read.py``: a version read with a cold cache against a bare parallel download
  of its segments (target >= 0.8x), and with a warm cache against the local reader
  (target >= 0.95x), with the requests of each open.

Both parts write one section of bench/RESULTS.md, ``bench/s3.py``.

    .venv/bin/python bench/s3.py [--only lake|read] [--objects 20000] [--images 3000]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import s3_lake, s3_read  # noqa: E402
from bench._results import figures_table, report  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", choices=("lake", "read"), help="run one part (nothing written)")
    ap.add_argument("--objects", type=int, default=20_000, help="objects in the s3:// lake")
    ap.add_argument("--images", type=int, default=3000, help="samples in the s3:// version")
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    parts = []
    if args.only in (None, "lake"):
        parts.append(("The lake on S3 (`bench/s3_lake.py`)", s3_lake.measure(args.objects)))
    if args.only in (None, "read"):
        parts.append(("Versions on S3 (`bench/s3_read.py`)", s3_read.measure(args.images)))
    # moto, the client and the bare baseline share the machine's cores with whatever else
    # runs: the load says how much the absolute times (not the request counts) are worth.
    load = f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end"
    body = (
        "moto_server on loopback: moto measures S3's behaviour, not its speed, so the figures "
        "are the requests and the ratios to a bare boto3 client doing the same work in the "
        f"same run. Load average during the run: {load} ({os.cpu_count()} cores).\n"
    )
    for title, (what, rows, note) in parts:
        body += f"\n**{title}**: {what}.\n\n{figures_table(rows)}\n"
        if note:
            body += f"\n{note}\n"
    # A part run alone is a look, not a result: the section holds both parts of one run.
    report("bench/s3.py", body, write=args.only is None)


if __name__ == "__main__":
    main()

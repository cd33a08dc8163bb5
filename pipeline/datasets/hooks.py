"""Test hook for the crash-safety tests: pause a build at a named point so a test can kill it.

``LAKETRAIN_TEST_PAUSE_AT=<point>`` makes the build print ``LAKETRAIN_PAUSED_AT <point>`` on
stderr and sleep there; the test waits for the marker and sends SIGKILL. Unset, it is a no-op.
Points: ``process_decoded`` (after decoding a shard, before writing its segment),
``segment_before_rename``, ``before_commit`` (every segment written and recorded),
``commit_staged`` (version folder staged, not yet renamed), ``commit_renamed`` (folder
published, store not yet committed).
"""

from __future__ import annotations

import os
import sys
import time


def pause_hook(point: str) -> None:
    if os.environ.get("LAKETRAIN_TEST_PAUSE_AT") == point:
        sys.stderr.write(f"LAKETRAIN_PAUSED_AT {point}\n")
        sys.stderr.flush()
        time.sleep(float(os.environ.get("LAKETRAIN_TEST_PAUSE_SECONDS", "60")))

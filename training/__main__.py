"""``python -m training``: parse the environment contract and flags, train, exit with the code
the orchestrator understands (0 done, 2 bad config, 3 data refused, 75 preempted, 1 failed)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from training.config import ConfigError, resolve

    try:
        cfg, target, ns = resolve(argv)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if ns.print_config:
        print(json.dumps({"config": cfg.to_dict(), "target": target.__dict__}, indent=2))
        return 0
    from training.runner import run

    return run(cfg, target)


if __name__ == "__main__":
    sys.exit(main())

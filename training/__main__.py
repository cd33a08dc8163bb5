"""``python -m training``: parse the environment contract and flags, train, exit with the code
the orchestrator understands (0 done, 2 bad config, 3 data refused, 75 preempted, 1 failed).
When the run wants several processes (TRAIN_NPROC, or one per visible GPU) it starts them under
torchrun and exits with their combined code (training/torchrun.py)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    from training.torchrun import die_with_launcher, record_exit_code

    die_with_launcher()
    code = _main(argv)
    record_exit_code(code)  # a torchrun worker tells its launcher why it stopped
    return code


def _main(argv: Sequence[str] | None) -> int:
    from pipeline.redact import redact_text, redact_url
    from training.config import ConfigError
    from training.contract import resolve
    from training.exit_codes import EXIT_CONFIG, EXIT_OK

    try:
        cfg, target, ns = resolve(argv)
    except ConfigError as exc:
        print(f"error: {redact_text(str(exc))}", file=sys.stderr)
        return EXIT_CONFIG
    if ns.print_config:
        # The target holds URLs (METADATA_DB_URL may carry a password): printed masked.
        shown = {
            k: (redact_url(v) if k.endswith("_url") else redact_text(v))
            if isinstance(v, str)
            else v
            for k, v in target.__dict__.items()
        }
        print(json.dumps({"config": cfg.to_dict(), "target": shown}, indent=2))
        return EXIT_OK
    from training.torchrun import is_worker, launch, processes_wanted

    if not is_worker():
        try:
            nproc = processes_wanted(cfg)
        except ConfigError as exc:
            print(f"error: {redact_text(str(exc))}", file=sys.stderr)
            return EXIT_CONFIG
        if nproc > 1:
            return launch(nproc, list(sys.argv[1:] if argv is None else argv))
    from training.train import run

    return run(cfg, target)


if __name__ == "__main__":
    sys.exit(main())

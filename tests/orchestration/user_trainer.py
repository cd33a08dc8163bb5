"""A user's own trainer, written from docs/trainer-contract.md alone (no laketrain import):
it reads the contract, "trains" USER_STEPS steps, checkpoints its step under
``CHECKPOINT_URL/<RUN_ID>/`` (file:// only, for the tests), writes ``result.json`` and exits
with USER_EXIT.

- USER_NO_RESULT=1: writes no result.json (the launcher records the exit status);
- USER_PAUSE_AT=N: after step N prints ``PAUSED step=N`` and waits for SIGTERM; on SIGTERM it
  saves its step and exits 75, so that a rerun with the same RUN_ID resumes after it.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

CONTRACT = ("DATASET_NAME", "DATASET_VERSION", "DATA_ROOT", "CHECKPOINT_URL", "RUN_ID")
stop = False


def on_term(signum, frame):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)
missing = [k for k in CONTRACT if not os.environ.get(k)]
if missing:
    print(f"error: missing {', '.join(missing)}", file=sys.stderr)
    sys.exit(2)
run_dir = Path(unquote(urlsplit(os.environ["CHECKPOINT_URL"]).path)) / os.environ["RUN_ID"]
run_dir.mkdir(parents=True, exist_ok=True)
state = run_dir / "step.json"
start = json.loads(state.read_text())["step"] if state.exists() else 0
print(
    "CONTRACT "
    + json.dumps(
        {
            **{k: os.environ[k] for k in CONTRACT},
            "TRAIN": {k: v for k, v in os.environ.items() if k.startswith("TRAIN_")},
            "USER_FLAG": os.environ.get("USER_FLAG"),
            "cwd": os.getcwd(),
        },
        sort_keys=True,
    ),
    flush=True,
)
print(f"resumed from step {start}" if start else "fresh start", flush=True)
steps = int(os.environ.get("USER_STEPS", "4"))
pause_at = int(os.environ.get("USER_PAUSE_AT", "0"))
seen = []
for step in range(start + 1, steps + 1):
    seen.append(step)
    (run_dir / "steps.log").open("a").write(f"{step}\n")
    if step == pause_at:
        state.write_text(json.dumps({"step": step}))
        print(f"PAUSED step={step}", flush=True)
        while not stop:
            time.sleep(0.05)
    if stop:
        state.write_text(json.dumps({"step": step}))
        print(f"stopped after step {step}: checkpoint saved", flush=True)
        sys.exit(75)
state.write_text(json.dumps({"step": steps}))
code = int(os.environ.get("USER_EXIT", "0"))
if os.environ.get("USER_NO_RESULT") != "1":
    result = {
        "status": "succeeded" if code == 0 else "failed",
        "best_metric": 0.5,
        "metric_name": "val_accuracy",
        "checkpoint_url": f"{os.environ['CHECKPOINT_URL']}/{os.environ['RUN_ID']}/step.json",
        "epochs_done": 1,
        "steps": steps,
        "error": None if code == 0 else "user trainer failed on purpose",
    }
    (run_dir / "result.json").write_text(json.dumps(result))
print(f"done: steps {seen}", flush=True)
sys.exit(code)

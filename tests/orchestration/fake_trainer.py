"""A stand-in for `python -m training` with the same signal contract, for the launcher tests:
prints its environment as one JSON line, then numbered lines; on SIGTERM it "checkpoints",
prints that it stops and exits 75 (EX_TEMPFAIL). With FAKE_IGNORE_TERM=1 it ignores SIGTERM
(so the launcher must SIGKILL it). It starts a grandchild in its own group (like a DataLoader
worker) and writes both pids to FAKE_PIDFILE."""

import json
import os
import signal
import subprocess
import sys
import time

stop = False


def on_term(signum, frame):
    global stop
    stop = True


if os.environ.get("FAKE_IGNORE_TERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
else:
    signal.signal(signal.SIGTERM, on_term)

worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
if os.environ.get("FAKE_PIDFILE"):
    with open(os.environ["FAKE_PIDFILE"], "w") as f:
        json.dump({"trainer": os.getpid(), "worker": worker.pid}, f)
print("ENV " + json.dumps(dict(os.environ), sort_keys=True), flush=True)
lines = int(os.environ.get("FAKE_LINES", "3"))
for i in range(lines):
    print(f"line {i}", flush=True)
    time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
if os.environ.get("FAKE_WAIT") == "1":
    while not stop:
        time.sleep(0.05)
    worker.terminate()  # first: printing fails when the reader (the task) is gone
    print("stopping after checkpoint", flush=True)
    sys.exit(75)
worker.terminate()
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))

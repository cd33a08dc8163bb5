"""Trainer CPU benchmark: training steps per second on the digits version (built by the real
pipeline from the sample lake), the default small ResNet, with and without each switch:
AMP bf16, gradient checkpointing, channels_last, torch.compile, 2 DataLoader workers.

Each variant runs in its own subprocess (fresh process state; a compile that takes too long is
cut off and reported as such), interleaved over rounds; the figure is the median, printed as a
ratio to the baseline (fp32, no checkpointing, NCHW, eager, 0 workers) measured in the same run.
On CPU none of these switches is expected to pay: they are there for GPUs (bench/train_gpu.py);
this records what they cost where there is none.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._results import write_section  # noqa: E402

WORK = Path(__file__).resolve().parent / "_work" / "train"
REPO = Path(__file__).resolve().parents[1]

VARIANTS: dict[str, dict[str, object]] = {
    "baseline (fp32)": {},
    "AMP bf16": {"amp": "bf16"},
    "grad checkpointing": {"grad_checkpointing": True},
    "channels_last": {"channels_last": "on"},
    "torch.compile": {"compile": True},
    "num_workers 2": {"num_workers": 2},
}


THREADS = "1"


def env_for_work() -> dict[str, str]:
    return {
        **os.environ,
        # One intra-op thread per variant: on a shared 2-core box, OpenMP threads that spin
        # while another process holds the other core make steps 10x slower at random, and
        # the ratios would measure the neighbours, not the switches.
        "OMP_NUM_THREADS": THREADS,
        "LAKETRAIN_HOME": str(WORK),
        "LAKE_DIR": str(WORK / "lake"),
        "DATA_ROOT": str(WORK / "data"),
        "SETTLE_SECONDS": "0",
        "RECIPES_DIR": str(REPO / "recipes"),
    }


def ensure_version() -> None:
    """Build the digits version once (kept under bench/_work between runs)."""
    if (WORK / "data" / "datasets" / "digits").is_dir():
        return
    (WORK / "lake").mkdir(parents=True, exist_ok=True)
    code = (
        "from pathlib import Path; from pipeline.lake.sample_lake import write_digits; "
        "from pipeline.datasets.build import build; "
        f"write_digits(Path({str(WORK / 'lake')!r})); print(build('digits'))"
    )
    subprocess.run([sys.executable, "-c", code], env=env_for_work(), check=True, cwd=REPO)


def measure(variant: str, steps: int, warmup: int, batch: int) -> dict[str, float]:
    """In this process: steps/s of one variant (runs in a subprocess of main())."""
    import torch

    from pipeline.datasets.reader import open_version
    from training.config import build_config
    from training.loop import Trainer

    reader = open_version("digits", data_root=WORK / "data")
    cfg = build_config(
        {"batch_size": batch, "epochs": 1000, "checkpoint_every": 0, **VARIANTS[variant]}
    )
    t = Trainer(cfg, reader.split("train"), reader.split("val"), device=torch.device("cpu"))

    def batches():
        while True:
            t.sampler.set_epoch(t.epoch, 0)
            yield from t.loader
            t.epoch += 1

    it = batches()
    t0 = time.perf_counter()
    for _ in range(warmup):
        t.train_step(*next(it))
    warm_s = time.perf_counter() - t0
    windows = []
    for _ in range(3):
        t0 = time.perf_counter()
        for _ in range(steps):
            t.train_step(*next(it))
        windows.append(steps / (time.perf_counter() - t0))
    return {"steps_per_s": statistics.median(windows), "warmup_s": warm_s}


def run_variant(variant: str, args: argparse.Namespace, timeout: float) -> dict[str, float] | None:
    cmd = [
        sys.executable,
        __file__,
        "--variant",
        variant,
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--batch",
        str(args.batch),
    ]
    try:
        proc = subprocess.run(
            cmd, env=env_for_work(), capture_output=True, text=True, timeout=timeout, cwd=REPO
        )
    except subprocess.TimeoutExpired:
        return None
    if proc.returncode != 0:
        print(f"  {variant}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=30, help="timed steps per window (3 windows)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds per variant")
    p.add_argument("--compile-timeout", type=float, default=240.0)
    p.add_argument("--threads", default="1", help="OMP_NUM_THREADS of each variant's process")
    args = p.parse_args()
    global THREADS
    THREADS = args.threads
    if args.variant:
        print(json.dumps(measure(args.variant, args.steps, args.warmup, args.batch)))
        return

    ensure_version()
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    warm: dict[str, float] = {}
    for r in range(args.rounds):
        for variant in VARIANTS:
            timeout = args.compile_timeout if variant == "torch.compile" else 300
            res = run_variant(variant, args, timeout)
            if res is None:
                print(
                    f"round {r}: {variant}: no result (timed out after {timeout:.0f} s or failed)"
                )
                continue
            rates[variant].append(res["steps_per_s"])
            warm[variant] = res["warmup_s"]
            print(
                f"round {r}: {variant}: {res['steps_per_s']:.1f} steps/s (warmup {res['warmup_s']:.1f} s)",
                flush=True,
            )
    base = statistics.median(rates["baseline (fp32)"])
    lines = [
        f"Digits version (1,413 train images, 1x8x8), default ResNet (width 32, depth 2), batch {args.batch}, CPU, "
        f"{args.threads} intra-op thread(s); median of {args.rounds} rounds x 3 windows of {args.steps} steps, each variant in its own process.",
        "",
        "| variant | steps/s | samples/s | ratio to baseline | first steps (s) |",
        "|---|---|---|---|---|",
    ]
    for variant, vals in rates.items():
        if not vals:
            lines.append(f"| {variant} | n/a | n/a | n/a | did not finish in time |")
            continue
        med = statistics.median(vals)
        lines.append(
            f"| {variant} | {med:.1f} | {med * args.batch:,.0f} | {med / base:.2f}x | {warm.get(variant, 0):.1f} |"
        )
    lines += [
        "",
        "A ratio above 1: the switch pays on this CPU; below 1: what it costs here. Gradient "
        "checkpointing always pays a recomputed forward for its memory saving. Whether bf16 AMP pays "
        "on a CPU depends on its bf16 matrix instructions (AVX512-BF16/AMX); the trainer's `amp=auto` "
        "keeps CPUs in fp32 (predictable numerics), `TRAIN_AMP=bf16` opts in. Loader workers add IPC "
        "to a memory-mapped reader that is already fast (MEASURED.md). The machine is shared and "
        "noisy: compare ratios, not absolutes; GPU figures are in the `bench/train_gpu.py` section.",
    ]
    body = "\n".join(lines)
    print(body)
    write_section("bench/train.py", body)


if __name__ == "__main__":
    main()

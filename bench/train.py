"""Trainer CPU benchmark: training steps per second on the digits version (built by the real
pipeline from the sample lake), the default small ResNet, with and without each switch:
AMP bf16, gradient checkpointing, channels_last, torch.compile, 2 DataLoader workers.

Each variant runs in its own subprocess (fresh process state; a compile that takes too long is
cut off and reported as such), interleaved over rounds; the figure is the median, printed as a
ratio to the baseline (fp32, no checkpointing, NCHW, eager, 0 workers) measured in the same run.
On CPU none of these switches is expected to pay: they are there for GPUs (bench/train_gpu.py);
this records what they cost where there is none.

Two more figures, each against its baseline in the same run (``--api`` runs only these):

- the public dataset adapter (``training.api.VersionDataset``, which the built-in loop now
  uses) against the loader the built-in loop had before it (its sampler's epoch permutation
  cut into batches, a DataLoader over the reader's batched fetch): the same batches, samples/s,
  loading only, CPU time, best of 9 alternating rounds (target >= 0.95x);
- checkpointing every 50 steps against checkpoints only at the end, through the trainer's own
  save path (state dict, local snapshot, background upload to ``file://``): the time the loop
  is blocked per checkpoint, as a share of the steady-state step time over those 50 steps
  (target <= 5 %), and the wall time of the two runs.
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
            yield from t.data  # each pass runs the rest of an epoch, then moves to the next

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


def measure_adapter(epochs: int) -> dict[str, float]:
    """In this process: samples/s of the public adapter and of the earlier loader, interleaved."""
    from pipeline.datasets.reader import open_version
    from training.api import VersionDataset
    from training.data import epoch_permutation, make_loader

    train = open_version("digits", data_root=WORK / "data").split("train")
    data = VersionDataset(train, batch_size=64, seed=0)
    samples = epochs * len(data) * 64

    def old_batches(epoch: int, batch: int = 64) -> list[list[int]]:
        # The built-in loop's sampler before the adapter (ResumableBatchSampler.batches, one
        # process): the epoch's permutation, cut into whole batches.
        order = epoch_permutation(len(train), 0, epoch)
        return [order[i * batch : (i + 1) * batch].tolist() for i in range(len(train) // batch)]

    def adapter() -> None:
        data.set_epoch(0)
        for _ in range(epochs):
            for _batch in data:
                pass

    def loader() -> None:
        for epoch in range(epochs):
            for _batch in make_loader(train, old_batches(epoch), num_workers=0, pin_memory=False):
                pass

    # CPU time of this (single-threaded) process, best of 9 in alternating order: on a shared
    # machine the neighbours' load inflates wall time at random, and only ever slows a round
    # down, so the fastest round is the closest to each path's own cost.
    rates: dict[str, list[float]] = {"adapter": [], "loader": []}
    for i in range(9):
        for name, fn in (("adapter", adapter), ("loader", loader))[:: 1 if i % 2 else -1]:
            t0 = time.process_time()
            fn()
            rates[name].append(samples / (time.process_time() - t0))
    return {k: max(v) for k, v in rates.items()}


def measure_checkpoints(every: int, steps: int, batch: int) -> dict[str, float]:
    """In this process: one run of ``steps`` steps saving every ``every`` (0 = at the end
    only), the trainer's save path; the time blocked in saves and the step times."""
    import shutil

    import torch

    from pipeline.datasets.reader import open_version
    from training.api import RunReport, checkpoints
    from training.config import build_config
    from training.loop import Trainer

    reader = open_version("digits", data_root=WORK / "data")
    cfg = build_config({"batch_size": batch, "epochs": 1000, "checkpoint_every": every})
    objects = WORK / f"objects-{every}"
    shutil.rmtree(objects, ignore_errors=True)
    manager = checkpoints(objects.as_uri(), "bench", rank=0)
    report = RunReport(manager, run_id="bench")
    t = Trainer(
        cfg,
        reader.split("train"),
        reader.split("val"),
        device=torch.device("cpu"),
        report=report,
        save_fn=lambda state, *, step, epoch, metric, is_best: manager.save(step, state),
    )

    def batches():
        while True:
            yield from t.data

    it = batches()
    for _ in range(5):  # warm-up, not timed
        t.train_step(*next(it))
    blocked, step_s, saves = 0.0, 0.0, 0
    t_run = time.perf_counter()
    for _ in range(steps):
        t0 = time.perf_counter()
        t.train_step(*next(it))
        t1 = time.perf_counter()
        step_s += t1 - t0
        if every and t.step % every == 0:
            t._save()
            blocked += time.perf_counter() - t1
            saves += 1
    run_s = time.perf_counter() - t_run
    t._save()  # the end-of-run checkpoint both runs have
    report.finish("succeeded", steps=t.step)
    return {"blocked_s": blocked, "saves": saves, "step_s": step_s / steps, "run_s": run_s}


def api_figures(args: argparse.Namespace) -> list[str]:
    """The adapter and checkpoint figures, each in processes of its own, interleaved."""
    adapter = run_json(["--figure", "adapter", "--epochs", str(args.api_epochs)], 600)
    runs: dict[int, list[dict[str, float]]] = {50: [], 0: []}
    for _ in range(args.rounds):
        for every in (50, 0):
            res = run_json(
                ["--figure", "checkpoint", "--every", str(every), "--steps", str(args.ckpt_steps)]
                + ["--batch", str(args.batch)],  # the batch the table names
                900,
            )
            if res is not None:
                runs[every].append(res)
    lines = ["", "**The public API** (same run, same machine):", ""]
    lines += ["| measure | figure |", "|---|---|"]
    if adapter:
        ratio = adapter["adapter"] / adapter["loader"]
        lines += [
            f"| `VersionDataset` (the public adapter, the built-in loop's loader), CPU time | {adapter['adapter']:,.0f} samples/s |",
            f"| baseline: the built-in loop's loader before the adapter (its sampler's epoch order, a DataLoader over the reader's batched fetch) | {adapter['loader']:,.0f} samples/s |",
            f"| **adapter / baseline** | **{ratio:.2f}x** (target >= 0.95x) {'OK' if ratio >= 0.95 else 'MISSED'} |",
        ]
    if runs[50] and runs[0]:
        every = runs[50]
        per_save = statistics.median(r["blocked_s"] / max(r["saves"], 1) for r in every)
        step_s = statistics.median(r["step_s"] for r in every)
        share = per_save / (50 * step_s)
        wall = statistics.median(r["run_s"] for r in every) / statistics.median(
            r["run_s"] for r in runs[0]
        )
        lines += [
            f"| steady-state step (ResNet width 32, batch {args.batch}) | {step_s * 1e3:.1f} ms |",
            f"| loop blocked per checkpoint (state dict + local snapshot; upload in the background) | {per_save * 1e3:.1f} ms |",
            f"| **blocked / the 50 steps between checkpoints** | **{share * 100:.2f} %** (target <= 5 %) {'OK' if share <= 0.05 else 'MISSED'} |",
            f"| wall time of {args.ckpt_steps} steps, every 50 / end only (median of {args.rounds}) | {wall:.3f}x |",
        ]
    lines += [
        "",
        "The adapter holds only (version, seed, epoch, cursor) and hands the reader's batched "
        "fetch on; the loop waits for a checkpoint only while `torch.save` writes the local "
        "snapshot (the upload, the commit marker, `latest`/`best`, retention and the store "
        "rows run in the manager's upload thread). The wall-time row moves with the load the "
        "machine's other processes put on it between the two runs; the blocked share is timed "
        "inside one run.",
    ]
    return lines


def run_json(extra: list[str], timeout: float) -> dict[str, float] | None:
    cmd = [sys.executable, __file__, *extra]
    try:
        proc = subprocess.run(
            cmd, env=env_for_work(), capture_output=True, text=True, timeout=timeout, cwd=REPO
        )
    except subprocess.TimeoutExpired:
        print(f"  {' '.join(extra)}: timed out", file=sys.stderr)
        return None
    if proc.returncode != 0:
        print(f"  {' '.join(extra)}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


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
    p.add_argument("--api", action="store_true", help="only the public-API figures")
    p.add_argument("--api-epochs", type=int, default=60, help="epochs per adapter round")
    p.add_argument("--ckpt-steps", type=int, default=200, help="steps per checkpoint run")
    p.add_argument("--figure", choices=("adapter", "checkpoint"), help=argparse.SUPPRESS)
    p.add_argument("--epochs", type=int, default=20, help=argparse.SUPPRESS)
    p.add_argument("--every", type=int, default=50, help=argparse.SUPPRESS)
    args = p.parse_args()
    global THREADS
    THREADS = args.threads
    if args.variant:
        print(json.dumps(measure(args.variant, args.steps, args.warmup, args.batch)))
        return
    if args.figure == "adapter":
        print(json.dumps(measure_adapter(args.epochs)))
        return
    if args.figure == "checkpoint":
        print(json.dumps(measure_checkpoints(args.every, args.steps, args.batch)))
        return

    ensure_version()
    if args.api:
        print("\n".join(api_figures(args)))
        return
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
    lines += api_figures(args)
    body = "\n".join(lines)
    print(body)
    write_section("bench/train.py", body)


if __name__ == "__main__":
    main()

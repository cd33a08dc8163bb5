"""Trainer GPU benchmark: a ResNet-50 (training.models.ResNet50, 25.6 M parameters) on synthetic
224x224 batches, through the trainer's own pieces (AMP plan, GradScaler, on-device uint8
normalisation, channels_last, gradient checkpointing, torch.compile, AdamW without decay on
norms/biases, clipping, zero_grad(set_to_none=True)).

Measures, in one run: fp32 (TF32 off: the true fp32 baseline) vs AMP bf16 / fp16 peak memory and
step rate; gradient checkpointing's memory/time trade; channels_last; torch.compile. Targets:
AMP uses >= 35 % less peak memory than fp32 and runs >= 1.5x its step rate.

Without CUDA it prints "no CUDA" and exits 0 (``--cpu-smoke`` runs every code path on CPU with
tiny sizes, for tests). Results go to bench/RESULTS.md (section ``bench/train_gpu.py``) and, with
``--out FILE``, to FILE as markdown plus FILE.json (for collecting them from a borrowed GPU box).
Designed to finish in < 4 minutes on one H100/H200-class GPU; ``--budget-s`` skips what is left
(torch.compile comes last) when time runs short.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@dataclass(frozen=True)
class Variant:
    name: str
    amp: str = "off"
    tf32: bool = False
    channels_last: bool = False
    grad_checkpointing: bool = False
    compile: bool = False


VARIANTS = [
    Variant("fp32 (baseline, TF32 off)"),
    Variant("fp32 + TF32", tf32=True),
    Variant("AMP bf16", amp="bf16"),
    Variant("AMP fp16 + GradScaler", amp="fp16"),
    Variant("fp32 + channels_last", channels_last=True),
    Variant("fp32 + grad checkpointing", grad_checkpointing=True),
    Variant("AMP bf16 + grad checkpointing", amp="bf16", grad_checkpointing=True),
    Variant("AMP bf16 + channels_last", amp="bf16", channels_last=True),
    Variant("AMP bf16 + channels_last + compile", amp="bf16", channels_last=True, compile=True),
]


def run_variant(
    v: Variant, *, device: Any, batch: int, size: int, steps: int, warmup: int, classes: int
) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F

    from training.amp import resolve_amp
    from training.config import build_config
    from training.data import DeviceTransform
    from training.init import init_weights
    from training.models import ResNet50, enable_grad_checkpointing
    from training.optim import build_optimizer

    torch.backends.cuda.matmul.allow_tf32 = v.tf32
    torch.backends.cudnn.allow_tf32 = v.tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    model = ResNet50(3, classes)
    init_weights(model, "relu")
    if v.grad_checkpointing:
        enable_grad_checkpointing(model)
    model = model.to(device)
    if v.channels_last:
        model = model.to(memory_format=torch.channels_last)
    train_model = torch.compile(model) if v.compile else model
    cfg = build_config({"lr": 1e-3, "weight_decay": 0.05})
    opt = build_optimizer(model, cfg)
    plan = resolve_amp(v.amp, device)
    scaler = plan.make_scaler()
    tf = DeviceTransform.build(
        [123.7, 116.3, 103.5],
        [58.4, 57.1, 57.4],
        (3, size, size),
        device,
        channels_last=v.channels_last,
        augment=False,
        seed=0,
    )
    g = torch.Generator(device=device).manual_seed(0)
    xs = [
        torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8, device=device, generator=g)
        for _ in range(2)
    ]
    ys = [torch.randint(0, classes, (batch,), device=device, generator=g) for _ in range(2)]

    def step(i: int) -> float:
        x = tf(xs[i % 2])
        with plan.autocast():
            logits = train_model(x)
        loss = F.cross_entropy(logits.float(), ys[i % 2])
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)
        return loss

    cuda = device.type == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    t0 = time.perf_counter()
    for i in range(warmup):
        step(i)
    sync()
    warm_s = time.perf_counter() - t0
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    last = None
    for i in range(steps):
        last = step(i)
    sync()
    dt = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else float("nan")
    out = {
        "variant": v.name,
        "steps_per_s": steps / dt,
        "images_per_s": steps * batch / dt,
        "peak_gib": peak,
        "warmup_s": warm_s,
        "final_loss": float(last) if last is not None else None,
    }
    return out  # the model, optimizer and batches die with this frame; main() frees the cache


def release(device: Any) -> None:
    import torch

    gc.collect()
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def render(rows: list[dict[str, Any]], meta: dict[str, Any]) -> tuple[str, list[str]]:
    by = {r["variant"]: r for r in rows}
    base = by.get(VARIANTS[0].name)
    lines = [
        f"{meta['device']}, torch {meta['torch']}; ResNet-50 ({meta['params_m']:.1f} M parameters), synthetic "
        f"{meta['batch']}x3x{meta['size']}x{meta['size']} uint8 batches normalised on the device, AdamW, "
        f"{meta['steps']} timed steps after {meta['warmup']} warm-up steps per variant.",
        "",
        "| variant | steps/s | images/s | speed vs fp32 | peak memory (GiB) | memory vs fp32 | warm-up (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        speed = f"{r['steps_per_s'] / base['steps_per_s']:.2f}x" if base else "-"
        mem = "-"
        if base and base["peak_gib"] == base["peak_gib"] and base["peak_gib"] > 0:  # NaN on CPU
            delta = 1 - r["peak_gib"] / base["peak_gib"]
            mem = f"{delta * 100:.0f} % less" if delta >= 0 else f"{-delta * 100:.0f} % more"
        lines.append(
            f"| {r['variant']} | {r['steps_per_s']:.2f} | {r['images_per_s']:,.0f} | {speed} | {r['peak_gib']:.2f} | {mem} | {r['warmup_s']:.1f} |"
        )
    for name in meta.get("skipped", []):
        lines.append(f"| {name} | skipped (time budget) | | | | | |")
    verdicts = []
    # The targets compare like with like: the trainer's CUDA default (AMP bf16 + channels_last)
    # against fp32 in the same layout, and plain AMP bf16 against plain fp32.
    pairs = [
        (by.get("AMP bf16 + channels_last"), by.get("fp32 + channels_last")),
        (by.get("AMP bf16") or by.get("AMP fp16 + GradScaler"), base),
    ]
    amp = by.get("AMP bf16") or by.get("AMP fp16 + GradScaler")
    if base and amp:
        for a, f in pairs:
            if not a or not f:
                continue
            mem_saving = 1 - a["peak_gib"] / f["peak_gib"]
            speedup = a["steps_per_s"] / f["steps_per_s"]
            verdicts += [
                f"target AMP peak memory >= 35 % below fp32: {a['variant']} vs {f['variant']}: {mem_saving * 100:.0f} % less -> {'PASS' if mem_saving >= 0.35 else 'FAIL'}",
                f"target AMP step rate >= 1.5x fp32: {a['variant']} vs {f['variant']}: {speedup:.2f}x -> {'PASS' if speedup >= 1.5 else 'FAIL'}",
            ]
        gc_row = by.get("AMP bf16 + grad checkpointing")
        if gc_row:
            verdicts.append(
                f"grad checkpointing trade (vs AMP bf16): {(1 - gc_row['peak_gib'] / amp['peak_gib']) * 100:.0f} % less peak memory "
                f"for {gc_row['steps_per_s'] / amp['steps_per_s']:.2f}x the step rate"
            )
    lines += [""] + [f"- {v}" for v in verdicts]
    return "\n".join(lines), verdicts


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument(
        "--budget-s",
        type=float,
        default=200.0,
        help="skip the remaining variants after this many seconds",
    )
    p.add_argument("--no-compile", action="store_true")
    p.add_argument(
        "--out", type=Path, help="also write the markdown here (and the raw figures to OUT.json)"
    )
    p.add_argument("--no-write", action="store_true", help="don't touch bench/RESULTS.md")
    p.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="run every code path on CPU with tiny sizes (tests)",
    )
    args = p.parse_args()

    import torch

    if args.cpu_smoke:
        device = torch.device("cpu")
        args.batch, args.size, args.steps, args.warmup, args.classes = 2, 32, 1, 1, 10
        variants = [v for v in VARIANTS if v.amp != "fp16" and not v.compile]
    elif not torch.cuda.is_available():
        print("no CUDA: bench/train_gpu.py needs a GPU; nothing measured")
        return 0
    else:
        device = torch.device("cuda", 0)
        variants = [v for v in VARIANTS if not (v.compile and args.no_compile)]
        if not torch.cuda.is_bf16_supported():
            variants = [v for v in variants if v.amp != "bf16"]
    from training.models import ResNet50

    meta = {
        "device": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else "CPU (smoke run)",
        "torch": torch.__version__,
        "batch": args.batch,
        "size": args.size,
        "steps": args.steps,
        "warmup": args.warmup,
        "params_m": sum(q.numel() for q in ResNet50(3, args.classes).parameters()) / 1e6,
        "skipped": [],
    }
    print(
        f"{meta['device']}: ResNet-50 {meta['params_m']:.1f} M params, batch {args.batch}x3x{args.size}x{args.size}",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    start = time.perf_counter()
    for v in variants:
        if time.perf_counter() - start > args.budget_s:
            meta["skipped"].append(v.name)
            print(f"{v.name}: skipped, time budget of {args.budget_s:.0f} s spent", flush=True)
            continue
        try:
            r = run_variant(
                v,
                device=device,
                batch=args.batch,
                size=args.size,
                steps=args.steps,
                warmup=args.warmup,
                classes=args.classes,
            )
        except Exception as exc:  # one failing variant (e.g. compile) must not lose the others
            print(f"{v.name}: FAILED {type(exc).__name__}: {str(exc)[:500]}", flush=True)
            meta["skipped"].append(f"{v.name} (failed: {type(exc).__name__})")
            release(device)
            continue
        rows.append(r)
        print(
            f"{v.name}: {r['steps_per_s']:.2f} steps/s, {r['images_per_s']:,.0f} img/s, peak {r['peak_gib']:.2f} GiB, warm-up {r['warmup_s']:.1f} s",
            flush=True,
        )
    body, verdicts = render(rows, meta)
    print()
    print(body, flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(f"## bench/train_gpu.py\n\n{body}\n")
        args.out.with_name(args.out.name + ".json").write_text(
            json.dumps({"meta": meta, "rows": rows, "verdicts": verdicts}, indent=2)
        )
    if not args.no_write and not args.cpu_smoke:
        from bench._results import write_section

        write_section("bench/train_gpu.py", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

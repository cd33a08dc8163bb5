"""A trainer of your own on a laketrain dataset version, through laketrain's public API
(docs/training-api.md): its own model (an MLP over the normalised, flattened inputs) and its
own loss (label-smoothed cross-entropy, written out). laketrain gives it the version, the data
in DDP-sharded batches with exact resume, checkpoints, SIGTERM handling and the run's records.

    DATASET_NAME=digits CHECKPOINT_URL=file:///tmp/ckpt RUN_ID=my-run \
        python examples/custom_trainer/train.py

Rerun with the same RUN_ID after a stop (exit 75) and it continues from its last checkpoint.
Under torchrun (``torchrun --nproc_per_node 2 examples/custom_trainer/train.py``) each process
trains on its share of every batch.
"""

from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F
from torch import nn

from training import api

EPOCHS = int(os.environ.get("TRAIN_EPOCHS", "5"))
BATCH = int(os.environ.get("TRAIN_BATCH_SIZE", "64"))
LR = float(os.environ.get("TRAIN_LR", "0.003"))
SEED = int(os.environ.get("TRAIN_SEED", "0"))
SAVE_EVERY = int(os.environ.get("TRAIN_CHECKPOINT_EVERY", "50"))


class Net(nn.Module):
    def __init__(self, n_in: int, n_classes: int, mean: torch.Tensor, std: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("mean", mean)
        self.register_buffer("std", std.clamp(min=1e-6))
        self.body = nn.Sequential(nn.Linear(n_in, 128), nn.GELU(), nn.Linear(128, n_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = (x.float() - self.mean) / self.std  # per channel (images) or per feature (tables)
        return self.body(x.flatten(1))


def smoothed_ce(logits: torch.Tensor, y: torch.Tensor, eps: float = 0.05) -> torch.Tensor:
    logp = F.log_softmax(logits, dim=-1)
    return -((1 - eps) * logp.gather(1, y[:, None]).squeeze(1) + eps * logp.mean(-1)).mean()


def main() -> int:
    cuda = torch.cuda.is_available()
    dist = api.init_distributed("cuda" if cuda else "cpu")  # torchrun's variables, if any
    dev = torch.device("cuda", dist.local_rank) if cuda else torch.device("cpu")
    try:
        version = api.open_version()  # DATASET_NAME, DATASET_VERSION, DATA_ROOT
    except LookupError as exc:  # no such version: refused, not retried (the contract's 3)
        print(f"error: {exc}", file=sys.stderr)
        return api.EXIT_DATA
    train = api.VersionDataset(version.split("train"), batch_size=BATCH, seed=SEED)
    val = api.VersionDataset(version.split("val"), batch_size=256, shuffle=False, drop_last=False)
    shape = version.get_batch([0])[0].shape[1:]
    stats_shape = (-1,) + (1,) * (len(shape) - 1)  # mean/std broadcast over the sample
    mean = torch.tensor(version.mean, dtype=torch.float32).view(stats_shape)
    std = torch.tensor(version.std, dtype=torch.float32).view(stats_shape)
    torch.manual_seed(SEED)
    model = Net(int(torch.tensor(shape).prod()), len(version.classes), mean, std).to(dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model) if dist.enabled else model
    opt = torch.optim.AdamW(model.parameters(), lr=LR)

    ckpt = api.checkpoints()  # CHECKPOINT_URL/RUN_ID; rank 0 writes
    report = api.RunReport.from_env(ckpt, metric_name="val_accuracy")
    report.start(version.version_id, {"epochs": EPOCHS, "batch_size": BATCH, "lr": LR})
    step, best = 0, None
    state = ckpt.load_latest()
    if state is not None:  # a retry: continue exactly where the last checkpoint stopped
        model.load_state_dict(state["model"])  # loaded on the CPU, copied onto dev
        opt.load_state_dict(state["optimizer"])
        train.load_state_dict(state["data"])
        report.load_state_dict(state, up_to_step=state["step"])
        step, best = state["step"], state["best"]
        print(f"resumed from step {step} (epoch {train.epoch})", flush=True)

    def save(metric: float | None = None) -> None:
        state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "best": best}
        ckpt.save(step, {**state, "data": train.state_dict(), **report.state_dict()}, metric=metric)

    with api.Preemption() as stop:
        while train.epoch < EPOCHS:
            epoch = train.epoch
            for x, y in train:
                loss = smoothed_ce(ddp(x.to(dev)), y.to(dev))
                opt.zero_grad()
                loss.backward()
                opt.step()
                step += 1
                report.log(kind="train", step=step, epoch=epoch, loss=float(loss))
                print(f"step {step} loss {float(loss):.4f}", flush=True)
                if stop.should_stop():  # SIGTERM: this step is done; save it and stop
                    save()
                    return report.finish("preempted", steps=step, epochs_done=epoch)
                if SAVE_EVERY and step % SAVE_EVERY == 0:
                    save()
            correct = seen = 0
            with torch.no_grad():
                for x, y in val:
                    correct += int((model(x.to(dev)).argmax(-1).cpu() == y).sum())
                    seen += len(y)
            if dist.enabled:
                sums = torch.tensor([correct, seen], dtype=torch.float64, device=dev)
                torch.distributed.all_reduce(sums)
                correct, seen = int(sums[0]), int(sums[1])
            acc = correct / max(seen, 1)
            best = acc if best is None else max(best, acc)
            report.log(kind="epoch", step=step, epoch=epoch, val_accuracy=acc)
            save(metric=acc)
    return report.finish("succeeded", best_metric=best, steps=step, epochs_done=EPOCHS)


if __name__ == "__main__":
    sys.exit(main())

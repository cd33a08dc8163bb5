"""Each switch of the craft, shown by its effect on a real model and real digits images."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tests.training.trainer_support import ArrayReader, digits_reader
from training.amp import resolve_amp
from training.config import ConfigError, build_config
from training.data import DeviceTransform, VersionDataset, epoch_permutation
from training.device import release_cached_memory
from training.init import init_weights
from training.loop import Trainer
from training.losses import FocalLoss, build_loss, class_weights
from training.models import ResNet, build_model, enable_grad_checkpointing, pick_architecture
from training.optim import param_groups


def make_trainer(reader: ArrayReader | None = None, **values: object) -> Trainer:
    reader = reader or digits_reader(200)
    cfg = build_config({"batch_size": 32, "width": 8, "depth": 1, "epochs": 1, **values})
    return Trainer(cfg, reader.split("train"), reader.split("val"), device=torch.device("cpu"))


def one_batch(t: Trainer) -> tuple[torch.Tensor, torch.Tensor]:
    return next(iter(t.data))


# ------------------------------------------------------------------------------- memory
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_set_to_none_frees_gradients(set_to_none: bool) -> None:
    t = make_trainer(set_to_none=set_to_none)
    t.train_step(*one_batch(t))
    grads = [p.grad for p in t.model.parameters()]
    if set_to_none:
        assert all(g is None for g in grads)
    else:
        assert all(g is not None and not g.any() for g in grads)


def test_evaluate_runs_in_eval_mode_without_grad_and_restores_train_mode() -> None:
    t = make_trainer()
    seen: list[tuple[bool, bool]] = []
    t.model.head.register_forward_hook(
        lambda m, i, o: seen.append((m.training, torch.is_grad_enabled()))
    )
    t.model.train()
    val = t.evaluate()
    assert seen and all(s == (False, False) for s in seen)
    assert t.model.training is True
    assert 0.0 <= val["val_accuracy"] <= 1.0 and val["val_samples"] == len(t.val_reader)


def test_empty_cache_only_on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(1))
    assert release_cached_memory(torch.device("cpu")) is False
    assert calls == []
    assert release_cached_memory(torch.device("cuda", 0)) is True  # the call only, no CUDA needed
    assert calls == [1]
    assert release_cached_memory(torch.device("cuda", 0), enabled=False) is False
    assert calls == [1]


# ---------------------------------------------------------------------- LR and optimizer
def test_no_weight_decay_on_norms_and_biases() -> None:
    model = ResNet(1, 10, width=8, depth=1)
    groups = param_groups(model, 0.05)
    decay, no_decay = groups
    assert decay["weight_decay"] == 0.05 and no_decay["weight_decay"] == 0.0
    names = {id(p): n for n, p in model.named_parameters()}
    assert all(p.ndim >= 2 for p in decay["params"])
    no_decay_names = {names[id(p)] for p in no_decay["params"]}
    assert {n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)} <= {
        n.rsplit(".", 1)[0] for n in no_decay_names
    }
    assert "head.3.bias" in no_decay_names
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    t = make_trainer(weight_decay=0.05, optimizer="sgd")
    assert [g["weight_decay"] for g in t.optimizer.param_groups] == [0.05, 0.0]
    assert (
        isinstance(t.optimizer, torch.optim.SGD) and t.optimizer.param_groups[0]["momentum"] == 0.9
    )


def test_trainer_schedule_warms_up_then_decays() -> None:
    t = make_trainer(epochs=3, warmup_steps=2, lr=0.01)
    lrs = []
    for _ in range(4):
        lrs.append(t.train_step(*one_batch(t))["lr"])
    assert (
        lrs[0] == pytest.approx(0.005) and lrs[1] == lrs[2] == pytest.approx(0.01) and lrs[3] < 0.01
    )


# ----------------------------------------------------------------- gradient checkpointing
def _forward_backward(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor
) -> tuple[float, dict[str, torch.Tensor], int]:
    saved = [0]

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    return float(loss.detach()), {n: p.grad.clone() for n, p in model.named_parameters()}, saved[0]


def test_grad_checkpointing_gives_the_same_grads_with_fewer_saved_activations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    plain = ResNet(1, 10, width=16, depth=2)
    init_weights(plain, "relu")
    with torch.no_grad():  # non-zero last gammas, so every branch takes part in the check
        for m in plain.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
    ckpt = ResNet(1, 10, width=16, depth=2)
    ckpt.load_state_dict(plain.state_dict())
    assert enable_grad_checkpointing(ckpt) == 2  # 6 blocks → ceil(6 / 4) segments
    calls = []
    original = torch.utils.checkpoint.checkpoint
    monkeypatch.setattr(
        torch.utils.checkpoint, "checkpoint", lambda *a, **k: calls.append(1) or original(*a, **k)
    )

    x, y = digits_reader(64)._x[:32].astype(np.float32) / 255.0, digits_reader(64)._y[:32]
    x, y = torch.from_numpy(x), torch.from_numpy(y)
    loss_a, grads_a, saved_a = _forward_backward(plain, x, y)
    loss_b, grads_b, saved_b = _forward_backward(ckpt, x, y)
    assert len(calls) == 2
    assert loss_a == loss_b
    for name in grads_a:
        torch.testing.assert_close(grads_b[name], grads_a[name], rtol=1e-5, atol=1e-6, msg=name)
    assert saved_b < 0.6 * saved_a, (saved_b, saved_a)
    # The recomputation in backward must not fold the batch into the BN statistics twice.
    for (na, a), (nb, b) in zip(plain.named_buffers(), ckpt.named_buffers(), strict=True):
        assert na == nb
        torch.testing.assert_close(b, a, msg=na)


def test_trainer_switch_turns_checkpointing_on() -> None:
    assert make_trainer(grad_checkpointing=True).segments == 1  # 3 blocks → 1 segment
    assert make_trainer(grad_checkpointing=True, checkpoint_segments=3).segments == 3
    assert make_trainer(grad_checkpointing=False).segments == 0


# -------------------------------------------------------------------------------- AMP
def test_amp_bf16_on_cpu_runs_matmuls_in_bf16_and_keeps_batchnorm_fp32() -> None:
    t = make_trainer(amp="bf16")
    assert t.plan.dtype == torch.bfloat16 and not t.scaler.is_enabled()
    dtypes: dict[str, torch.dtype] = {}
    conv = t.model.stem[0]
    # (a forward hook that returns a value replaces the output: these return None)
    conv.register_forward_hook(lambda m, i, o: None if dtypes.setdefault("conv", o.dtype) else None)
    t.model.head[3].register_forward_hook(
        lambda m, i, o: None if dtypes.setdefault("linear", o.dtype) else None
    )
    out = t.train_step(*one_batch(t))
    assert math.isfinite(out["loss"])
    assert dtypes == {"conv": torch.bfloat16, "linear": torch.bfloat16}
    for m in t.model.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert m.weight.dtype == m.running_mean.dtype == torch.float32
    assert all(p.dtype == torch.float32 for p in t.model.parameters())


def test_amp_modes_resolve_per_device() -> None:
    assert resolve_amp("auto", torch.device("cpu")).dtype is None
    assert resolve_amp("off", torch.device("cpu")).enabled is False
    with pytest.raises(ConfigError, match="TRAIN_AMP / amp: fp16 needs a CUDA device"):
        resolve_amp("fp16", torch.device("cpu"))


# ------------------------------------------------------------------------------- loss
def test_label_smoothing_penalises_overconfidence() -> None:
    logits = torch.tensor([[8.0, 0.0, 0.0]])
    y = torch.tensor([0])
    plain = build_loss("ce", label_smoothing=0.0, focal_gamma=2.0, weight=None)(logits, y)
    smooth = build_loss("ce", label_smoothing=0.3, focal_gamma=2.0, weight=None)(logits, y)
    logp = F.log_softmax(logits, -1)
    expected = -(0.7 * logp[0, 0] + 0.3 * logp[0].mean())
    assert smooth > plain
    torch.testing.assert_close(smooth, expected)


def test_focal_loss_down_weights_easy_examples() -> None:
    logits = torch.tensor([[4.0, 0.0], [0.2, 0.0]])
    y = torch.tensor([0, 0])
    ce = F.cross_entropy(logits, y, reduction="none")
    torch.testing.assert_close(FocalLoss(gamma=0.0)(logits, y), ce.mean())
    focal = FocalLoss(gamma=2.0)
    easy, hard = focal(logits[:1], y[:1]), focal(logits[1:], y[1:])
    assert easy / ce[0] < 0.01 < 0.2 < hard / ce[1]


def test_class_weights_balanced_and_explicit_change_the_loss() -> None:
    w = class_weights("balanced", [30, 10, 0], 3)
    torch.testing.assert_close(w, torch.tensor([40 / 60, 40 / 20, 0.0]))
    assert class_weights("none", [1, 1], 2) is None
    with pytest.raises(ConfigError, match="2 weights given for 3 classes"):
        class_weights("1,2", [1, 1, 1], 3)
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 0.5, 0.0]])
    y = torch.tensor([0, 1])
    weighted = build_loss(
        "ce", label_smoothing=0.0, focal_gamma=2.0, weight=torch.tensor([1.0, 3.0, 1.0])
    )(logits, y)
    per = F.cross_entropy(logits, y, reduction="none")
    torch.testing.assert_close(weighted, (per[0] + 3 * per[1]) / 4)
    focal_w = build_loss(
        "focal", label_smoothing=0.0, focal_gamma=0.0, weight=torch.tensor([1.0, 3.0, 1.0])
    )(logits, y)
    torch.testing.assert_close(focal_w, weighted)


# --------------------------------------------------------------------- models and init
def test_init_follows_the_activation_and_zeroes_the_last_bn_of_each_branch() -> None:
    torch.manual_seed(0)
    relu = ResNet(3, 10, width=64, depth=2, act="relu")
    init_weights(relu, "relu")
    conv = relu.body.blocks[0].conv1  # 64 → 64, 3x3: He fan_out std = sqrt(2 / (64 * 9))
    assert float(conv.weight.detach().std()) == pytest.approx(math.sqrt(2 / (64 * 9)), rel=0.05)
    silu = ResNet(3, 10, width=64, depth=2, act="silu")
    init_weights(silu, "silu")
    conv = silu.body.blocks[0].conv1  # Xavier uniform: std = sqrt(2 / (fan_in + fan_out))
    assert float(conv.weight.detach().std()) == pytest.approx(math.sqrt(2 / (2 * 64 * 9)), rel=0.05)
    for block in relu.body.blocks:
        assert not block.bn2.weight.any()  # the residual branch starts as identity
        assert block.bn1.weight.eq(1).all()


def test_loaded_weights_are_not_reinitialised() -> None:
    a = make_trainer()
    for _ in range(2):
        a.train_step(*one_batch(a))
    state = a.state_dict()
    b = make_trainer()
    b.load_state_dict(state)
    for (n, pa), pb in zip(
        a.model.state_dict().items(), b.model.state_dict().values(), strict=True
    ):
        assert torch.equal(pa, pb), n
    assert b.model.body.blocks[0].bn2.weight.any()  # trained, not zero-initialised again


def test_model_is_picked_from_the_modality() -> None:
    assert pick_architecture("auto", "image", (1, 8, 8)) == "resnet"
    assert pick_architecture("auto", "table", (12,)) == "mlp"
    assert pick_architecture("auto", "array", (3, 4)) == "mlp"
    assert pick_architecture("mlp", "image", (1, 8, 8)) == "mlp"
    with pytest.raises(ConfigError, match="TRAIN_MODEL / model: resnet needs images"):
        build_model("resnet", (12,), 3, width=8, depth=1, activation="relu", dropout=0.0)
    x = np.random.default_rng(0).normal(size=(80, 12)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    t = make_trainer(ArrayReader(x, y, modality="table", mean=x.mean(0), std=x.std(0)))
    assert t.arch == "mlp" and math.isfinite(t.train_step(*one_batch(t))["loss"])


# ------------------------------------------------------------------------------- data
def test_loader_fetches_whole_fixed_size_batches_with_persistent_workers() -> None:
    reader = digits_reader(200).split("train")  # 160 samples
    data = VersionDataset(reader, batch_size=48, seed=1, num_workers=2)
    assert data.loader.persistent_workers is True and data.loader.pin_memory is False
    batches, seen = [], []
    for x, y in data:
        batches.append((x, y))
        seen += data.last_indices.tolist()
    assert len(batches) == 3 == len(data)  # drop_last: 160 // 48
    assert all(x.shape == (48, 1, 8, 8) and x.dtype == torch.uint8 for x, _ in batches)
    assert len(set(seen)) == 144
    x0, y0 = reader.get_batch(seen[:48])
    assert torch.equal(batches[0][0], torch.from_numpy(x0)) and torch.equal(
        batches[0][1], torch.from_numpy(y0)
    )
    assert data.epoch == 1 and data.cursor == 0  # the finished iteration moved to epoch 1
    assert VersionDataset(reader, batch_size=48).loader.persistent_workers is False


def test_the_data_order_is_a_function_of_seed_and_epoch_and_resumes_mid_epoch() -> None:
    reader = ArrayReader(np.zeros((103, 2), np.float32), np.arange(103) % 2, modality="table")
    s = VersionDataset(reader, batch_size=10, seed=7)
    assert np.array_equal(epoch_permutation(103, 7, 2), epoch_permutation(103, 7, 2))
    assert not np.array_equal(epoch_permutation(103, 7, 1), epoch_permutation(103, 7, 2))
    s.set_epoch(2)
    full = s.plan(2)
    it = iter(s)
    for _ in range(4):
        next(it)
    state = s.state_dict()
    assert (state["epoch"], state["cursor"], state["seed"]) == (2, 40, 7)
    t = VersionDataset(reader, batch_size=10, seed=99)
    t.load_state_dict(state)  # the checkpoint's seed wins: the order of the epoch in flight
    rest = []
    for _ in t:
        rest.append(t.last_indices.tolist())
    assert rest == full[4:]
    # A sampler state from before the adapter (epoch, position in batches) resumes the same.
    u = VersionDataset(reader, batch_size=10, seed=7)
    u.load_state_dict({"epoch": 2, "position": 6, "seed": 7, "world_size": 1, "batch_size": 10})
    assert u.plan(2, u.cursor) == full[6:]


def test_sharding_gives_each_rank_a_disjoint_equal_share() -> None:
    reader = ArrayReader(np.zeros((101, 2), np.float32), np.arange(101) % 2, modality="table")
    ranks = [VersionDataset(reader, batch_size=5, seed=3, rank=r, world_size=2) for r in range(2)]
    shares = [sum(s.plan(0), []) for s in ranks]
    assert len(shares[0]) == len(shares[1]) == 50  # 10 steps of 2 x 5
    assert not set(shares[0]) & set(shares[1])
    with pytest.raises(ConfigError, match="TRAIN_BATCH_SIZE / batch_size"):
        VersionDataset(
            ArrayReader(np.zeros((10, 2), np.float32), np.arange(10) % 2),
            batch_size=8,
            world_size=2,
        )


def test_a_state_of_another_version_is_refused() -> None:
    reader = digits_reader(100).split("train")
    data = VersionDataset(reader, batch_size=16)
    state = {**data.state_dict(), "version_id": "w" * 64}
    with pytest.raises(
        ValueError, match="data state is for version w+, this dataset is version v+"
    ):
        data.load_state_dict(state)


def test_device_transform_normalises_and_augments_reproducibly() -> None:
    x = torch.randint(0, 256, (6, 1, 8, 8), dtype=torch.uint8)
    tf = DeviceTransform.build(
        [100.0], [50.0], (1, 8, 8), torch.device("cpu"), channels_last=False, augment=False, seed=0
    )
    torch.testing.assert_close(tf(x), (x.float() - 100.0) / 50.0)
    aug = DeviceTransform.build(
        [100.0], [50.0], (1, 8, 8), torch.device("cpu"), channels_last=False, augment=True, seed=0
    )
    a, b = aug(x, train=True, epoch=1, step=5), aug(x, train=True, epoch=1, step=5)
    assert torch.equal(a, b) and a.shape == x.shape
    assert not torch.equal(a, aug(x, train=True, epoch=1, step=6))
    assert not torch.equal(a, tf(x))
    torch.testing.assert_close(aug(x), tf(x))  # never at evaluation
    cl = DeviceTransform.build(
        [100.0], [50.0], (1, 8, 8), torch.device("cpu"), channels_last=True, augment=False, seed=0
    )
    assert cl(x).is_contiguous(memory_format=torch.channels_last)


def test_channels_last_switch_converts_model_and_inputs() -> None:
    t = make_trainer(channels_last="on")
    assert t.channels_last
    assert t.model.stem[0].weight.is_contiguous(memory_format=torch.channels_last)
    assert math.isfinite(t.train_step(*one_batch(t))["loss"])
    assert make_trainer().channels_last is False  # auto on CPU: off


def test_compile_switch_wraps_the_model_and_trains_the_same() -> None:
    plain = make_trainer(seed=3)
    compiled = make_trainer(seed=3, compile=True, compile_backend="eager")
    assert type(compiled.train_model).__name__ == "OptimizedModule"
    a = plain.train_step(*one_batch(plain))["loss"]
    b = compiled.train_step(*one_batch(compiled))["loss"]
    assert a == pytest.approx(b, rel=1e-5)


def test_loss_switches_reach_the_trainer() -> None:
    t = make_trainer(loss="focal", focal_gamma=1.5, class_weights="balanced", label_smoothing=0.1)
    assert (
        isinstance(t.loss_fn, FocalLoss)
        and t.loss_fn.gamma == 1.5
        and t.loss_fn.label_smoothing == 0.1
    )
    counts = np.bincount(t.train_reader.labels(), minlength=10)
    torch.testing.assert_close(t.loss_fn.weight, class_weights("balanced", counts.tolist(), 10))
    ce = make_trainer(label_smoothing=0.2)
    assert (
        isinstance(ce.loss_fn, nn.CrossEntropyLoss)
        and ce.loss_fn.label_smoothing == 0.2
        and ce.loss_fn.weight is None
    )


def test_cuda_backend_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """cudnn.benchmark for fixed shapes unless deterministic; the cuBLAS workspace for
    deterministic CUDA runs. Only flags are set, so this runs without a GPU."""
    from training.device import configure_backends

    monkeypatch.setattr(torch.backends.cudnn, "benchmark", False)
    monkeypatch.setattr(torch.backends.cudnn, "deterministic", False)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    try:
        configure_backends(
            build_config({}), torch.device("cuda", 0)
        )  # auto: not deterministic on CUDA
        assert (
            torch.backends.cudnn.benchmark is True
            and not torch.are_deterministic_algorithms_enabled()
        )
        configure_backends(build_config({"deterministic": "on"}), torch.device("cuda", 0))
        assert (
            torch.backends.cudnn.benchmark is False and torch.backends.cudnn.deterministic is True
        )
        assert __import__("os").environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
        configure_backends(build_config({"cudnn_benchmark": False}), torch.device("cuda", 0))
        assert torch.backends.cudnn.benchmark is False
    finally:
        configure_backends(build_config({}), torch.device("cpu"))
    assert torch.are_deterministic_algorithms_enabled()  # CPU auto: deterministic


def test_pinned_memory_only_for_cuda() -> None:
    reader = digits_reader(100).split("train")
    assert VersionDataset(reader, batch_size=16, pin_memory=True).loader.pin_memory is True
    assert make_trainer().data.loader.pin_memory is False  # CPU run

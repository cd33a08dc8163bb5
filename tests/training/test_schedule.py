"""The LR schedule is a pure function of the step, checked at its corners, and drives a real
optimizer through torch.optim.lr_scheduler.LambdaLR."""

from __future__ import annotations

import math

import pytest
import torch

from training.schedule import default_warmup, lr_factor, make_scheduler


def test_corners_of_warmup_and_cosine() -> None:
    warm, total, floor = 10, 110, 0.01
    assert lr_factor(0, warmup=warm, total=total, floor=floor) == pytest.approx(
        0.1
    )  # first step is not wasted at 0
    assert lr_factor(warm - 1, warmup=warm, total=total, floor=floor) == pytest.approx(
        1.0
    )  # end of warmup = peak
    assert lr_factor(warm, warmup=warm, total=total, floor=floor) == pytest.approx(1.0)
    mid = warm + (total - 1 - warm) // 2
    assert lr_factor(mid, warmup=warm, total=total, floor=floor) == pytest.approx(
        floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * 0.5)), abs=0.01
    )
    assert lr_factor(total - 1, warmup=warm, total=total, floor=floor) == pytest.approx(
        floor
    )  # last step = floor
    values = [lr_factor(s, warmup=warm, total=total, floor=floor) for s in range(total)]
    assert all(
        b >= a for a, b in zip(values[: warm - 1], values[1:warm], strict=True)
    )  # rising warmup
    assert all(
        b <= a + 1e-12 for a, b in zip(values[warm:-1], values[warm + 1 :], strict=True)
    )  # monotone decay


def test_default_warmup_is_max_100_or_10_percent_capped_for_tiny_runs() -> None:
    assert default_warmup(100_000) == 10_000
    assert default_warmup(2_000) == 200
    assert default_warmup(1_500) == 150
    assert default_warmup(600) == 100
    assert default_warmup(100) == 20  # capped at 20 % of a tiny run
    assert default_warmup(1) == 0
    assert default_warmup(1000, requested=5) == 5


def test_lambda_lr_applies_the_function_to_a_real_optimizer() -> None:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.5)
    sched = make_scheduler(opt, warmup=4, total=20, floor=0.1)
    seen = []
    for _ in range(20):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert seen[0] == pytest.approx(0.5 * 0.25)
    assert seen[3] == pytest.approx(0.5)
    assert seen[-1] == pytest.approx(0.05)
    # Its state round-trips (resume continues the schedule exactly).
    opt2 = torch.optim.SGD([p], lr=0.5)
    sched2 = make_scheduler(opt2, warmup=4, total=20, floor=0.1)
    sched2.load_state_dict(sched.state_dict())
    assert sched2.get_last_lr() == sched.get_last_lr()

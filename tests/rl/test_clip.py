"""Gradient clipping (`scalerl.rl.update.clip_gradients`) at one rank, by hand: the norm is
sqrt(Σ g²) summed in float64 in parameter order, the gradients are scaled by clip_grad_norm_'s
coefficient, and the host reads one value, however many parameters there are (on CUDA a host
read waits for the device). Several ranks: tests/parallel/test_sharded_step.py."""

import math
import sys
from pathlib import Path

import pytest
import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model
from scalerl.parallel.shard import shard_policy
from scalerl.parallel.world import SINGLE
from scalerl.rl.update import clip_gradients

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "parallel"))
from step_worker import HostReads  # noqa: E402  (the counter of the 2-rank test)


def _policy_with_gradients(seed: int = 0):
    policy = shard_policy(build_tiny_model(ModelConfig(name="tiny-s", seed=seed)), SINGLE)
    gen = torch.Generator().manual_seed(seed)
    for p in policy.parameters():
        p.grad = torch.randn(p.shape, generator=gen)
    return policy


@pytest.mark.parametrize("max_norm", [None, 1e9, 0.5])
def test_clip_by_hand_with_one_host_read(max_norm):
    policy = _policy_with_gradients()
    grads = [p.grad.clone() for p in policy.parameters()]
    assert len(grads) > 10  # a read per parameter would show
    expected_sq = torch.zeros((), dtype=torch.float64)
    for g in grads:  # the same float64 sum, in the same order
        expected_sq += g.double().square().sum()
    expected = float(expected_sq) ** 0.5
    with HostReads() as reads:
        norm = clip_gradients(policy, max_norm, step=1, world=SINGLE)
    assert reads.count == 1
    assert norm == expected  # exactly: the same arithmetic
    coef = 1.0 if max_norm is None else min(1.0, max_norm / (expected + 1e-6))
    for p, g in zip(policy.parameters(), grads):
        torch.testing.assert_close(p.grad, g * coef if coef < 1 else g, atol=0, rtol=0)
    # what torch.nn.utils.clip_grad_norm_ computes (float32 sum: within rounding)
    again = _policy_with_gradients()
    total = torch.nn.utils.clip_grad_norm_(again.parameters(), max_norm or math.inf)
    assert float(total) == pytest.approx(norm, rel=1e-6)
    if max_norm == 0.5:
        for p, q in zip(policy.parameters(), again.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-8)

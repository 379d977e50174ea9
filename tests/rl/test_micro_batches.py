"""Token-budget micro-batches: the hand-derived split and padding, and one optimizer step by
micro-batches (a prompt group split across them) equals the step on the whole batch."""

import pytest
import torch
from test_trainer_helpers import OneRankStep

from scalerl.models.config import ModelConfig
from scalerl.models.loading import build_tiny_model
from scalerl.rl.batch import TrainBatch, padding_fraction, split_by_groups, split_by_tokens
from scalerl.rl.recipe import recipe_from_preset
from scalerl.rl.update import StepNumerics

# 6 sequences of width 12, 3 prompt tokens each; real lengths and groups:
#   row:     0  1  2   3  4  5
#   length:  9  4  7  12  5  8
#   group:   0  0  0   1  1  2
# Row 2's token 5 is an inserted one (loss mask False). Sorted longest first: 3, 0, 5, 2, 4, 1.
# Budget 20 (rows × longest <= 20): [3] (1×12; 2×12 = 24 > 20), [0, 5] (2×9 = 18; 3×9 = 27),
# [2, 4] (2×7 = 14; 3×7 = 21), [1] (1×4). Prompt 0 (rows 0, 1, 2) lands in 3 micro-batches.
LENGTHS = [9, 4, 7, 12, 5, 8]
GROUPS = [0, 0, 0, 1, 1, 2]
WIDTH, PROMPT = 12, 3


def _batch() -> TrainBatch:
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(6, 103, (6, WIDTH), generator=gen)  # [6, 12]
    positions = torch.arange(WIDTH)[None, :]  # [1, 12]
    attention = (positions < torch.tensor(LENGTHS)[:, None]).long()  # [6, 12]
    ids = torch.where(attention.bool(), ids, 0)
    loss_mask = attention.bool() & (positions >= PROMPT)  # [6, 12]
    loss_mask[2, 5] = False
    gen_logprobs = torch.where(loss_mask, -4.6 + 0.3 * torch.randn(6, WIDTH, generator=gen), 0.0)
    advantages = torch.tensor([1.0, -0.5, -0.5, 0.8, -0.8, 0.0])  # [6]
    return TrainBatch(ids, attention, loss_mask, gen_logprobs, advantages, torch.tensor(GROUPS))


def test_token_budget_split_and_padding_by_hand():
    batch = _batch()
    parts = split_by_tokens(batch, 20)
    assert [p.group_ids.tolist() for p in parts] == [[1], [0, 2], [0, 1], [0]]
    assert [tuple(p.input_ids.shape) for p in parts] == [(1, 12), (2, 9), (2, 7), (1, 4)]
    assert [p.n_tokens for p in parts] == [12, 17, 12, 4]
    torch.testing.assert_close(parts[1].input_ids[1], batch.input_ids[5, :9])  # row 5 kept whole
    assert parts[2].loss_mask[0].tolist() == [False] * 3 + [True, True, False, True]  # row 2
    # padded positions: 0 + (18 - 17) + (14 - 12) + 0 = 3 of 12 + 18 + 14 + 4 = 48
    assert padding_fraction(parts) == pytest.approx(3 / 48)
    # the whole batch: 72 positions for 45 tokens; whole groups: (27-20) + (24-17) + 0 of 59
    assert padding_fraction([batch]) == pytest.approx(27 / 72)
    groups = [mb for mb, _ in split_by_groups(batch, 1)]
    assert padding_fraction(groups) == pytest.approx(14 / 59)
    # a budget below the longest sequence: every sequence alone, nothing split
    assert [p.n_sequences for p in split_by_tokens(batch, 5)] == [1] * 6
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        split_by_tokens(batch, 0)


def _step(aggregation: str, numerics: StepNumerics | None):
    recipe = recipe_from_preset("scalerl", {"loss": {"aggregation": aggregation},
                                            "optimizer": {"grad_clip": None}})
    model = build_tiny_model(ModelConfig(name="tiny-s", seed=7))
    out = OneRankStep(model, recipe).step(_batch(), temperature=0.9, numerics=numerics)
    return out, {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
def test_token_budget_step_equals_the_whole_batch_step(aggregation):
    ref, ref_grads = _step(aggregation, None)
    assert (ref["micro_batches"], ref["padding_fraction"]) == (1, pytest.approx(27 / 72))
    assert set(ref["timing"]) == {"logprob_s", "backward_s", "optimizer_s"}
    assert all(v >= 0 for v in ref["timing"].values())
    for numerics in (StepNumerics(micro_batch_tokens=20),
                     StepNumerics(micro_batch_tokens=20, logprob_chunk_tokens=3)):
        out, grads = _step(aggregation, numerics)
        assert (out["micro_batches"], out["padding_fraction"]) == (4, pytest.approx(3 / 48))
        assert out["loss"] == pytest.approx(ref["loss"], abs=1e-6)
        assert out["entropy"] == pytest.approx(ref["entropy"], rel=1e-6)
        assert out["trained_tokens"] == ref["trained_tokens"] == 45
        for name, g in ref_grads.items():  # within 1e-6 of each gradient's largest entry
            torch.testing.assert_close(grads[name], g, atol=1e-6 * float(g.abs().max()), rtol=0,
                                       msg=lambda m, name=name: f"{name}: {m}")
    assert abs(ref["loss"]) > 1e-3 and float(ref_grads["model.norm.weight"].abs().max()) > 1e-4


@pytest.mark.parametrize("kind", ["cispo", "gspo"])
def test_mismatch_metrics_by_hand_and_over_micro_batches(kind):
    """The step's generator–trainer mismatch columns, from the trainer log-probabilities of the
    model before the step: ρ = exp(logp − gen_logp) per loss token (the loss's clamp at ±20 is
    not reached here), mismatch_kl = mean(ρ − 1 − log ρ), the extremes of ρ, and for GSPO the
    mean over sequences of exp(mean log ρ); the same whether the step runs whole or in 4
    token-budget micro-batches."""
    from scalerl.models.logprobs import sequence_logprobs

    recipe = recipe_from_preset("scalerl", {"loss": {"kind": kind}})
    batch = _batch()
    model = build_tiny_model(ModelConfig(name="tiny-s", seed=7))
    with torch.no_grad():
        logp = sequence_logprobs(model, batch.input_ids, batch.attention_mask,
                                 fp32_lm_head=True, temperature=0.9)  # [6, 12]
    log_ratio = (logp - batch.gen_logprobs)[batch.loss_mask].double()  # [45]
    rho = log_ratio.exp()
    per_seq = [float((logp - batch.gen_logprobs)[i][batch.loss_mask[i]].double().mean().exp())
               for i in range(6)]
    expected = {"mismatch_kl": float((rho - 1 - log_ratio).mean()),
                "is_ratio_max": float(rho.max()), "is_ratio_min": float(rho.min()),
                "seq_ratio_mean": sum(per_seq) / 6 if kind == "gspo" else float("nan")}
    assert expected["mismatch_kl"] > 0.01  # the generator's log-probs are not the model's
    for numerics in (None, StepNumerics(micro_batch_tokens=20)):
        m = build_tiny_model(ModelConfig(name="tiny-s", seed=7))
        out = OneRankStep(m, recipe).step(_batch(), temperature=0.9, numerics=numerics)
        for key, value in expected.items():
            assert out[key] == pytest.approx(value, rel=1e-5, nan_ok=True), (key, numerics)

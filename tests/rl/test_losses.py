"""Losses: hand-derived values for every kind × aggregation, gradients, masking, numerics."""

from __future__ import annotations

import math

import pytest
import torch

from scalerl.config import ConfigError
from scalerl.rl.advantages import compute_advantages
from scalerl.rl.losses import LossConfig, LossInputs, LossNormalizer, compute_loss

# The worked batch: B = 3 completions, T = 3; rows 0 and 1 share prompt 0, row 2 is prompt 1.
#   row 0: mask [T, T, F]  ρ = [1.5, 0.5]       log π = [-1.0, -2.0]       Â = +1
#   row 1: mask [T, T, F]  ρ = [1.1, 0.7]       log π = [-0.5, -1.5]       Â = -1
#   row 2: mask [T, T, T]  ρ = [0.9, 5.0, 1.0]  log π = [-1.0, -3.0, -2.0]  Â = +0.5
# gen_logprobs = log π − log ρ. Masked-out cells hold garbage that must never matter.
MASK = torch.tensor([[True, True, False], [True, True, False], [True, True, True]])
RHO = torch.tensor([[1.5, 0.5, 1.0], [1.1, 0.7, 1.0], [0.9, 5.0, 1.0]])
LOGP = torch.tensor([[-1.0, -2.0, -7.0], [-0.5, -1.5, -7.0], [-1.0, -3.0, -2.0]])
ADV = torch.tensor([1.0, -1.0, 0.5])
GROUPS = torch.tensor([0, 0, 1])

# Per-token losses ℓ (negated objective), derived by hand:
# cispo (ε_max = 4): ℓ = -min(ρ, 4)·Â·log π
#   row 0: -(1.5)(1)(-1) = 1.5,  -(0.5)(1)(-2) = 1.0
#   row 1: -(1.1)(-1)(-0.5) = -0.55,  -(0.7)(-1)(-1.5) = -1.05
#   row 2: -(0.9)(.5)(-1) = 0.45,  -(4, capped from 5)(.5)(-3) = 6.0,  -(1)(.5)(-2) = 1.0
# dapo (clip [0.8, 1.28]): ℓ = -min(ρÂ, clip(ρ)Â)
#   row 0: -min(1.5, 1.28) = -1.28 (clipped),  -min(0.5, 0.8) = -0.5
#   row 1: -min(-1.1, -1.1) = 1.1,  -min(-0.7, -0.8) = 0.8 (clipped)
#   row 2: -min(.45, .45) = -0.45,  -min(2.5, 0.64) = -0.64 (clipped),  -0.5
# grpo / ppo (clip [0.8, 1.2]): as dapo but row 0 tok 0 -> -1.2 and row 2 tok 1 -> -0.6
# gspo (clip [0.997, 1.005]) with s_i = exp(mean log ρ) on every token of row i:
#   row 0: s = sqrt(1.5·0.5) = sqrt(.75) = 0.8660254, Â = 1: -min(.866, .997) = -0.8660254
#   row 1: s = sqrt(1.1·0.7) = 0.8774964, Â = -1: -min(-.877, -.997) = 0.997 (clipped)
#   row 2: s = (0.9·5·1)^(1/3) = 1.6509636, Â = .5: -min(.825, .5025) = -0.5025 (clipped)
PER_TOKEN = {
    "cispo": ([1.5, 1.0], [-0.55, -1.05], [0.45, 6.0, 1.0]),
    "dapo": ([-1.28, -0.5], [1.1, 0.8], [-0.45, -0.64, -0.5]),
    "grpo": ([-1.2, -0.5], [1.1, 0.8], [-0.45, -0.6, -0.5]),
    "gspo": ([-math.sqrt(0.75)] * 2, [0.997] * 2, [-0.5025] * 3),
}
PER_TOKEN["ppo"] = PER_TOKEN["grpo"]
# Aggregations of those rows (sums s0, s1, s2 over 2, 2, 3 tokens):
#   token  = (s0 + s1 + s2) / 7
#   sample = (s0/2 + s1/2 + s2/3) / 3
#   prompt = ((s0 + s1)/4 + s2/3) / 2
# cispo: s = 2.5, -1.6, 7.45 -> token 8.35/7, sample (1.25 - .8 + 2.48333)/3, prompt (.225 + 2.48333)/2
# dapo:  s = -1.78, 1.9, -1.59 -> token -1.47/7 = -.21, sample -.47/3, prompt (.03 - .53)/2 = -.25
# grpo:  s = -1.7, 1.9, -1.55 -> token -1.35/7, sample (-.85 + .95 - .51667)/3, prompt (.05-.51667)/2
# gspo:  s = -1.7320508, 1.994, -1.5075 -> token -1.2455508/7, sample -.3715254/3,
#        prompt (.2619492/4 - .5025)/2
EXPECTED = {
    "cispo": {"token": 8.35 / 7, "sample": 2.9333333 / 3, "prompt": 1.3541667},
    "dapo": {"token": -0.21, "sample": -0.47 / 3, "prompt": -0.25},
    "grpo": {"token": -1.35 / 7, "sample": -0.4166667 / 3, "prompt": -0.2333333},
    "gspo": {"token": -1.2455508 / 7, "sample": -0.3715254 / 3, "prompt": -0.2185064},
}
EXPECTED["ppo"] = EXPECTED["grpo"]
CLIPPED_TOKENS = {"cispo": 1, "dapo": 3, "grpo": 3, "ppo": 3, "gspo": 5}


def make_inputs(pad: int = 0, garbage: float = 123.0) -> LossInputs:
    """The worked batch, optionally padded with `pad` extra masked-out columns of garbage."""
    gen = LOGP - torch.log(RHO)  # [3, 3]
    logp = torch.where(MASK, LOGP, garbage)
    gen = torch.where(MASK, gen, -garbage)
    mask = MASK
    if pad:
        logp = torch.cat([logp, torch.full((3, pad), float("-inf"))], dim=1)
        gen = torch.cat([gen, torch.full((3, pad), float("nan"))], dim=1)
        mask = torch.cat([mask, torch.zeros(3, pad, dtype=torch.bool)], dim=1)
    return LossInputs(logprobs=logp.clone().requires_grad_(True), gen_logprobs=gen,
                      advantages=ADV.clone(), mask=mask, group_ids=GROUPS.clone())


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
@pytest.mark.parametrize("kind", ["cispo", "dapo", "grpo", "gspo", "ppo"])
def test_hand_derived_loss(kind, aggregation):
    out = compute_loss(make_inputs(), LossConfig(kind=kind, aggregation=aggregation))
    assert out.loss.dtype == torch.float32 and out.loss.dim() == 0
    assert out.loss.item() == pytest.approx(EXPECTED[kind][aggregation], rel=1e-5, abs=1e-6)
    m = out.metrics
    assert (m["n_tokens"], m["n_sequences"], m["n_prompts"]) == (7, 3, 2)
    assert m["clip_fraction"] == pytest.approx(CLIPPED_TOKENS[kind] / 7)
    # ρ over the 7 loss tokens: 1.5, .5, 1.1, .7, .9, 5, 1
    assert m["is_ratio_mean"] == pytest.approx(10.7 / 7, rel=1e-5)
    assert m["is_ratio_max"] == pytest.approx(5.0, rel=1e-5)
    assert m["loss"] == pytest.approx(out.loss.item())
    assert all(isinstance(v, float) for v in m.values())


def test_per_token_tables_sum_to_expected():
    # Guard the hand tables above against arithmetic slips in the EXPECTED literals.
    for kind, (r0, r1, r2) in PER_TOKEN.items():
        s0, s1, s2 = sum(r0), sum(r1), sum(r2)
        assert EXPECTED[kind]["token"] == pytest.approx((s0 + s1 + s2) / 7, rel=1e-6)
        assert EXPECTED[kind]["sample"] == pytest.approx((s0 / 2 + s1 / 2 + s2 / 3) / 3, rel=1e-6)
        assert EXPECTED[kind]["prompt"] == pytest.approx(((s0 + s1) / 4 + s2 / 3) / 2, rel=1e-6)


def test_cispo_gradient_is_truncated_weight_times_advantage():
    # token aggregation: ∂L/∂log π_t = -sg(min(ρ, 4))·Â / 7 on loss tokens, 0 elsewhere —
    # even for ρ = 5 > ε_max (CISPO keeps the gradient of every token).
    x = make_inputs()
    compute_loss(x, LossConfig(kind="cispo", aggregation="token")).loss.backward()
    expected = -RHO.clamp(max=4.0) * ADV[:, None] / 7 * MASK
    torch.testing.assert_close(x.logprobs.grad, expected)
    # prompt aggregation: divide by the prompt's token count (4 or 3) and by 2 prompts.
    x = make_inputs()
    compute_loss(x, LossConfig(kind="cispo", aggregation="prompt")).loss.backward()
    denom = torch.tensor([4.0, 4.0, 3.0])[:, None] * 2
    torch.testing.assert_close(x.logprobs.grad, -RHO.clamp(max=4.0) * ADV[:, None] / denom * MASK)


@pytest.mark.parametrize("kind", ["dapo", "grpo", "ppo"])
def test_clipped_tokens_have_zero_gradient(kind):
    # Unclipped tokens: ∂(-ρÂ)/∂log π = -ρÂ (since ∂ρ/∂log π = ρ); clipped ones: exactly 0.
    x = make_inputs()
    compute_loss(x, LossConfig(kind=kind, aggregation="token")).loss.backward()
    clipped = torch.zeros(3, 3, dtype=torch.bool)
    clipped[0, 0] = clipped[1, 1] = clipped[2, 1] = True  # see the table at the top
    expected = torch.where(MASK & ~clipped, -RHO * ADV[:, None] / 7, 0.0)
    torch.testing.assert_close(x.logprobs.grad, expected)
    assert (x.logprobs.grad[clipped] == 0).all()


def test_gspo_gradient_equals_sequence_level_objective():
    # With sample aggregation the GSPO-token form has the gradient of the sequence objective
    # J = mean_i min(s_i Â_i, clip(s_i) Â_i), s_i = exp(mean_t(log π − log π_gen)).
    cfg = LossConfig(kind="gspo", aggregation="sample", gspo_eps_low=0.2, gspo_eps_high=0.3)
    x = make_inputs()
    compute_loss(x, cfg).loss.backward()
    logp = LOGP.clone().requires_grad_(True)
    gen = LOGP - torch.log(RHO)
    s = torch.exp(((logp - gen) * MASK).sum(1) / MASK.sum(1))  # [3]
    obj = torch.minimum(s * ADV, s.clamp(0.8, 1.3) * ADV).mean()
    (-obj).backward()
    torch.testing.assert_close(x.logprobs.grad, logp.grad * MASK)
    # Row 0 (s = .866, unclipped) gets -s·Â/(2 tokens · 3 rows) per token.
    assert x.logprobs.grad[0, 0].item() == pytest.approx(-math.sqrt(0.75) / 6, rel=1e-5)


@pytest.mark.parametrize("kind", ["cispo", "dapo", "grpo", "gspo", "ppo"])
@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
def test_padding_and_garbage_under_mask_change_nothing(kind, aggregation):
    cfg = LossConfig(kind=kind, aggregation=aggregation)
    a, b = make_inputs(), make_inputs(pad=4, garbage=-1e30)
    la, lb = compute_loss(a, cfg), compute_loss(b, cfg)
    torch.testing.assert_close(la.loss, lb.loss)
    assert la.metrics == lb.metrics
    la.loss.backward()
    lb.loss.backward()
    assert torch.isfinite(b.logprobs.grad).all()  # -inf / NaN padding gives no NaN gradient
    torch.testing.assert_close(b.logprobs.grad[:, :3], a.logprobs.grad)
    assert (b.logprobs.grad[:, 3:] == 0).all() and (a.logprobs.grad[~MASK] == 0).all()


def test_rows_without_loss_tokens_leave_the_denominators():
    # Masking out prompt 0 (e.g. zero-variance filtered) leaves prompt 1 alone:
    # cispo row 2 sums to 7.45 over 3 tokens -> 2.48333 for every aggregation.
    x = make_inputs()
    x.mask = MASK & torch.tensor([False, False, True])[:, None]
    for agg in ("prompt", "sample", "token"):
        out = compute_loss(x, LossConfig(aggregation=agg))
        assert out.loss.item() == pytest.approx(7.45 / 3, rel=1e-6)
        assert (out.metrics["n_sequences"], out.metrics["n_prompts"]) == (1, 1)


def test_empty_mask_gives_connected_zero():
    x = make_inputs()
    x.mask = torch.zeros_like(MASK)
    out = compute_loss(x, LossConfig())
    assert out.loss.item() == 0.0 and out.metrics["n_tokens"] == 0
    assert out.metrics["is_ratio_mean"] == 1.0 and out.metrics["clip_fraction"] == 0.0
    out.loss.backward()
    assert torch.equal(x.logprobs.grad, torch.zeros(3, 3))


@pytest.mark.parametrize("kind", ["cispo", "dapo", "grpo", "gspo", "ppo"])
@pytest.mark.parametrize("gap", [1e4, -1e4])
def test_extreme_logprob_gaps_stay_finite(kind, gap):
    # logprobs -1e4 vs generator 0 (ρ = e^-10000) and 0 vs -1e4 (ρ = e^10000): the log-ratio is
    # clamped to ±20 before exp, so values and gradients stay finite.
    logp = torch.tensor([[min(0.0, -gap), -1.0]], requires_grad=True)
    gen = torch.tensor([[min(0.0, gap), -1.0]])
    inputs = {"logprobs": logp, "gen_logprobs": gen, "advantages": torch.tensor([-1.0]),
              "mask": torch.tensor([[True, True]]), "group_ids": torch.tensor([0])}
    out = compute_loss(inputs, LossConfig(kind=kind))
    assert math.isfinite(out.loss.item())
    assert all(math.isfinite(v) for v in out.metrics.values())
    expected_max = math.exp(20.0) if gap < 0 else 1.0
    assert out.metrics["is_ratio_max"] == pytest.approx(expected_max, rel=1e-5)
    out.loss.backward()
    assert torch.isfinite(logp.grad).all()
    with torch.no_grad():
        assert math.isfinite(compute_loss(inputs, LossConfig(kind=kind)).loss.item())


def test_ratio_is_computed_in_float32_from_bf16_inputs():
    # -10 and -10.0625 are exact in bf16. ρ = exp(0.0625) = 1.0644945 in float32; a bf16
    # exp would round it to 1.0625.
    logp = torch.tensor([[-10.0]], dtype=torch.bfloat16, requires_grad=True)
    gen = torch.tensor([[-10.0625]], dtype=torch.bfloat16)
    x = LossInputs(logp, gen, torch.tensor([1.0]), torch.tensor([[True]]), torch.tensor([0]))
    out = compute_loss(x, LossConfig(kind="cispo"))
    assert out.metrics["is_ratio_mean"] == pytest.approx(math.exp(0.0625), rel=1e-6)
    assert out.loss.dtype == torch.float32
    # loss = -ρ·Â·log π = 1.0644945 · 10
    assert out.loss.item() == pytest.approx(10 * math.exp(0.0625), rel=1e-6)
    out.loss.backward()
    assert logp.grad.dtype == torch.bfloat16 and torch.isfinite(logp.grad.float()).all()


def test_end_to_end_with_batch_advantages():
    # Rewards [1, -1 | 1, 1]: centred [1, -1, 0, 0], batch population std sqrt(1/2) -> Â = ±√2, 0.
    # On-policy (ρ = 1), one token each, log π = [-1, -2, -3, -4]; zero-variance prompt 1 is
    # dropped by its mask: prompt loss = (-√2·(-1) + √2·(-2)) / 2 = -√2/2.
    rewards, groups = torch.tensor([1.0, -1.0, 1.0, 1.0]), torch.tensor([0, 0, 1, 1])
    adv = compute_advantages(rewards, groups, "batch", eps=0.0)
    logp = torch.tensor([[-1.0], [-2.0], [-3.0], [-4.0]])
    mask = torch.tensor([[True], [True], [False], [False]])
    out = compute_loss(LossInputs(logp, logp.clone(), adv, mask, groups), LossConfig())
    assert out.loss.item() == pytest.approx(-math.sqrt(2) / 2, rel=1e-6)


def test_input_errors():
    x = make_inputs()
    with pytest.raises(ValueError, match="missing \\['group_ids'\\]"):
        compute_loss({"logprobs": x.logprobs, "gen_logprobs": x.gen_logprobs,
                      "advantages": x.advantages, "mask": x.mask}, LossConfig())
    with pytest.raises(ValueError, match="mask must be a bool tensor"):
        compute_loss(LossInputs(x.logprobs, x.gen_logprobs, ADV, MASK.float(), GROUPS),
                     LossConfig())
    with pytest.raises(ValueError, match="advantages must be \\[B\\] = \\[3\\]"):
        compute_loss(LossInputs(x.logprobs, x.gen_logprobs, ADV[:2], MASK, GROUPS), LossConfig())
    with pytest.raises(ValueError, match="gen_logprobs shape"):
        compute_loss(LossInputs(x.logprobs, x.gen_logprobs[:, :2], ADV, MASK, GROUPS),
                     LossConfig())
    bad = x.logprobs.detach().clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="logprobs has NaN or inf at positions with mask True"):
        compute_loss(LossInputs(bad, x.gen_logprobs, ADV, MASK, GROUPS), LossConfig())
    with pytest.raises(ConfigError, match="'kl' is not one of"):
        LossConfig(kind="kl")
    with pytest.raises(ConfigError, match="unknown key"):
        LossConfig.from_dict({"epsilon": 0.1})


def _rows(x: LossInputs, rows: list[int]) -> LossInputs:
    return LossInputs(x.logprobs[rows], x.gen_logprobs[rows], x.advantages[rows], x.mask[rows],
                      x.group_ids[rows])


def test_normalizer_of_the_worked_batch():
    norm = LossNormalizer.from_batch(MASK, GROUPS)
    assert norm.group_ids.tolist() == [0, 1] and norm.group_tokens.tolist() == [4.0, 3.0]
    assert (norm.n_sequences, norm.n_prompts, norm.n_tokens) == (3, 2, 7.0)
    torch.testing.assert_close(norm.prompt_tokens(torch.tensor([1, 0, 1])),
                               torch.tensor([3.0, 4.0, 3.0]))
    with pytest.raises(ValueError, match=r"group ids \[5\] are not in the LossNormalizer"):
        norm.prompt_tokens(torch.tensor([0, 5]))


# row 0 alone under every aggregation: its token mean, (1.5 + 1.0)/2 for cispo, etc.
EXPECTED_ALONE = {"cispo": 1.25, "dapo": -0.89, "gspo": -math.sqrt(0.75)}


@pytest.mark.parametrize("aggregation", ["prompt", "sample", "token"])
@pytest.mark.parametrize("kind", ["cispo", "dapo", "gspo"])
def test_shares_of_a_split_prompt_sum_to_the_batch_loss(kind, aggregation):
    # Prompt 0 (rows 0, 1) split over two micro-batches {0} and {1, 2}. cispo by hand (row sums
    # 2.5, -1.6, 7.45 over 2, 2, 3 tokens; prompt token totals 4 and 3 over the WHOLE batch):
    #   prompt: 2.5/(4·2) = 0.3125  and  -1.6/(4·2) + 7.45/(3·2) = 1.0416667  -> 1.3541667
    #   sample: 1.25/3    = 0.4166667 and (-0.8 + 2.4833333)/3 = 0.5611111   -> 0.9777778
    #   token:  2.5/7     = 0.3571429 and 5.85/7 = 0.8357143                -> 1.1928571
    cfg = LossConfig(kind=kind, aggregation=aggregation)
    norm = LossNormalizer.from_batch(MASK, GROUPS)
    whole = make_inputs()
    full = compute_loss(whole, cfg)
    full.loss.backward()
    first, rest = make_inputs(), make_inputs()
    shares = [compute_loss(_rows(first, [0]), cfg, normalizer=norm),
              compute_loss(_rows(rest, [1, 2]), cfg, normalizer=norm)]
    (shares[0].loss + shares[1].loss).backward()
    torch.testing.assert_close(shares[0].loss + shares[1].loss, full.loss, atol=1e-6, rtol=0)
    grad = torch.cat([first.logprobs.grad[:1], rest.logprobs.grad[1:]])  # [3, 3]
    torch.testing.assert_close(grad, whole.logprobs.grad, atol=1e-7, rtol=0)
    if kind == "cispo":
        hand = {"prompt": (0.3125, 1.0416667), "sample": (0.4166667, 0.5611111),
                "token": (0.3571429, 0.8357143)}[aggregation]
        assert [s.loss.item() for s in shares] == pytest.approx(hand, rel=1e-6)
    # without the normaliser a micro-batch is a batch of its own: {0} alone gives 2.5 / 2
    alone = compute_loss(_rows(make_inputs(), [0]), cfg)
    assert alone.loss.item() == pytest.approx(EXPECTED_ALONE[kind], rel=1e-6)



def test_a_normalizer_from_another_batch_is_rejected():
    norm = LossNormalizer.from_batch(MASK[:, :1], GROUPS)  # 1 token per row: prompt 0 has 2
    with pytest.raises(ValueError, match="more loss tokens than its prompt's total"):
        compute_loss(make_inputs(), LossConfig(aggregation="prompt"), normalizer=norm)

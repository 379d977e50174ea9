"""Policy-gradient losses of the ScaleRL study (CISPO, DAPO, GRPO, GSPO, PPO-clip) and their
prompt / sample / token aggregation.

Notation (paper §3, Eq. 3–8): for completion i of a prompt and its token t,
ρ_{i,t} = π_train(y_{i,t}) / π_gen(y_{i,t}) = exp(logprobs − gen_logprobs), the importance
ratio between the trainer (differentiable `logprobs`) and the generator that sampled the
token (`gen_logprobs`, possibly a stale policy: PipelineRL / PPO-off-policy). Â_i is the
completion's advantage (`scalerl.rl.advantages`). Every loss below is the *negative*
objective, minimised by the optimizer; there is no KL or entropy term (paper A.3).

Per-token losses ℓ_{i,t} by `LossConfig.kind`:

- ``cispo`` (MiniMax-M1; paper Eq. 4 / §4, the ScaleRL default): truncated importance
  sampling with a vanilla policy gradient, ℓ = −sg(min(ρ, ε_max)) · Â · log π_train.
  Its gradient is −sg(min(ρ, ε_max)) · Â · ∇log π: every token keeps a gradient, the IS weight
  is only capped from above. Default ε_max = 4.0: the paper reports ε_max ∈ {4, 5, 8} makes
  no significant difference (A.17.2) and does not say which it used; 4.0 is the value of the
  public ScaleRL port of prime-rl and of Tinker's CISPO (TRL recommends 5.0).
- ``dapo`` (Yu et al. 2025; paper Eq. 8): PPO-clip with asymmetric clipping,
  ℓ = −min(ρÂ, clip(ρ, 1 − ε_low, 1 + ε_high)Â). Default ε_low/ε_high = 0.2/0.28 (DAPO paper);
  the paper's Qwen2.5-DAPO baseline uses 0.2/0.26 (A.16, set by that preset).
- ``grpo`` (Shao et al. 2024; paper Eq. 7): the same clipped surrogate with symmetric ε (0.2).
- ``ppo`` (Schulman et al. 2017): vanilla PPO-clip, symmetric ε (0.2). Its per-token formula
  is the one GRPO uses; GRPO differs only in its group-normalised advantages and sample
  aggregation, which are separate options (`advantage_normalization`, `aggregation`).
- ``gspo`` (Zheng et al. 2025): a sequence-level ratio, length-normalised as in the GSPO
  paper, s_i = exp(mean_t(log π_train − log π_gen)) over the completion's loss tokens, clipped
  to [1 − ε_low, 1 + ε_high] with GSPO's own small clip values (paper §3.2: the 1e-4 scale of
  the GSPO paper "did not work well", the 1e-3 scale did; upper 5e-3 was slightly better than
  4e-3, lower 3e-3). Implemented in the GSPO-token form s_{i,t} = sg(s_i) · π(y_t)/sg(π(y_t)):
  its value is s_i on every token and its gradient is s_i ∇log π(y_t). With ``sample``
  aggregation this equals the gradient of the sequence-level GSPO objective exactly; with
  ``prompt``/``token`` aggregation the sequences are weighted by their token counts.

Aggregation of the masked ℓ_{i,t} (paper §3.2 "loss aggregation"):

- ``prompt`` (ScaleRL): for each prompt, Σ over its G completions' tokens / their total token
  count Σ_g |y_g|, then the mean over prompts (each prompt weighs the same).
- ``sample`` (GRPO): per-completion token mean, then the mean over completions.
- ``token``: Σ over all tokens / number of tokens in the batch.

Completions without loss tokens (all-False mask rows, e.g. removed by the zero-variance
filter) and prompts without any count in no denominator; with no loss token at all the loss is
a zero that is still connected to the graph (backward gives zero gradients).

Micro-batches (and, later, data-parallel ranks): every denominator above is a property of the
whole batch. `LossNormalizer.from_batch(mask, group_ids)` takes them once over the whole batch
(each prompt's loss-token total over ALL its completions, the number of completions with loss
tokens, of prompts, of tokens) and `compute_loss(..., normalizer=...)` then returns the
micro-batch's *share* of the batch loss: Σ over its completions of their token sums divided
by the batch denominators,

    token:  Σ_i Σ_t ℓ_it / N_tokens
    sample: Σ_i (Σ_t ℓ_it / |y_i|) / N_sequences
    prompt: Σ_i Σ_t ℓ_it / (|y_prompt(i)| · N_prompts),  |y_p| = Σ_{g in p} |y_g| (whole batch)

so the shares of any split of the batch into micro-batches (a prompt's completions may sit in
different micro-batches; a completion may not be split) sum to the full-batch loss, and so do
their gradients. The normaliser's fields are sums over completions, so ranks holding parts of
one batch get the global one by an all-reduce (SUM) of `group_tokens` (over the same sorted
`group_ids`, the batch's prompts) and `n_sequences`.

Numerical safety: logprobs are cast to float32 before anything else, so ρ is formed in float32
from log space even for bf16 inputs; positions with mask False are replaced by 0 *before* any
arithmetic (garbage and −inf there can produce neither NaN values nor NaN gradients); the
log-ratio is clamped to ±`max_log_ratio` (default 20, ρ ≤ 4.9e8) before `exp`, so extreme
gaps stay finite (beyond the clamp the surrogate's gradient is zero). Non-finite values at
loss positions are rejected with an error.

Deliberately left out: KL penalties, entropy bonuses, dual-clip PPO, value functions, and the
generator-vs-trainer IS correction of TRL/verl (not part of ScaleRL).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from scalerl.config import Config, ConfigError, field_
from scalerl.rl.advantages import group_index

__all__ = [
    "AGGREGATIONS",
    "LOSS_KINDS",
    "LossConfig",
    "LossInputs",
    "LossNormalizer",
    "LossOutput",
    "aggregate",
    "compute_loss",
]

LOSS_KINDS = ("cispo", "dapo", "grpo", "gspo", "ppo")
AGGREGATIONS = ("prompt", "sample", "token")


@dataclasses.dataclass(frozen=True)
class LossConfig(Config):
    """Which policy-gradient loss and aggregation; each kind reads only its own clip fields."""

    kind: str = field_(
        "cispo", "loss: cispo (ScaleRL, Eq. 4), dapo (Eq. 8), grpo (Eq. 7), gspo, ppo",
        choices=LOSS_KINDS,
    )
    aggregation: str = field_(
        "prompt", "prompt (ScaleRL: per-prompt token mean, mean over prompts), sample, token "
        "(§3.2)",
        choices=AGGREGATIONS,
    )
    eps_max: float = field_(
        4.0, "cispo: cap on the stop-gradient IS weight, min(ρ, eps_max) (Eq. 4; App. A.17.2: 4/5/8 equal)",
        gt=0,
    )
    eps_low: float = field_(0.2, "dapo: lower clip, ρ >= 1 − eps_low (Eq. 8; DAPO 0.2)", ge=0, lt=1)
    eps_high: float = field_(
        0.28, "dapo: upper clip, ρ <= 1 + eps_high (Eq. 8; DAPO 0.28; App. A.16 baseline 0.26)", ge=0
    )
    eps: float = field_(0.2, "grpo/ppo: symmetric clip, ρ in [1 − eps, 1 + eps] (Eq. 7)", ge=0, lt=1)
    gspo_eps_low: float = field_(
        3e-3, "gspo: lower clip on the sequence ratio (paper §3.2: 3e-3)", ge=0, lt=1
    )
    gspo_eps_high: float = field_(
        5e-3, "gspo: upper clip on the sequence ratio (paper §3.2: 5e-3 beat 4e-3)", ge=0
    )
    max_log_ratio: float = field_(
        20.0, "numerical safety: |log ρ| is clamped to this before exp (not in the paper)", gt=0
    )

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None = None, *, _prefix: str = "") -> LossConfig:
        """As `Config.from_dict`, and a clip field given for a kind that does not read it is
        an error (e.g. `{kind: cispo, eps_high: 5}`: TRL's name for ε_max does nothing); a field
        left at its default value (as `to_dict` writes it) is accepted."""
        data = dict(data or {})
        kind = data.get("kind", cls.kind)
        defaults = {f.name: f.default for f in dataclasses.fields(cls)}
        unread = sorted(k for k in data if k in CLIP_FIELDS and kind not in CLIP_FIELDS[k]
                        and data[k] != defaults[k])  # a default value (to_dict) changes nothing
        if unread:
            owners = "; ".join(f"{k} is read by {'/'.join(CLIP_FIELDS[k])}" for k in unread)
            readers = [k for k, kinds in CLIP_FIELDS.items() if kind in kinds]
            raise ConfigError(
                f"{_prefix}kind = {kind!r} does not read {', '.join(_prefix + k for k in unread)} "
                f"({owners}); {kind} reads {', '.join(readers)}: remove the field or change "
                "the kind")
        return super().from_dict(data, _prefix=_prefix)


# Which loss kinds read each clip field (LossConfig.from_dict rejects the others).
CLIP_FIELDS: dict[str, tuple[str, ...]] = {
    "eps_max": ("cispo",),
    "eps_low": ("dapo",),
    "eps_high": ("dapo",),
    "eps": ("grpo", "ppo"),
    "gspo_eps_low": ("gspo",),
    "gspo_eps_high": ("gspo",),
}


@dataclasses.dataclass
class LossInputs:
    """One micro-batch of B completions padded to T tokens."""

    logprobs: torch.Tensor  # [B, T] trainer log π(y_t), differentiable
    gen_logprobs: torch.Tensor  # [B, T] generator log π_gen(y_t) (no gradient)
    advantages: torch.Tensor  # [B]
    mask: torch.Tensor  # [B, T] bool: tokens that get loss (generated, not injected, not pad)
    group_ids: torch.Tensor  # [B] long: one id per prompt, shared by its completions


@dataclasses.dataclass(frozen=True)
class LossNormalizer:
    """Batch-wide denominators of the aggregation (see the module docstring)."""

    group_ids: torch.Tensor  # [G] long, sorted unique prompt ids of the batch
    group_tokens: torch.Tensor  # [G] float32: loss tokens of each prompt over all completions
    n_sequences: int  # completions with at least one loss token

    @property
    def n_tokens(self) -> float:
        return float(self.group_tokens.sum())

    @property
    def n_prompts(self) -> int:
        return int((self.group_tokens > 0).sum())

    @classmethod
    def from_batch(cls, mask: torch.Tensor, group_ids: torch.Tensor) -> LossNormalizer:
        """Denominators of a whole batch: loss mask [B, T] bool, group ids [B]."""
        return cls.from_counts(mask.sum(dim=1), group_ids)

    @classmethod
    def from_counts(cls, loss_tokens: torch.Tensor, group_ids: torch.Tensor) -> LossNormalizer:
        """Denominators from each sequence's loss-token count [B] and group id [B] (the whole
        batch's, before any split into micro-batches or ranks)."""
        seq_count = loss_tokens.to(torch.float32)  # [B]
        if seq_count.numel() == 0:
            return cls(torch.zeros(0, dtype=torch.long), torch.zeros(0), 0)
        index, n_groups = group_index(group_ids)  # [B]
        tokens = torch.zeros(n_groups, device=seq_count.device).index_add(0, index, seq_count)
        return cls(torch.unique(group_ids), tokens, int((seq_count > 0).sum()))

    def prompt_tokens(self, group_ids: torch.Tensor) -> torch.Tensor:
        """|y_p| [B] of each completion's prompt, for group ids [B] of (part of) the batch."""
        ids = self.group_ids.to(group_ids.device)
        pos = torch.searchsorted(ids, group_ids).clamp(max=max(0, ids.numel() - 1))  # [B]
        if ids.numel() == 0 or not torch.equal(ids[pos], group_ids):
            missing = sorted(set(group_ids.tolist()) - set(ids.tolist()))
            raise ValueError(f"group ids {missing[:5]} are not in the LossNormalizer: build it "
                             "with LossNormalizer.from_batch over the whole batch")
        return self.group_tokens.to(group_ids.device)[pos]


@dataclasses.dataclass
class LossOutput:
    loss: torch.Tensor  # [] float32, differentiable
    metrics: dict[str, float]  # detached python floats


def _as_inputs(inputs: LossInputs | Mapping[str, Any]) -> LossInputs:
    if isinstance(inputs, LossInputs):
        return inputs
    if isinstance(inputs, Mapping):
        names = [f.name for f in dataclasses.fields(LossInputs)]
        missing = [n for n in names if n not in inputs]
        extra = sorted(set(inputs) - set(names))
        if missing or extra:
            raise ValueError(
                f"loss inputs: missing {missing}, unknown {extra}; expected keys {names}"
            )
        return LossInputs(**{n: inputs[n] for n in names})
    raise TypeError(f"inputs must be LossInputs or a mapping, got {type(inputs).__name__}")


def _check(x: LossInputs) -> None:
    if x.logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(x.logprobs.shape)}")
    b = x.logprobs.shape[0]
    for name in ("gen_logprobs", "mask"):
        if getattr(x, name).shape != x.logprobs.shape:
            raise ValueError(
                f"{name} shape {tuple(getattr(x, name).shape)} must equal logprobs shape "
                f"{tuple(x.logprobs.shape)}"
            )
    for name in ("advantages", "group_ids"):
        if getattr(x, name).shape != (b,):
            raise ValueError(f"{name} must be [B] = [{b}], got {tuple(getattr(x, name).shape)}")
    if x.mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {x.mask.dtype}; pass mask.bool()")
    with torch.no_grad():
        if not torch.isfinite(x.advantages).all():
            raise ValueError("advantages contain NaN or inf")
        for name in ("logprobs", "gen_logprobs"):
            values = getattr(x, name)[x.mask]
            if not torch.isfinite(values).all():
                raise ValueError(f"{name} has NaN or inf at positions with mask True")


def aggregate(
    per_token: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor, aggregation: str,
    normalizer: LossNormalizer | None = None,
) -> torch.Tensor:
    """Reduce masked per-token losses [B, T] to a scalar (see the module docstring): the loss
    of these rows as a batch, or with `normalizer` their share of the normaliser's batch."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation={aggregation!r} is not one of {list(AGGREGATIONS)}")
    per_token = torch.where(mask, per_token, 0.0)  # [B, T]
    seq_sum = per_token.sum(dim=1)  # [B]
    seq_count = mask.sum(dim=1).to(per_token.dtype)  # [B]
    if normalizer is not None:
        return _share(seq_sum, seq_count, group_ids, aggregation, normalizer)
    if aggregation == "token":
        return seq_sum.sum() / seq_count.sum().clamp_min(1.0)
    if aggregation == "sample":
        has = seq_count > 0  # [B]
        per_seq = seq_sum / seq_count.clamp_min(1.0)  # [B]
        return (per_seq * has).sum() / has.sum().clamp_min(1)
    index, n_groups = group_index(group_ids)  # [B]
    g_sum = torch.zeros(n_groups, dtype=per_token.dtype, device=per_token.device)
    g_sum = g_sum.index_add(0, index, seq_sum)  # [n_groups]
    g_count = torch.zeros_like(g_sum).index_add(0, index, seq_count)  # [n_groups]
    has = g_count > 0  # [n_groups]
    per_prompt = g_sum / g_count.clamp_min(1.0)  # [n_groups]
    return (per_prompt * has).sum() / has.sum().clamp_min(1)


def _share(seq_sum: torch.Tensor, seq_count: torch.Tensor, group_ids: torch.Tensor,
           aggregation: str, norm: LossNormalizer) -> torch.Tensor:
    """These rows' share of the batch loss: row sums [B] over the batch denominators."""
    if aggregation == "token":
        return seq_sum.sum() / max(norm.n_tokens, 1.0)
    if aggregation == "sample":
        return (seq_sum / seq_count.clamp_min(1.0)).sum() / max(norm.n_sequences, 1)
    prompt_tokens = norm.prompt_tokens(group_ids).to(seq_sum.dtype)  # [B]
    if bool((seq_count > prompt_tokens).any()):
        raise ValueError("a completion has more loss tokens than its prompt's total in the "
                         "LossNormalizer: build it over the batch these rows come from")
    return (seq_sum / prompt_tokens.clamp_min(1.0)).sum() / max(norm.n_prompts, 1)


def _clip_range(cfg: LossConfig) -> tuple[float, float]:
    if cfg.kind == "dapo":
        return cfg.eps_low, cfg.eps_high
    if cfg.kind == "gspo":
        return cfg.gspo_eps_low, cfg.gspo_eps_high
    return cfg.eps, cfg.eps  # grpo, ppo


def compute_loss(inputs: LossInputs | Mapping[str, Any], cfg: LossConfig, *,
                 normalizer: LossNormalizer | None = None) -> LossOutput:
    """Scalar loss (to minimise) and detached metrics for one micro-batch.

    Without `normalizer` the loss aggregates these rows as a batch of their own; with it, the
    loss is their share of the normaliser's batch (module docstring). Metrics are always the
    micro-batch's own."""
    x = _as_inputs(inputs)
    _check(x)
    mask = x.mask  # [B, T]
    logp = torch.where(mask, x.logprobs.float(), 0.0)  # [B, T] float32, grad only at mask
    gen = torch.where(mask, x.gen_logprobs.detach().float(), 0.0)  # [B, T]
    adv = x.advantages.detach().float()[:, None]  # [B, 1]
    raw_log_ratio = logp - gen  # [B, T], 0 where mask is False
    log_ratio = raw_log_ratio.clamp(-cfg.max_log_ratio, cfg.max_log_ratio)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T]

    if cfg.kind == "cispo":
        weight = ratio.detach().clamp(max=cfg.eps_max)  # [B, T] sg(min(ρ, ε_max))
        per_token = -weight * adv * logp  # [B, T]
        clipped = ratio.detach() > cfg.eps_max  # [B, T]
        surrogate_ratio = ratio
    else:
        lo, hi = _clip_range(cfg)
        if cfg.kind == "gspo":
            n_tok = mask.sum(dim=1, keepdim=True).clamp_min(1)  # [B, 1]
            seq_log_ratio = raw_log_ratio.detach().sum(dim=1, keepdim=True) / n_tok  # [B, 1]
            seq_log_ratio = seq_log_ratio.clamp(-cfg.max_log_ratio, cfg.max_log_ratio)
            # GSPO-token: value s_i on every token, gradient s_i · ∇log π(y_t).
            surrogate_ratio = torch.exp(seq_log_ratio + logp - logp.detach())  # [B, T]
        else:
            surrogate_ratio = ratio  # [B, T]
        unclipped = surrogate_ratio * adv  # [B, T]
        clipped_obj = surrogate_ratio.clamp(1.0 - lo, 1.0 + hi) * adv  # [B, T]
        per_token = -torch.minimum(unclipped, clipped_obj)  # [B, T]
        clipped = (clipped_obj < unclipped).detach()  # [B, T] clip branch active: no gradient

    loss = aggregate(per_token, mask, x.group_ids, cfg.aggregation, normalizer)
    metrics = _metrics(ratio.detach(), surrogate_ratio.detach(), log_ratio.detach(), clipped,
                       x, cfg)
    metrics["loss"] = float(loss.detach())
    return LossOutput(loss=loss, metrics=metrics)


@torch.no_grad()
def _metrics(
    ratio: torch.Tensor,
    surrogate_ratio: torch.Tensor,
    log_ratio: torch.Tensor,
    clipped: torch.Tensor,
    x: LossInputs,
    cfg: LossConfig,
) -> dict[str, float]:
    """Token-level IS statistics over loss tokens; neutral values (ρ = 1) with no tokens."""
    mask = x.mask
    n_tokens = int(mask.sum())
    seq_has = mask.any(dim=1)  # [B]
    n_prompts = int(torch.unique(x.group_ids[seq_has]).numel()) if n_tokens else 0
    out = {
        "n_tokens": float(n_tokens),
        "n_sequences": float(int(seq_has.sum())),
        "n_prompts": float(n_prompts),
        "is_ratio_mean": 1.0,
        "is_ratio_max": 1.0,
        "is_ratio_min": 1.0,
        "clip_fraction": 0.0,
        "mismatch_kl": 0.0,
    }
    if n_tokens == 0:
        return out
    r = ratio[mask]  # [N]
    lr = log_ratio[mask]  # [N]
    out["is_ratio_mean"] = float(r.mean())
    out["is_ratio_max"] = float(r.max())
    out["is_ratio_min"] = float(r.min())
    out["clip_fraction"] = float(clipped[mask].float().mean())
    # k3 estimator of KL(π_gen || π_train) from generator samples: E[ρ − 1 − log ρ] >= 0.
    out["mismatch_kl"] = float((r - 1.0 - lr).mean())
    if cfg.kind == "gspo":
        out["seq_ratio_mean"] = float(surrogate_ratio[:, 0][seq_has].mean())
    return out

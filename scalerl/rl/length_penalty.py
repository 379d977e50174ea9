"""DAPO-style overlong length penalty (the `length_penalty` alternative to interruptions).

ScaleRL paper Eq. 9 (§4, from DAPO's "soft overlong punishment", Yu et al. 2025, Eq. 13):

    R_length(y) = clip((L_max − |y|) / L_cache − 1, −1, 0)

which is exactly DAPO's piecewise form, since (L_max − |y|)/L_cache − 1 = (L_max − L_cache −
|y|)/L_cache:

    R_length(y) = 0                                  if |y| <= L_max − L_cache
                = ((L_max − L_cache) − |y|) / L_cache  if L_max − L_cache < |y| <= L_max
                = −1                                 if |y| > L_max

|y| is the number of generated (completion) tokens. The penalty is 0 up to L_max − L_cache,
falls linearly to −1 at L_max and stays −1 beyond. The paper uses L_max = 14k, L_cache = 2k
and adds the penalty **only to correct traces** (`apply_length_penalty`); an incorrect trace
keeps its −1. In ScaleRL's leave-one-out this replaces interruptions ("loo-lp") and "does not
improve performance".

Deliberately left out: truncation handling (a trace cut at the generation limit is simply
long: the sampler decides whether it can still be correct) and DAPO's overlong *filtering*
(masking truncated samples), which the paper does not use.
"""

from __future__ import annotations

import dataclasses

import torch

from scalerl.config import Config, ConfigError, field_

__all__ = ["LengthPenaltyConfig", "apply_length_penalty", "overlong_penalty"]


@dataclasses.dataclass(frozen=True)
class LengthPenaltyConfig(Config):
    """L_max and L_cache of the overlong penalty (paper Eq. 9)."""

    max_len: int = field_(
        14336, "L_max: generated tokens at which the penalty reaches −1 (Eq. 9, paper: 14k)", gt=0
    )
    cache_len: int = field_(
        2048, "L_cache: length of the linear penalty zone before L_max (Eq. 9, paper: 2k)", gt=0
    )

    def validate(self) -> None:
        super().validate()
        if self.cache_len > self.max_len:
            raise ConfigError(
                f"cache_len = {self.cache_len} must be <= max_len = {self.max_len}; "
                "the penalty zone is the last cache_len tokens before max_len"
            )


def overlong_penalty(lengths: torch.Tensor, max_len: int, cache_len: int) -> torch.Tensor:
    """R_length = clip((max_len − |y|)/cache_len − 1, −1, 0) per completion; float32 [B]."""
    if max_len <= 0 or cache_len <= 0 or cache_len > max_len:
        raise ValueError(
            f"need 0 < cache_len <= max_len, got max_len={max_len}, cache_len={cache_len}"
        )
    if (lengths < 0).any():
        raise ValueError("lengths must be >= 0 (number of generated tokens)")
    y = lengths.to(torch.float64)  # [B]
    penalty = ((max_len - y) / cache_len - 1.0).clamp(min=-1.0, max=0.0)  # [B]
    return penalty.to(torch.float32)


def apply_length_penalty(
    rewards: torch.Tensor,
    lengths: torch.Tensor,
    correct: torch.Tensor,
    cfg: LengthPenaltyConfig,
) -> torch.Tensor:
    """rewards + R_length(lengths) where `correct` ([B] bool), rewards unchanged elsewhere."""
    if not (rewards.shape == lengths.shape == correct.shape) or rewards.dim() != 1:
        raise ValueError(
            f"rewards, lengths and correct must be 1-D of one length, got {tuple(rewards.shape)}"
            f", {tuple(lengths.shape)}, {tuple(correct.shape)}"
        )
    if correct.dtype != torch.bool:
        raise ValueError(f"correct must be a bool tensor, got {correct.dtype}")
    penalty = overlong_penalty(lengths, cfg.max_len, cfg.cache_len).to(rewards.device)  # [B]
    out = rewards.to(torch.float32)  # [B]
    return torch.where(correct, out + penalty, out)

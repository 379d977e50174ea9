"""Shared by the HF and vLLM engine tests: token ids, requests, the trainer's recomputation."""

import math

import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import format_prompt
from scalerl.models.logprobs import sequence_logprobs
from scalerl.rollout.base import Request

THINK_END, EOS = 5, 2
UNIFORM_LOGP = -math.log(103)  # a model whose logits are all 0: p = 1/103 per token
PROMPTS = ["1+2=", "47+385=", "f([3,1])=[1,3]\n", "x+4=10 x="]


def mixed_requests(tok, n, sample_offset=0, **kw):
    """n requests cycling over math and code prompts of different lengths (sample indices from
    `sample_offset`: another offset, other per-sample seeds)."""
    return [Request(prompt_id=f"p{i % 5}", sample_idx=sample_offset + i,
                    prompt_ids=tuple(format_prompt(tok, PROMPTS[i % 4], ModelConfig())), **kw)
            for i in range(n)]


def recompute(model, completion, fp32_lm_head=True):
    """The trainer's logprobs of the completion tokens (one full forward, no cache)."""
    prompt = list(completion.request.prompt_ids)
    ids = torch.tensor([prompt + completion.token_ids])
    with torch.no_grad():
        return sequence_logprobs(model, ids, fp32_lm_head=fp32_lm_head)[0, len(prompt):]


def assert_switched_to_uniform(completions, old_model, *, new_version=1, old_version=0):
    """In-flight updates from `old_model` (`old_version`) to weights with all logits 0: each
    completion's tokens are `old_version` up to the switch, then `new_version`; the old tokens
    carry the old model's logprobs, every later one log p = -ln 103 whatever the stale KV
    cache; sequences started after the update are `new_version` throughout."""
    for c in completions:
        first_new = c.versions.index(new_version) if new_version in c.versions else c.n_tokens
        assert c.versions == [old_version] * first_new + [new_version] * (c.n_tokens - first_new)
        torch.testing.assert_close(torch.tensor(c.logprobs[:first_new]),
                                   recompute(old_model, c)[:first_new], atol=1e-4, rtol=0)
        torch.testing.assert_close(torch.tensor(c.logprobs[first_new:]),
                                   torch.full((c.n_tokens - first_new,), UNIFORM_LOGP))

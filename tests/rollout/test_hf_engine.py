"""HFEngine: logprobs equal the trainer's recomputation, batching independence, in-flight weight
updates, forced interruption, and use inside a spawned generator process."""

import multiprocessing as mp

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
from scalerl.models.loading import build_tiny_model, format_prompt, new_tiny_tokenizer
from scalerl.rollout.base import DEFAULT_INTERRUPTION_TEXT, Request
from scalerl.rollout.config import EngineConfig, RequestError
from scalerl.rollout.hf_engine import HFEngine


@pytest.fixture(scope="module")
def tok():
    return new_tiny_tokenizer()


@pytest.fixture(scope="module")
def model():
    return build_tiny_model(ModelConfig(name="tiny-s", seed=1))


def test_logprobs_match_the_trainer_recomputation(model, tok):
    # 7 requests of different prompt lengths through 3 slots: admissions happen mid-flight.
    engine = HFEngine(model, tok, EngineConfig(max_batch=3))
    reqs = [Request(prompt_id=f"q{i}", prompt_ids=tuple(format_prompt(tok, "12+" * (i % 3 + 1),
                    ModelConfig())), max_new_tokens=8 + 4 * i) for i in range(7)]
    out = engine.generate(reqs)
    assert [c.request for c in out] == reqs
    for c in out:
        assert len(c.token_ids) == len(c.logprobs) == len(c.loss_mask) == len(c.versions)
        assert c.n_tokens <= c.request.max_new_tokens
        assert all(c.loss_mask) and set(c.versions) == {0}
        torch.testing.assert_close(torch.tensor(c.logprobs), recompute(model, c),
                                   atol=1e-4, rtol=0)
        if c.finish_reason == "stop":
            assert c.token_ids[-1] == EOS and not c.truncated
        else:
            assert c.n_tokens == c.request.max_new_tokens and c.truncated
    assert engine.num_in_flight() == 0


def test_samples_do_not_depend_on_batching(model, tok):
    reqs = mixed_requests(tok, 6, max_new_tokens=12)
    runs = [HFEngine(model, tok, EngineConfig(max_batch=b, seed=3)).generate(reqs)
            for b in (1, 4, 64)]
    for a, b, c in zip(*runs):
        assert a.token_ids == b.token_ids == c.token_ids
    other_seed = HFEngine(model, tok, EngineConfig(seed=4)).generate(reqs)
    assert [c.token_ids for c in other_seed] != [c.token_ids for c in runs[0]]


def test_fp32_head_shrinks_the_bf16_mismatch(tok):
    # bf16 model; the generator (KV cache, one token per step) and the trainer (one full
    # forward) round differently. Computing the head in fp32 on both sides removes the bf16
    # rounding of the logits, so the mean |log pi_gen - log pi_train| must drop.
    m = build_tiny_model(ModelConfig(name="tiny-s", seed=1))
    with torch.no_grad():
        m.model.norm.weight.mul_(8)  # sharper, trained-model-like distributions
    m = m.to(torch.bfloat16)
    reqs = mixed_requests(tok, 16, max_new_tokens=40)
    gaps = {}
    for fp32 in (True, False):
        out = HFEngine(m, tok, EngineConfig(max_batch=16), fp32_lm_head=fp32).generate(reqs)
        diffs = [(torch.tensor(c.logprobs) - recompute(m, c, fp32)).abs() for c in out]
        gaps[fp32] = torch.cat(diffs).mean().item()
    assert 0 < gaps[True] < gaps[False]


def _zero_norm_state(model):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    state["model.norm.weight"].zero_()  # hidden 0 -> logits 0 -> uniform over 103 tokens
    return state


def test_update_weights_in_flight(model, tok):
    reference = build_tiny_model(ModelConfig(name="tiny-s", seed=1))  # the old weights
    engine_model = build_tiny_model(ModelConfig(name="tiny-s", seed=1))
    engine = HFEngine(engine_model, tok, EngineConfig(max_batch=8))
    engine.submit(mixed_requests(tok, 8, max_new_tokens=30))
    done = engine.step() + engine.step() + engine.step()
    engine.update_weights(_zero_norm_state(reference), version=1)
    while engine.num_in_flight():
        done += engine.step()
    switched = [c for c in done if 0 in c.versions and 1 in c.versions]
    assert switched, "in-flight sequences must record the version switch"
    assert_switched_to_uniform(done, reference)
    fresh = engine.generate(mixed_requests(tok, 3, max_new_tokens=5))
    for c in fresh:
        assert set(c.versions) == {1}
        torch.testing.assert_close(torch.tensor(c.logprobs), torch.full((5,), UNIFORM_LOGP))


def test_update_weights_rejects_wrong_state(model, tok):
    engine = HFEngine(model, tok, EngineConfig())
    with pytest.raises(ValueError, match="unknown parameter"):
        engine.update_weights({"nope.weight": torch.zeros(1)}, 1)
    with pytest.raises(ValueError, match="lacks parameters"):
        engine.update_weights({"model.norm.weight": torch.ones(64)}, 1)
    assert engine.version == 0


@pytest.mark.parametrize(("text", "n"), [("</think>", 120), (DEFAULT_INTERRUPTION_TEXT, 24)])
def test_forced_interruption(model, tok, text, n):
    think, answer = 5, 3
    engine = HFEngine(model, tok, EngineConfig(interruption_text=text, max_batch=64))
    inserted = tok.encode(text, add_special_tokens=False)
    k = len(inserted)
    if text == "</think>":
        assert inserted == [THINK_END]
    out = engine.generate(mixed_requests(tok, n, max_new_tokens=think + k + answer + 4,
                                    think_budget=think, answer_budget=answer))
    n_interrupted = n_closed = 0
    for c in out:
        if c.interrupted:
            n_interrupted += 1
            assert THINK_END not in c.token_ids[:think]  # budget reached without </think>
            assert c.token_ids[think:think + k] == inserted  # inserted right at the budget
            assert c.loss_mask == [True] * think + [False] * k + [True] * (c.n_tokens - think - k)
            assert c.logprobs[think:think + k] == [0.0] * k
            n_answer = c.n_tokens - think - k
            assert 1 <= n_answer <= answer
            assert c.truncated == (c.finish_reason == "length") == (c.token_ids[-1] != EOS)
            if c.truncated:
                assert n_answer == answer
        else:
            assert all(c.loss_mask)
            stopped_early = EOS in c.token_ids[:think]
            closed = THINK_END in c.token_ids[:think]
            assert stopped_early or closed
            n_closed += closed and not stopped_early
            assert c.n_tokens <= c.request.max_new_tokens
        # answer tokens (after the inserted text) are scored with the inserted text as context
        masked = torch.tensor(c.loss_mask)
        torch.testing.assert_close(torch.tensor(c.logprobs)[masked], recompute(model, c)[masked],
                                   atol=1e-4, rtol=0)
    assert n_interrupted > n // 2
    if text == "</think>":
        assert n_closed > 0  # some samples closed their thinking on their own


def test_requests_that_cannot_be_served_are_rejected(model, tok):
    engine = HFEngine(model, tok, EngineConfig(interruption_text="</think>"))
    prompt = tuple(format_prompt(tok, "1+2=", ModelConfig()))
    with pytest.raises(RequestError, match="raise max_new_tokens"):
        engine.submit([Request("a", prompt, max_new_tokens=8, think_budget=6, answer_budget=4)])
    with pytest.raises(RequestError, match="exceed the model context"):
        engine.submit([Request("a", prompt, max_new_tokens=2000)])
    with pytest.raises(RequestError, match="empty prompt"):
        engine.submit([Request("a", (), max_new_tokens=4)])
    assert engine.num_in_flight() == 0


def _generate_in_child(model_dir, requests, queue):
    from scalerl.rollout.config import EngineConfig
    from scalerl.rollout.factory import make_engine

    torch.set_num_threads(1)
    engine = make_engine(model_dir, ModelConfig(name=str(model_dir)), EngineConfig(threads=1))
    queue.put(engine.generate(requests))


@pytest.mark.slow
def test_engine_runs_in_a_spawned_process(model, tok, tmp_path):
    from scalerl.models.loading import save_model_dir

    save_model_dir(model, tok, tmp_path)
    reqs = mixed_requests(tok, 4, max_new_tokens=10)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_generate_in_child, args=(tmp_path, reqs, queue))
    proc.start()
    got = queue.get(timeout=240)
    proc.join(timeout=60)
    assert proc.exitcode == 0
    here = HFEngine(model, tok, EngineConfig()).generate(reqs)
    assert [c.token_ids for c in got] == [c.token_ids for c in here]

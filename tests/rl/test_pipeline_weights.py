"""Weights through a real `Pipeline` into HF-engine generator processes: what one push costs in
bytes and what the generators hold after it (`scalerl.rl.pipeline`, `scalerl.rl.weights`).

The model is a locally built Qwen3 (tied embedding/head); the trainer keeps float32 masters,
the generators bfloat16. After a push that changes the tied embedding, each generator's own
log-probabilities of what it samples must equal a recomputation with the pushed weights cast
to bfloat16: a head left stale (or an embedding overwritten by the head) would not."""

import pytest
import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import load_model, load_tokenizer
from scalerl.models.logprobs import sequence_logprobs
from scalerl.rl.pipeline import EngineSpec, Pipeline
from scalerl.rl.trainer import build_generator_engine
from scalerl.rl.weights import PolicyWeights
from scalerl.rollout.base import Request
from scalerl.rollout.config import EngineConfig

pytestmark = pytest.mark.slow  # ~20 s: two generator processes load transformers


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    from scalerl.models.local_qwen3 import LocalQwen3, build_local_qwen3

    path = tmp_path_factory.mktemp("qwen3") / "model"
    return build_local_qwen3(path, ["1 + 2 = 3", "4 + 4 = 8", "<think> add </think>"],
                             LocalQwen3(max_positions=256))


def _spec(path) -> EngineSpec:
    cfg = ModelConfig(name=str(path), dtype="bfloat16", fp32_lm_head=True)
    return EngineSpec(build_generator_engine, {
        "model_path": str(path), "model_cfg": cfg, "env": {},
        "engine_cfg": EngineConfig(max_batch=8, seed=0, threads=1)}, threads=1)


def test_push_bytes_and_tied_weights_on_every_generator(qwen3_dir):
    trainer = load_model(qwen3_dir, ModelConfig(name=str(qwen3_dir), dtype="float32"))
    tok = load_tokenizer(qwen3_dir)
    n_unique = sum(p.numel() for p in trainer.parameters())  # the tied head once
    embed = trainer.get_input_embeddings().weight
    assert trainer.get_output_embeddings().weight is embed  # tied
    weights = PolicyWeights(trainer, "bfloat16")  # what the trainer pushes
    assert weights.layout.payload == n_unique * 2
    assert dict(weights.layout.aliases) == {"lm_head.weight": "model.embed_tokens.weight"}
    prompt = tuple(tok.encode("4 + 4 ="))
    with Pipeline([_spec(qwen3_dir), _spec(qwen3_dir)], weights, version=0, max_lag=0,
                  max_concurrent=8) as pipe:
        assert pipe.bytes_pushed == n_unique * 2  # the first push: slot of version 0
        with torch.no_grad():
            embed.add_(torch.randn(embed.shape, generator=torch.Generator().manual_seed(3)))
        pipe.push_weights(weights, 1)
        assert pipe.bytes_pushed == n_unique * 2
        reqs = [Request(f"p{g}", prompt, sample_idx=s, max_new_tokens=12)
                for g in range(2) for s in range(2)]  # one group per generator
        pipe.submit(1, reqs)
        done = pipe.collect(1, len(reqs))
        loads, _, loaded_bytes = pipe.load_stats()
    assert loads >= 4 and loaded_bytes == loads * n_unique * 2  # versions 0 and 1, K = 2
    pushed = trainer.to(torch.bfloat16)  # the generators' weights: the pushed ones, in bf16
    for c in done:
        assert set(c.versions) == {1}
        ids = torch.tensor([list(c.request.prompt_ids) + c.token_ids])  # [1, T]
        with torch.no_grad():
            logp = sequence_logprobs(pushed, ids, fp32_lm_head=True)[0, len(prompt):]  # [n]
        torch.testing.assert_close(torch.tensor(c.logprobs), logp, atol=2e-3, rtol=0)

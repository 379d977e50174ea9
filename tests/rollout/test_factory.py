"""The engine factory (scalerl.rollout.factory): which engine a config asks for, and the one
rule for vLLM's asynchronous engine that the trainer's weight transport follows too."""

import pytest

from scalerl.models.config import ModelConfig
from scalerl.rollout import factory
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings


@pytest.fixture(params=[True, False], ids=["pause-keeps", "no-pause-keep"])
def pause_keeps(request, monkeypatch):
    """The installed vLLM's AsyncLLM can (or cannot) pause keeping requests."""
    import scalerl.rollout.vllm_contract as contract

    monkeypatch.setattr(contract, "pause_keeps_requests", lambda: request.param)
    return request.param


def test_the_async_rule(pause_keeps):
    assert factory.uses_async_vllm(VllmSettings(inflight_updates="pause"))
    assert not factory.uses_async_vllm(VllmSettings(inflight_updates="step"))
    assert factory.uses_async_vllm(VllmSettings(inflight_updates="auto")) is pause_keeps
    # evaluation and the in-process modes: auto is the synchronous engine
    assert not factory.uses_async_vllm(VllmSettings().for_blocking_use())


def _built(monkeypatch, engine_cfg: EngineConfig) -> str:
    """Which engine class make_engine builds (their from_pretrained recorded, not run)."""
    from scalerl.rollout.hf_engine import HFEngine
    from scalerl.rollout.vllm_async_engine import AsyncVLLMEngine
    from scalerl.rollout.vllm_engine import VLLMEngine

    for cls in (HFEngine, VLLMEngine, AsyncVLLMEngine):
        monkeypatch.setattr(cls, "from_pretrained",
                            classmethod(lambda c, *a: c.__name__))
    return factory.make_engine("model_dir", ModelConfig(), engine_cfg)


def test_make_engine_builds_what_the_rule_says(monkeypatch, pause_keeps):
    assert _built(monkeypatch, EngineConfig()) == "HFEngine"
    vllm = EngineConfig(backend="vllm")
    assert _built(monkeypatch, vllm) == "VLLMEngine"  # the flat vllm_* fields: step
    for mode in ("auto", "pause", "step"):
        cfg = vllm.replace(vllm=VllmSettings(inflight_updates=mode))
        want = "AsyncVLLMEngine" if factory.uses_async_vllm(cfg.vllm) else "VLLMEngine"
        assert _built(monkeypatch, cfg) == want, mode
    assert _built(monkeypatch, vllm.replace(vllm=VllmSettings())) == (
        "AsyncVLLMEngine" if pause_keeps else "VLLMEngine")


def test_the_trainers_transport_follows_the_same_rule(pause_keeps):
    """A PipelineRL generator sharing the trainer's GPU: CUDA IPC and sleep mode need the
    asynchronous engine, the synchronous one gets host slots (shm)."""
    from scalerl.rl.run_config import RunConfig
    from scalerl.rl.trainer import pipeline_options

    cfg = RunConfig(engine="vllm", vllm=VllmSettings(sleep_during_update=True))
    options = pipeline_options(cfg, ModelConfig(dtype="bfloat16"), colocated=True, cuda=True)
    assert (options["transport"], options["sleep_during_update"]) == (
        ("ipc", True) if pause_keeps else ("shm", False))

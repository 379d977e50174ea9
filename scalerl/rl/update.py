"""One optimizer step of the policy: trainer log-probabilities, the recipe's loss, AdamW.

`optimizer_step(model, optimizer, scheduler, batch, recipe, ..., numerics=StepNumerics(...))`:

1. splits the batch into micro-batches: whole prompts (`micro_groups` groups; 0 = all) or,
   with `numerics.micro_batch_tokens`, a token budget (`scalerl.rl.batch.split_by_tokens`:
   sorted by length, a prompt's samples may be split); the loss denominators are taken once
   over the whole batch (`scalerl.rl.losses.LossNormalizer`) and each micro-batch's loss is its
   share of the batch loss, so Σ loss_micro equals the loss of the whole batch for prompt,
   sample and token aggregation alike, and so do the gradients (advantages were normalised
   over the whole batch by `assemble_batch` before any split);
2. computes log π_train of every completion token with the FP32 LM-head switch at the
   sampling temperature (`scalerl.models.logprobs.sequence_logprobs`: the same temperature the
   generator used, so ρ = π_train/π_gen compares like with like) and the token entropy (a
   metric, no graph); with `numerics.logprob_chunk_tokens` only the loss positions are scored,
   that many at a time, with the head's backward memory bounded too;
3. the recipe's loss (`scalerl.rl.losses.compute_loss`), backward, global grad-norm clipping
   (`OptimizerConfig.grad_clip`), AdamW step and the LR schedule step.

The returned metrics carry `timing`: wall-clock seconds of the log-probability forwards
(`logprob_s`), loss + backward (`backward_s`) and clip + AdamW + LR step (`optimizer_s`),
summed over the micro-batches (steps.parquet's time_* columns).

Mixed precision (`StepNumerics`): parameters, gradients and AdamW state stay in
`param_dtype` (float32: the master weights), the body's forward/backward runs under
`torch.autocast(compute_dtype)` when that is lower, and the LM head + log-softmax always in
float32 when the recipe's `fp32_lm_head` is on (never autocast). With float32 master weights
an AdamW update of ~lr = 5e-7 changes every weight; with bfloat16 parameters (8-bit mantissa)
any update below half a bf16 ulp of the weight rounds away (half an ulp is 2^-9..2^-8·|w|):
at lr 5e-7 only weights with |w| < ~2.6e-4 can move (about 1 % at init std 0.02; measured in
tests/rl/test_numerics.py), against every weight with float32 master weights.
`param_dtype: bfloat16` is accepted for memory experiments only, with that consequence.

`numerics.gradient_checkpointing` recomputes each decoder layer's activations in the backward
(transformers' non-reentrant checkpointing), switched on for the step only: the model leaves
the step with checkpointing off and in eval mode, so an HF engine that shares it generates
with its KV cache as before.

`make_optimizer` builds AdamW (recipe betas, eps, weight decay; paper A.3) with a linear warmup
to a constant LR: lr_s = lr · min(1, (s + 1) / warmup_steps) for 0-based step s.

Guards: non-finite trainer log-probabilities, loss or gradient norm raise `NonFiniteError`
naming the step (and the parameters with non-finite gradients) before any weight changes.
A step whose batch is empty (every prompt zero-variance) updates nothing but still advances
the schedule.

Deliberately left out: gradient accumulation across steps, loss scaling (bf16 needs none; no
float16 compute), data-parallel all-reduce (the normaliser is ready for it) and KL/entropy
regularisers (not part of ScaleRL).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from scalerl.config import Config, ConfigError, field_
from scalerl.rl.batch import TrainBatch, padding_fraction, split_by_groups, split_by_tokens
from scalerl.rl.losses import LossInputs, LossNormalizer, compute_loss

__all__ = ["NonFiniteError", "StepNumerics", "check_param_dtype", "make_optimizer",
           "optimizer_step", "step_precision", "training_checkpointing"]


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN/inf; the message names the step and the tensors."""


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

    def validate(self) -> None:
        super().validate()
        if self.param_dtype == "bfloat16" and self.compute_dtype == "float32":
            raise ConfigError("compute_dtype = float32 with param_dtype = bfloat16: autocast "
                              "cannot compute bf16 weights in float32; use compute_dtype auto "
                              "or bfloat16, or param_dtype float32")

    def torch_compute_dtype(self, device: torch.device) -> torch.dtype:
        """The resolved compute dtype on `device` (auto: bfloat16 on CUDA, else param dtype)."""
        if self.compute_dtype != "auto":
            return getattr(torch, self.compute_dtype)
        return torch.bfloat16 if device.type == "cuda" else getattr(torch, self.param_dtype)


# What optimizer_step does without `numerics`: the model's own dtype, no autocast, the
# unchunked head, whole-group micro-batches, no checkpointing (the behaviour before these knobs).
_AS_BEFORE = StepNumerics(compute_dtype="float32")


def check_param_dtype(model, numerics: StepNumerics) -> None:
    """Every floating parameter is in `numerics.param_dtype`, else a ValueError with the fix."""
    want = getattr(torch, numerics.param_dtype)
    found = sorted({str(p.dtype) for p in model.parameters() if p.is_floating_point()})
    if found != [str(want)]:
        raise ValueError(f"model parameters are {', '.join(found)} but param_dtype is "
                         f"{numerics.param_dtype}: load or cast the model to "
                         f"{numerics.param_dtype} (model.to(torch.{numerics.param_dtype})) "
                         "before building the optimizer")


@contextlib.contextmanager
def step_precision(model, numerics: StepNumerics) -> Iterator[None]:
    """Autocast to the compute dtype when it is below the parameters' dtype; else nothing."""
    param = next(model.parameters())
    compute = numerics.torch_compute_dtype(param.device)
    if compute == param.dtype or compute == torch.float32:
        yield
        return
    with torch.autocast(param.device.type, dtype=compute):
        yield


@contextlib.contextmanager
def training_checkpointing(model, enabled: bool) -> Iterator[None]:
    """Gradient checkpointing of the decoder layers inside the block, off again after it."""
    if not enabled:
        yield
        return
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    try:
        yield
    finally:
        model.gradient_checkpointing_disable()
        model.disable_input_require_grads()  # the embedding hook enable() adds for PEFT


def _micro_batches(batch: TrainBatch, micro_groups: int, numerics: StepNumerics
                   ) -> list[TrainBatch]:
    if numerics.micro_batch_tokens:
        return split_by_tokens(batch, numerics.micro_batch_tokens)
    return [mb for mb, _ in split_by_groups(batch, micro_groups)]


def optimizer_step(model, optimizer, scheduler, batch: TrainBatch | None, recipe: Any, *,
                   temperature: float, micro_groups: int, step: int,
                   numerics: StepNumerics | None = None) -> dict[str, float]:
    """Forward/backward by micro-batches, clip, AdamW and LR step (module docstring).

    `numerics=None` keeps the model's own dtype and computes in it, unchunked, by whole-group
    micro-batches; a given `numerics` is also checked against the parameters' dtype."""
    from scalerl.models.logprobs import sequence_logprobs

    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.zero_grad(set_to_none=True)
    if batch is None:  # every prompt was zero-variance: nothing to learn from this step
        t0 = time.perf_counter()
        optimizer.step()  # no parameter has a gradient: AdamW leaves them all untouched
        scheduler.step()
        timing = {"logprob_s": 0.0, "backward_s": 0.0, "optimizer_s": time.perf_counter() - t0}
        return {"loss": 0.0, "grad_norm": 0.0, "entropy": float("nan"),
                "is_ratio_mean": float("nan"), "clip_fraction": float("nan"), "lr": lr,
                "trained_tokens": 0, "micro_batches": 0, "padding_fraction": 0.0,
                "timing": timing}
    if numerics is None:
        numerics = _AS_BEFORE
    else:
        check_param_dtype(model, numerics)
    device = next(model.parameters()).device
    parts = _micro_batches(batch, micro_groups, numerics)
    normalizer = LossNormalizer.from_batch(batch.loss_mask, batch.group_ids)
    chunk = numerics.logprob_chunk_tokens
    loss_total, ent_sum, ratio_sum, clip_sum, n_tok = 0.0, 0.0, 0.0, 0.0, 0
    t_logprob = t_backward = 0.0
    model.train()
    with training_checkpointing(model, numerics.gradient_checkpointing):
        for mb in parts:
            t0 = time.perf_counter()
            mb = mb.to(device)
            with step_precision(model, numerics):
                logp, entropy = sequence_logprobs(  # [N, L], [N, L]
                    model, mb.input_ids, mb.attention_mask, fp32_lm_head=recipe.fp32_lm_head,
                    temperature=temperature, return_entropy=True,
                    token_mask=mb.loss_mask if chunk else None, chunk_tokens=chunk)
            if not torch.isfinite(logp.detach()[mb.loss_mask]).all():
                raise NonFiniteError(f"step {step}: the trainer's log-probabilities are "
                                     "non-finite (NaN/inf in the model's weights or activations)")
            t1 = time.perf_counter()
            t_logprob += t1 - t0
            out = compute_loss(LossInputs(logp, mb.gen_logprobs, mb.advantages, mb.loss_mask,
                                          mb.group_ids), recipe.loss, normalizer=normalizer)
            if not torch.isfinite(out.loss):
                raise NonFiniteError(f"step {step}: the loss is {float(out.loss)} (non-finite)")
            out.loss.backward()
            t_backward += time.perf_counter() - t1
            tokens = int(mb.loss_mask.sum())
            loss_total += float(out.loss.detach())
            ent_sum += float(entropy[mb.loss_mask].sum())
            ratio_sum += out.metrics["is_ratio_mean"] * tokens
            clip_sum += out.metrics["clip_fraction"] * tokens
            n_tok += tokens
    t0 = time.perf_counter()
    params = [p for p in model.parameters() if p.grad is not None]
    max_norm = recipe.optimizer.grad_clip or float("inf")
    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    if not np.isfinite(grad_norm):
        bad = [n for n, p in model.named_parameters()
               if p.grad is not None and not torch.isfinite(p.grad).all()]
        raise NonFiniteError(f"step {step}: gradient norm is {grad_norm}; non-finite gradients "
                             f"in {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    optimizer.step()
    scheduler.step()
    model.eval()
    timing = {"logprob_s": t_logprob, "backward_s": t_backward,
              "optimizer_s": time.perf_counter() - t0}
    return {"loss": loss_total, "grad_norm": grad_norm, "entropy": ent_sum / max(1, n_tok),
            "is_ratio_mean": ratio_sum / max(1, n_tok),
            "clip_fraction": clip_sum / max(1, n_tok), "lr": lr,
            "trained_tokens": batch.n_tokens, "micro_batches": len(parts),
            "padding_fraction": padding_fraction(parts), "timing": timing}


def make_optimizer(model, recipe: Any) -> tuple[torch.optim.Optimizer, Any]:
    """AdamW (recipe betas, eps, weight decay) and linear warmup to a constant LR."""
    opt = recipe.optimizer
    optimizer = torch.optim.AdamW(model.parameters(), lr=opt.lr, betas=tuple(opt.betas),
                                  eps=opt.eps, weight_decay=opt.weight_decay)
    warmup = opt.warmup_steps
    # LR of optimizer step s (0-based) = lr · min(1, (s + 1) / warmup)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min(1.0, (s + 1) / warmup) if warmup > 0 else 1.0)
    return optimizer, scheduler

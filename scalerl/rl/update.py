"""One optimizer step of the policy at any world size: log-probabilities, the loss, AdamW.

`optimizer_step(policy, optimizer, scheduler, batch, recipe, ..., numerics=StepNumerics(...),
normalizer=..., world=...)`, the one step of every world size (docs/design.md, "Scale-out"):

1. splits this rank's rows (`batch`; the whole batch at one rank) into micro-batches: whole
   prompts (`micro_groups` groups; 0 = all) or, with `numerics.micro_batch_tokens`, a token
   budget (`scalerl.rl.batch.split_by_tokens`: sorted by length, a prompt's samples may be
   split). The loss denominators are the whole batch's (`normalizer`, from
   `scalerl.rl.batch.score_batch`; computed from `batch` when not given, at one rank), so each
   micro-batch's loss is its share of the batch loss and Σ over micro-batches and ranks equals
   the loss of the whole batch, for prompt, sample and token aggregation alike, and so do the
   gradients (advantages were normalised over the whole batch before any split);
2. computes log π_train of every completion token with the FP32 LM-head switch at the
   sampling temperature (`scalerl.models.logprobs.sequence_logprobs` through
   `scalerl.parallel.shard.ScoringPolicy`: the same temperature the generator used, so
   ρ = π_train/π_gen compares like with like) and the token entropy (a metric, no graph); with
   `numerics.logprob_chunk_tokens` only the loss positions are scored, that many at a time,
   with the head's backward memory bounded too;
3. the recipe's loss (`scalerl.rl.losses.compute_loss`), backward, global grad-norm clipping
   (`OptimizerConfig.grad_clip`: the norm of the local gradient shards all-reduced, the
   coefficient of `torch.nn.utils.clip_grad_norm_`: max_norm / (norm + 1e-6), at most 1),
   AdamW step and the LR schedule step.

Several ranks (`world`, `scalerl.parallel.world.World`; the identity at one rank): FSDP runs
collectives in every forward and backward, so every rank runs the same number of micro-batches
(the maximum over ranks): a rank with fewer (or no rows) forwards a two-token dummy whose loss
is 0 · Σ logp (zero gradients, same collectives). A non-finite log-probability or loss on any
rank raises `NonFiniteError` on every rank (`World.any`), before any weight changes. Metrics
are global: loss, entropy, IS-ratio mean, clip fraction and the generator–trainer mismatch
`mismatch_kl` are token-weighted sums over ranks, `is_ratio_max`/`is_ratio_min` the extremes
over every loss token, `seq_ratio_mean` (GSPO's sequence ratio; NaN for the other losses) a
sequence-weighted mean; `micro_batches` is the per-rank count (the maximum over ranks).

The returned metrics carry `timing`: wall-clock seconds of the log-probability forwards
(`logprob_s`), loss + backward (`backward_s`) and clip + AdamW + LR step (`optimizer_s`),
summed over the micro-batches (steps.parquet's time_* columns).

Mixed precision (`StepNumerics`): parameters, gradients and AdamW state stay in
`param_dtype` (float32: the master weights), the body's forward/backward runs under
`torch.autocast(compute_dtype)` when that is lower, and the LM head + log-softmax always in
float32 when the recipe's `fp32_lm_head` is on (never autocast; its GEMM operands are
`numerics.lm_head_operands`: bfloat16 with fp32 accumulation on CUDA, as vLLM's FP32 head, so
the head runs on tensor cores; float32 on CPU). With float32 master weights
an AdamW update of ~lr = 5e-7 changes every weight; with bfloat16 parameters (8-bit mantissa)
any update below half a bf16 ulp of the weight rounds away (half an ulp is 2^-9..2^-8·|w|):
at lr 5e-7 only weights with |w| < ~2.6e-4 can move (about 1 % at init std 0.02; measured in
tests/rl/test_numerics.py), against every weight with float32 master weights.
`param_dtype: bfloat16` is accepted for memory experiments only, with that consequence.

`numerics.gradient_checkpointing` recomputes each decoder layer's activations in the backward
(transformers' non-reentrant checkpointing; under FSDP2 the recomputation all-gathers the layer
again), switched on for the step only: the model leaves the step with checkpointing off and in
eval mode, so an HF engine that shares it generates with its KV cache as before.

`make_optimizer` builds AdamW (recipe betas, eps, weight decay; paper A.3) with a linear warmup
to a constant LR: lr_s = lr · min(1, (s + 1) / warmup_steps) for 0-based step s.

Guards: non-finite trainer log-probabilities, loss or gradient norm raise `NonFiniteError`
naming the step (and the parameters with non-finite gradients) before any weight changes.
A step with no kept sample on any rank (every prompt zero-variance) updates nothing but still
advances the schedule.

Deliberately left out: gradient accumulation across steps, loss scaling (bf16 needs none; no
float16 compute), skipping the reduce-scatter of all but the last micro-batch
(`set_requires_gradient_sync`, a later speed-up) and KL/entropy regularisers (not part of
ScaleRL).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from scalerl.parallel.shard import ScoringPolicy
from scalerl.parallel.world import SINGLE, World
from scalerl.rl.batch import TrainBatch, split_by_groups, split_by_tokens
from scalerl.rl.losses import LossInputs, LossNormalizer, compute_loss
from scalerl.rl.numerics import StepNumerics
from scalerl.rl.steps import MISMATCH_COLUMNS

__all__ = ["NonFiniteError", "StepNumerics", "check_param_dtype", "make_optimizer",
           "optimizer_step", "step_precision", "training_checkpointing"]


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN/inf; the message names the step and the tensors."""


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


def _micro_batches(batch: TrainBatch | None, micro_groups: int, numerics: StepNumerics
                   ) -> list[TrainBatch]:
    if batch is None:
        return []
    if numerics.micro_batch_tokens:
        return split_by_tokens(batch, numerics.micro_batch_tokens)
    return [mb for mb, _ in split_by_groups(batch, micro_groups)]


def _dummy(device: torch.device) -> TrainBatch:
    """Two pad tokens, no loss position: the same collectives as a real micro-batch."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=device)  # [1, 2]
    return TrainBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool),
                      torch.zeros((1, 2), device=device), torch.zeros(1, device=device),
                      torch.zeros(1, dtype=torch.long, device=device))


def _hf_model(policy):
    """The HF causal LM inside a `ScoringPolicy`, or `policy` itself."""
    return policy.model if isinstance(policy, ScoringPolicy) else policy


def _score(policy, mb: TrainBatch, recipe: Any, temperature: float, chunk: int, real: bool,
           operands: str | None = None):
    """Log-probabilities and entropies [N, L] of a micro-batch (through the root forward of a
    ScoringPolicy, so FSDP's root hooks run); `operands`: the FP32 head's GEMM operands."""
    token_mask = mb.loss_mask if chunk and real else None
    if isinstance(policy, ScoringPolicy):
        return policy(mb.input_ids, mb.attention_mask, fp32_lm_head=recipe.fp32_lm_head,
                      temperature=temperature, token_mask=token_mask, chunk_tokens=chunk,
                      head_operands=operands)
    from scalerl.models.logprobs import sequence_logprobs

    return sequence_logprobs(policy, mb.input_ids, mb.attention_mask,
                             fp32_lm_head=recipe.fp32_lm_head, temperature=temperature,
                             return_entropy=True, token_mask=token_mask, chunk_tokens=chunk,
                             head_operands=operands)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The rank's local shard of a DTensor, or `t` itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def _clip(policy, max_norm: float | None, step: int, world: World) -> float:
    """Global grad norm over the local gradient shards; scales the gradients in place when
    clipping (`clip_grad_norm_`'s coefficient)."""
    named = [(n, p) for n, p in policy.named_parameters() if p.grad is not None]
    sq = torch.zeros((), dtype=torch.float64)
    for _, p in named:
        sq += _local(p.grad).detach().double().square().sum().cpu()
    norm = float(world.all_reduce(sq)) ** 0.5
    if not np.isfinite(norm):
        bad = [n for n, p in named if not torch.isfinite(_local(p.grad)).all()]
        raise NonFiniteError(f"step {step}: gradient norm is {norm}; non-finite gradients "
                             f"in {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    coef = min(1.0, max_norm / (norm + 1e-6)) if max_norm is not None else 1.0
    if coef < 1.0:
        for _, p in named:
            _local(p.grad).mul_(coef)
    return norm


def optimizer_step(policy, optimizer, scheduler, batch: TrainBatch | None, recipe: Any, *,
                   temperature: float, micro_groups: int, step: int,
                   numerics: StepNumerics | None = None,
                   normalizer: LossNormalizer | None = None,
                   world: World = SINGLE) -> dict[str, Any]:
    """Forward/backward by micro-batches, clip, AdamW and LR step (module docstring).

    `policy`: a `ScoringPolicy` (sharded at several ranks) or, at one rank, the HF model.
    `batch`: this rank's rows (None: none this step). `numerics=None` keeps the model's own
    dtype and computes in it, unchunked, by whole-group micro-batches; a given `numerics` is
    also checked against the parameters' dtype. A collective at several ranks: every rank
    calls it."""
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.zero_grad(set_to_none=True)
    numerics = numerics or _AS_BEFORE
    if numerics is not _AS_BEFORE:
        check_param_dtype(policy, numerics)
    parts = _micro_batches(batch, micro_groups, numerics)
    n_micro = int(world.all_reduce(torch.tensor([float(len(parts))]), "max").item())
    if n_micro == 0:  # every prompt was zero-variance: nothing to learn from this step
        t0 = time.perf_counter()
        optimizer.step()  # no parameter has a gradient: AdamW leaves them all untouched
        scheduler.step()
        timing = {"logprob_s": 0.0, "backward_s": 0.0, "optimizer_s": time.perf_counter() - t0}
        return {"loss": 0.0, "grad_norm": 0.0, "entropy": float("nan"),
                "is_ratio_mean": float("nan"), "clip_fraction": float("nan"),
                **dict.fromkeys(MISMATCH_COLUMNS, float("nan")), "lr": lr,
                "trained_tokens": 0, "micro_batches": 0, "padding_fraction": 0.0,
                "timing": timing}
    if normalizer is None:
        if world.distributed:
            raise ValueError("optimizer_step at several ranks needs the batch-wide normalizer "
                             "(scalerl.rl.batch.score_batch)")
        normalizer = LossNormalizer.from_batch(batch.loss_mask, batch.group_ids)
    device = next(policy.parameters()).device
    chunk = numerics.logprob_chunk_tokens
    operands = numerics.head_operands(device)
    # [loss, entropy sum, ratio·tokens, clip·tokens, loss tokens, real tokens, positions,
    #  mismatch_kl·tokens, seq_ratio·sequences, sequences (GSPO)]
    sums = torch.zeros(10, dtype=torch.float64)
    extremes = torch.full((2,), float("-inf"), dtype=torch.float64)  # [max ρ, −min ρ]
    t_logprob = t_backward = 0.0
    policy.train()
    with training_checkpointing(_hf_model(policy), numerics.gradient_checkpointing):
        for i in range(n_micro):
            t0 = time.perf_counter()
            real = i < len(parts)
            mb = (parts[i] if real else _dummy(device)).to(device)
            with step_precision(policy, numerics):
                logp, entropy = _score(policy, mb, recipe, temperature, chunk, real,
                                       operands)  # [N, L]
            t1 = time.perf_counter()
            t_logprob += t1 - t0
            if not real:
                world.any(False)  # the flag reduction every rank runs per micro-batch
                (0.0 * logp.sum()).backward()  # zero gradients through every parameter
                t_backward += time.perf_counter() - t1
                continue
            out, problem = None, None
            if not bool(torch.isfinite(logp.detach()[mb.loss_mask]).all()):
                problem = (f"step {step}: the trainer's log-probabilities are non-finite "
                           "(NaN/inf in the model's weights or activations)")
            else:
                out = compute_loss(LossInputs(logp, mb.gen_logprobs, mb.advantages, mb.loss_mask,
                                              mb.group_ids), recipe.loss, normalizer=normalizer)
                if not bool(torch.isfinite(out.loss)):
                    problem = f"step {step}: the loss is {float(out.loss)} (non-finite)"
            if world.any(problem is not None):  # every rank stops, before any weight changes
                raise NonFiniteError(problem or f"step {step}: non-finite log-probabilities or "
                                     "loss on another trainer rank")
            out.loss.backward()
            t_backward += time.perf_counter() - t1
            tokens = int(mb.loss_mask.sum())
            m = out.metrics
            seqs = m["n_sequences"] if "seq_ratio_mean" in m else 0.0
            sums += torch.tensor([float(out.loss.detach()), float(entropy[mb.loss_mask].sum()),
                                  m["is_ratio_mean"] * tokens, m["clip_fraction"] * tokens,
                                  tokens, mb.n_tokens, mb.n_positions,
                                  m["mismatch_kl"] * tokens,
                                  m.get("seq_ratio_mean", 0.0) * seqs, seqs],
                                 dtype=torch.float64)
            if tokens:
                extremes = torch.maximum(extremes, torch.tensor(
                    [m["is_ratio_max"], -m["is_ratio_min"]], dtype=torch.float64))
    t0 = time.perf_counter()
    grad_norm = _clip(policy, recipe.optimizer.grad_clip, step, world)
    optimizer.step()
    scheduler.step()
    policy.eval()
    timing = {"logprob_s": t_logprob, "backward_s": t_backward,
              "optimizer_s": time.perf_counter() - t0}
    (loss, ent, ratio, clip, n_tok, real_tok, positions, kl, seq_ratio,
     n_seq) = world.all_reduce(sums).tolist()
    ratio_max, neg_ratio_min = world.all_reduce(extremes, "max").tolist()
    nan = float("nan")
    return {"loss": loss, "grad_norm": grad_norm, "entropy": ent / max(1.0, n_tok),
            "is_ratio_mean": ratio / max(1.0, n_tok), "clip_fraction": clip / max(1.0, n_tok),
            "mismatch_kl": kl / n_tok if n_tok else nan,
            "is_ratio_max": ratio_max if n_tok else nan,
            "is_ratio_min": -neg_ratio_min if n_tok else nan,
            "seq_ratio_mean": seq_ratio / n_seq if n_seq else nan,
            "lr": lr, "trained_tokens": int(real_tok), "micro_batches": n_micro,
            "padding_fraction": 1.0 - real_tok / positions if positions else 0.0,
            "timing": timing}


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

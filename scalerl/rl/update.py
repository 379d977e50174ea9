"""One optimizer step of the policy at any world size: log-probabilities, the loss, AdamW.

`optimizer_step(policy, optimizer, scheduler, batch, recipe, *, temperature, micro_groups,
step, numerics, normalizer, world)` is the one step of every world size (docs/design.md,
"Scale-out"); the trainer calls it with its `ScoringPolicy` (`scalerl.parallel.shard`, FSDP2-
sharded at several ranks), the run's `StepNumerics`, the batch-wide `LossNormalizer` of
`scalerl.rl.batch.score_batch` and its `World` (`SINGLE` at one rank). Its named steps:

1. `micro_batches`: this rank's rows (`batch`; the whole batch at one rank) as micro-batches,
   whole prompts (`micro_groups` groups; 0 = all) or, with `numerics.micro_batch_tokens`, a
   token budget (`scalerl.rl.batch.split_by_tokens`: sorted by length, a prompt's samples may
   be split), and how many every rank runs (the maximum over ranks). The loss denominators are
   the whole batch's (`normalizer`), so each micro-batch's loss is its share of the batch loss
   and Σ over micro-batches and ranks equals the loss of the whole batch, for prompt, sample
   and token aggregation alike, and so do the gradients (advantages were normalised over the
   whole batch before any split);
2. `forward_backward` per micro-batch: log π_train of every completion token with the FP32
   LM-head switch at the sampling temperature (`ScoringPolicy` →
   `scalerl.models.logprobs.sequence_logprobs`: the temperature the generator used, so
   ρ = π_train/π_gen compares like with like) and the token entropy (a metric, no graph; with
   `numerics.logprob_chunk_tokens` only the loss positions are scored, that many at a time,
   with the head's backward memory bounded too), the recipe's loss
   (`scalerl.rl.losses.compute_loss`), backward; it returns the micro-batch's `StepTotals`;
3. `clip_gradients`: the global gradient norm (`OptimizerConfig.grad_clip`: the squared norms
   of the local gradient shards summed on the device, one all-reduce over the ranks and one
   read by the host, whatever the number of parameters; the coefficient of
   `torch.nn.utils.clip_grad_norm_`: max_norm / (norm + 1e-6), at most 1);
4. AdamW step and the LR schedule step;
5. `StepTotals.reduced(world).metrics(...)`: the step's metrics from named totals, summed over
   the ranks in one collective (and one for the extremes).

Several ranks (`world`): FSDP runs collectives in every forward and backward, so every rank
runs the same number of micro-batches: a rank with fewer (or no rows) forwards a two-token
dummy whose loss is 0 · Σ logp (zero gradients, same collectives). Gradients are
reduce-scattered once per step, after the last micro-batch (`numerics.gradient_sync: step`,
the default): the earlier ones run with FSDP2's `set_requires_gradient_sync(False)` and
accumulate the unsharded gradients on each rank (the whole model's gradient per rank while
the step runs, N × param bytes, which the planner counts, `scalerl.plan.memory`), instead of
one reduce-scatter of every layer per micro-batch (`gradient_sync: micro_batch`, the choice
when that memory is not there: `scalerl plan` names it). A
non-finite log-probability or loss on any rank raises `NonFiniteError` on every rank
(`World.any`), before any weight changes. Metrics are global: loss, entropy, IS-ratio mean,
clip fraction and the generator–trainer mismatch `mismatch_kl` are token-weighted sums over
ranks, `is_ratio_max`/`is_ratio_min` the extremes over every loss token, `seq_ratio_mean`
(GSPO's sequence ratio; NaN for the other losses) a sequence-weighted mean; `micro_batches`
is the per-rank count (the maximum over ranks).

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
float16 compute) and KL/entropy regularisers (not part of ScaleRL).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Iterator
from typing import Any

import torch

from scalerl.parallel.shard import ScoringPolicy
from scalerl.parallel.world import World
from scalerl.rl.batch import TrainBatch, split_by_groups, split_by_tokens
from scalerl.rl.losses import LossInputs, LossNormalizer, LossOutput, compute_loss
from scalerl.rl.numerics import StepNumerics
from scalerl.rl.steps import MISMATCH_COLUMNS

__all__ = ["NonFiniteError", "StepNumerics", "StepTotals", "check_param_dtype",
           "clip_gradients", "forward_backward", "make_optimizer", "micro_batches",
           "optimizer_step", "step_precision", "training_checkpointing"]


class NonFiniteError(RuntimeError):
    """The loss or a gradient became NaN/inf; the message names the step and the tensors."""


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


def micro_batches(batch: TrainBatch | None, micro_groups: int, numerics: StepNumerics,
                  world: World) -> tuple[list[TrainBatch], int]:
    """(this rank's micro-batches, how many every rank runs: the maximum over ranks); a
    collective at several ranks."""
    if batch is None:
        parts = []
    elif numerics.micro_batch_tokens:
        parts = split_by_tokens(batch, numerics.micro_batch_tokens)
    else:
        parts = [mb for mb, _ in split_by_groups(batch, micro_groups)]
    n_micro = int(world.all_reduce(torch.tensor([float(len(parts))]), "max").item())
    return parts, n_micro


def _dummy(device: torch.device) -> TrainBatch:
    """Two pad tokens, no loss position: the same collectives as a real micro-batch."""
    ids = torch.zeros((1, 2), dtype=torch.long, device=device)  # [1, 2]
    return TrainBatch(ids, torch.ones_like(ids), torch.zeros_like(ids, dtype=torch.bool),
                      torch.zeros((1, 2), device=device), torch.zeros(1, device=device),
                      torch.zeros(1, dtype=torch.long, device=device))


@dataclasses.dataclass
class StepTotals:
    """What micro-batches add up to, by name: the sums of the step's metrics (before the
    division by their token or sequence counts) and the extremes of the IS ratio."""

    loss: float = 0.0  # Σ micro-batch losses (each its share of the batch loss)
    entropy: float = 0.0  # Σ token entropy over loss tokens
    is_ratio: float = 0.0  # Σ ρ over loss tokens
    clipped: float = 0.0  # loss tokens whose ratio the loss clipped
    loss_tokens: float = 0.0
    real_tokens: float = 0.0  # forwarded tokens that are not padding
    positions: float = 0.0  # forwarded positions, padding included
    mismatch_kl: float = 0.0  # Σ k3 estimate of KL(π_gen || π_train) over loss tokens
    seq_ratio: float = 0.0  # Σ GSPO sequence ratio over sequences (0 for other losses)
    sequences: float = 0.0  # sequences with a GSPO ratio
    ratio_max: float = -math.inf  # max ρ over loss tokens
    neg_ratio_min: float = -math.inf  # −min ρ (a max, so both reduce with one op)

    _EXTREMES = ("ratio_max", "neg_ratio_min")

    @classmethod
    def of_micro_batch(cls, out: LossOutput, entropy: torch.Tensor, mb: TrainBatch
                       ) -> StepTotals:
        """One micro-batch's totals from its loss output and token entropies [N, L]."""
        tokens = int(mb.loss_mask.sum())
        m = out.metrics
        seqs = m["n_sequences"] if "seq_ratio_mean" in m else 0.0
        return cls(loss=float(out.loss.detach()), entropy=float(entropy[mb.loss_mask].sum()),
                   is_ratio=m["is_ratio_mean"] * tokens, clipped=m["clip_fraction"] * tokens,
                   loss_tokens=tokens, real_tokens=mb.n_tokens, positions=mb.n_positions,
                   mismatch_kl=m["mismatch_kl"] * tokens,
                   seq_ratio=m.get("seq_ratio_mean", 0.0) * seqs, sequences=seqs,
                   ratio_max=m["is_ratio_max"] if tokens else -math.inf,
                   neg_ratio_min=-m["is_ratio_min"] if tokens else -math.inf)

    def add(self, other: StepTotals) -> None:
        for f in dataclasses.fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, max(mine, theirs) if f.name in self._EXTREMES
                    else mine + theirs)

    def reduced(self, world: World) -> StepTotals:
        """The totals of every rank: sums in one all-reduce, extremes in one (max)."""
        names = [f.name for f in dataclasses.fields(self)]
        sums = [n for n in names if n not in self._EXTREMES]
        summed = world.all_reduce(torch.tensor([getattr(self, n) for n in sums],
                                               dtype=torch.float64)).tolist()
        maxed = world.all_reduce(torch.tensor([getattr(self, n) for n in self._EXTREMES],
                                              dtype=torch.float64), "max").tolist()
        return StepTotals(**dict(zip(sums, summed)), **dict(zip(self._EXTREMES, maxed)))

    def metrics(self) -> dict[str, float]:
        """The step's metric columns (steps.parquet) from the global totals."""
        n_tok, nan = self.loss_tokens, float("nan")
        return {"loss": self.loss, "entropy": self.entropy / max(1.0, n_tok),
                "is_ratio_mean": self.is_ratio / max(1.0, n_tok),
                "clip_fraction": self.clipped / max(1.0, n_tok),
                "mismatch_kl": self.mismatch_kl / n_tok if n_tok else nan,
                "is_ratio_max": self.ratio_max if n_tok else nan,
                "is_ratio_min": -self.neg_ratio_min if n_tok else nan,
                "seq_ratio_mean": self.seq_ratio / self.sequences if self.sequences else nan,
                "trained_tokens": int(self.real_tokens),
                "padding_fraction": (1.0 - self.real_tokens / self.positions
                                     if self.positions else 0.0)}


def forward_backward(policy: ScoringPolicy, mb: TrainBatch, *, recipe: Any, temperature: float,
                     numerics: StepNumerics, normalizer: LossNormalizer, world: World,
                     step: int, real: bool, timing: dict[str, float]) -> StepTotals:
    """Score one micro-batch, check it, take the recipe's loss and backward (a dummy, `real`
    False: the zero loss 0 · Σ logp); adds to `timing` and returns the micro-batch's totals.
    Every rank checks for non-finite values (one flag all-reduce), so all stop together."""
    t0 = time.perf_counter()
    device = mb.input_ids.device
    chunk = numerics.logprob_chunk_tokens
    with step_precision(policy, numerics):
        logp, entropy = policy(  # [N, L], [N, L]
            mb.input_ids, mb.attention_mask, fp32_lm_head=recipe.fp32_lm_head,
            temperature=temperature, token_mask=mb.loss_mask if chunk and real else None,
            chunk_tokens=chunk, head_operands=numerics.head_operands(device))
    t1 = time.perf_counter()
    timing["logprob_s"] += t1 - t0
    if not real:
        world.any(False)  # the flag reduction every rank runs per micro-batch
        (0.0 * logp.sum()).backward()  # zero gradients through every parameter
        timing["backward_s"] += time.perf_counter() - t1
        return StepTotals()
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
    timing["backward_s"] += time.perf_counter() - t1
    return StepTotals.of_micro_batch(out, entropy, mb)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The rank's local shard of a DTensor, or `t` itself."""
    return t.to_local() if hasattr(t, "to_local") else t


def clip_gradients(policy: ScoringPolicy, max_norm: float | None, step: int, world: World
                   ) -> float:
    """The global gradient norm; scales the gradients in place when clipping (the coefficient
    of `clip_grad_norm_`). The squared norms of the local shards are summed in float64 on their
    device (parameter order: the same sum at every call), all-reduced once and read by the
    host once: no synchronisation per parameter."""
    named = [(n, p) for n, p in policy.named_parameters() if p.grad is not None]
    device = _local(named[0][1].grad).device if named else torch.device("cpu")
    sq = torch.zeros((), dtype=torch.float64, device=device)
    for _, p in named:
        sq += _local(p.grad).detach().double().square().sum()
    norm = float(world.all_reduce(sq)) ** 0.5
    if not math.isfinite(norm):
        bad = [n for n, p in named if not torch.isfinite(_local(p.grad)).all()]
        raise NonFiniteError(f"step {step}: gradient norm is {norm}; non-finite gradients "
                             f"in {bad[:5]}{' ...' if len(bad) > 5 else ''}")
    coef = min(1.0, max_norm / (norm + 1e-6)) if max_norm is not None else 1.0
    if coef < 1.0:
        for _, p in named:
            _local(p.grad).mul_(coef)
    return norm


@contextlib.contextmanager
def _gradient_sync(policy: ScoringPolicy, world: World, sync: bool) -> Iterator[None]:
    """FSDP2 reduce-scatters this backward's gradients only when `sync` (the step's last
    micro-batch); otherwise they accumulate unsharded. Nothing to do at one rank."""
    if not world.distributed:
        yield
        return
    policy.set_requires_gradient_sync(sync)
    try:
        yield
    finally:
        policy.set_requires_gradient_sync(True)


def optimizer_step(policy: ScoringPolicy, optimizer, scheduler, batch: TrainBatch | None,
                   recipe: Any, *, temperature: float, micro_groups: int, step: int,
                   numerics: StepNumerics, normalizer: LossNormalizer,
                   world: World) -> dict[str, Any]:
    """Forward/backward by micro-batches, clip, AdamW and LR step (module docstring).

    `policy`: the trainer's `ScoringPolicy` (`scalerl.parallel.shard.shard_policy`); `batch`:
    this rank's rows (None: none this step); `numerics`: the run's, checked against the
    parameters' dtype; `normalizer`: the batch-wide loss denominators. A collective at several
    ranks: every rank calls it."""
    lr = float(optimizer.param_groups[0]["lr"])
    optimizer.zero_grad(set_to_none=True)
    check_param_dtype(policy, numerics)
    parts, n_micro = micro_batches(batch, micro_groups, numerics, world)
    timing = {"logprob_s": 0.0, "backward_s": 0.0, "optimizer_s": 0.0}
    totals = StepTotals()
    if n_micro:
        device = next(policy.parameters()).device
        policy.train()
        with training_checkpointing(policy.model, numerics.gradient_checkpointing):
            for i in range(n_micro):
                real = i < len(parts)
                mb = (parts[i] if real else _dummy(device)).to(device)
                last = i == n_micro - 1
                with _gradient_sync(policy, world,
                                    sync=last or numerics.gradient_sync == "micro_batch"):
                    totals.add(forward_backward(
                        policy, mb, recipe=recipe, temperature=temperature, numerics=numerics,
                        normalizer=normalizer, world=world, step=step, real=real,
                        timing=timing))
    t0 = time.perf_counter()
    # every prompt zero-variance (no micro-batch): no gradient, AdamW leaves the weights be
    grad_norm = clip_gradients(policy, recipe.optimizer.grad_clip, step, world) if n_micro \
        else 0.0
    optimizer.step()
    scheduler.step()
    policy.eval()
    timing["optimizer_s"] = time.perf_counter() - t0
    if not n_micro:
        return {"loss": 0.0, "grad_norm": 0.0, "entropy": float("nan"),
                "is_ratio_mean": float("nan"), "clip_fraction": float("nan"),
                **dict.fromkeys(MISMATCH_COLUMNS, float("nan")), "lr": lr,
                "trained_tokens": 0, "micro_batches": 0, "padding_fraction": 0.0,
                "timing": timing}
    return {**totals.reduced(world).metrics(), "grad_norm": grad_norm, "lr": lr,
            "micro_batches": n_micro, "timing": timing}


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

"""Compute accounting: deterministic FLOP estimates and device-hours, per step and cumulative.

Two compute axes are recorded for every optimizer step (docs/design.md, "Compute"):

- **FLOPs** (deterministic, hardware-independent): the standard dense-transformer estimate
  (Kaplan et al. 2020; Hoffmann et al. 2022, App. F) of

      2·N FLOPs per token that only goes forward (a generated token, or a prompt token in the
      generator's prefill: "generated or scored"), and
      6·N FLOPs per token that goes forward and backward in the trainer (prompt + completion
      tokens of every sample that enters the loss).

  N is the number of parameters that take part in a matrix product for every token: all
  parameters **except the input embedding table** (an embedding lookup is a gather, not a
  matmul). The output projection (LM head) is counted, once, also when it is tied to the
  input embedding. The attention-score term (∝ context length) is left out: it is < 2 % of
  the total for the tiny default models (context ≤ ~80 tokens, hidden ≥ 64) and the paper's
  compute axis is GPU-hours anyway.
- **Device-hours**: wall-clock seconds × devices held by the run (generators and trainers
  together; CPU runs count one device, because all processes share one socket) / 3600.

The trainer counts the generation FLOPs of a sample at the step that consumes it. Samples
generated but never trained on (in flight when a chunk ends) are not counted; wall-clock
time before a crash that is redone after resuming is not counted either (the counters are
restored from the last save).

Deliberately left out: measured FLOPs (profilers) and energy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

import torch

__all__ = ["ComputeCounter", "StepCompute", "count_flop_params", "step_flops"]


def count_flop_params(model: torch.nn.Module) -> int:
    """N for the FLOP estimate: parameters used in a matmul per token (see module docstring)."""
    embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    embed_params = {id(p) for p in embedding.parameters()} if embedding is not None else set()
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    head_params = {id(p) for p in head.parameters()} if head is not None else set()
    total = 0
    seen: set[int] = set()
    for p in model.parameters():  # parameters() yields a tied tensor once
        if id(p) in seen:
            continue
        seen.add(id(p))
        if id(p) in embed_params and id(p) not in head_params:
            continue  # an untied input embedding table: a lookup, not a matmul
        total += p.numel()  # a tied embedding/head weight is counted here once, as the head
    return total


def step_flops(
    n_params: int,
    *,
    forward_tokens: int,
    trained_tokens: int,
) -> float:
    """FLOPs of one step: 2·N·forward_tokens + 6·N·trained_tokens."""
    if n_params < 0 or forward_tokens < 0 or trained_tokens < 0:
        raise ValueError(
            f"step_flops needs non-negative counts, got n_params={n_params}, "
            f"forward_tokens={forward_tokens}, trained_tokens={trained_tokens}"
        )
    return 2.0 * n_params * forward_tokens + 6.0 * n_params * trained_tokens


@dataclasses.dataclass(frozen=True)
class StepCompute:
    """What one optimizer step cost."""

    flops: float
    device_hours: float
    generated_tokens: int  # completion tokens generated for the samples of this step


@dataclasses.dataclass
class ComputeCounter:
    """Cumulative compute of a run; saved in the trainer state and restored on resume."""

    n_params: int
    n_devices: int = 1
    flops: float = 0.0
    device_hours: float = 0.0
    tokens: int = 0  # cumulative generated (completion) tokens consumed by the trainer

    def __post_init__(self) -> None:
        if self.n_params <= 0:
            raise ValueError(f"ComputeCounter: n_params = {self.n_params} must be > 0")
        if self.n_devices <= 0:
            raise ValueError(f"ComputeCounter: n_devices = {self.n_devices} must be > 0")

    def add_step(
        self,
        *,
        wall_seconds: float,
        prompt_tokens: Iterable[int],
        completion_tokens: Iterable[int],
        trained_tokens: int,
    ) -> StepCompute:
        """Account one step: lengths of every generated sample and the trained token count."""
        prompt_total = int(sum(prompt_tokens))
        completion_total = int(sum(completion_tokens))
        if wall_seconds < 0:
            raise ValueError(f"wall_seconds = {wall_seconds} must be >= 0")
        flops = step_flops(
            self.n_params,
            forward_tokens=prompt_total + completion_total,
            trained_tokens=trained_tokens,
        )
        hours = wall_seconds * self.n_devices / 3600.0
        self.flops += flops
        self.device_hours += hours
        self.tokens += completion_total
        return StepCompute(flops=flops, device_hours=hours, generated_tokens=completion_total)

    def state_dict(self) -> dict:
        return dataclasses.asdict(self)

    def load_state_dict(self, state: dict) -> None:
        if int(state["n_params"]) != self.n_params:
            raise ValueError(
                f"compute state was saved for a model with N = {state['n_params']} FLOP "
                f"parameters but this model has N = {self.n_params}; the checkpoint belongs "
                "to a different model"
            )
        self.flops = float(state["flops"])
        self.device_hours = float(state["device_hours"])
        self.tokens = int(state["tokens"])
        # n_devices may legitimately change between chunks (another machine): keep the new one

"""The policy's weights as PipelineRL generators receive them: `PolicyWeights`, a
`scalerl.rollout.weight_transfer.WeightStream` over the trainer's (possibly sharded) policy.

Iterating it yields (name, tensor) for every parameter once (a tied embedding/head once: the
layout's aliases), in the generators' dtype, one tensor at a time. At several trainer ranks
each tensor is gathered from its FSDP2 shards (`scalerl.parallel.checkpoint.iter_full_tensors`:
a collective, so every rank iterates, and the ranks that push nothing drain it) and cast on the
rank's device before it leaves it (a CPU tensor is cast by the copy into the host slot), so no
device holds a full copy of the model and the host holds none in float32: the host slot, or
vLLM's transfer buffer, is the only destination. At one rank the parameters are read as they
are. The layout comes from the parameters' global
shapes without gathering anything; the stream can be iterated once per push, for ever.

Bytes per push (the layout's payload) for the models of config/gpu.yaml in bfloat16:
Qwen3-0.6B 596,049,920 x 2 = 1.19 GB, Qwen3-1.7B 1,720,574,976 x 2 = 3.44 GB (their tied
151,936 x hidden head sent once; `tests/rl/test_weights.py` checks the arithmetic on the
architecture table).

Deliberately left out: deltas between versions and sparse pushes.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from scalerl.parallel.checkpoint import iter_full_tensors
from scalerl.parallel.shard import ScoringPolicy
from scalerl.rollout.weight_transfer import DEFAULT_BUCKET_BYTES, WeightLayout, weight_layout

__all__ = ["PolicyWeights"]


class PolicyWeights:
    """The stream of a policy's weights in `dtype` (module docstring); `policy` is the
    trainer's `ScoringPolicy` (names without its `model.` prefix) or an HF model."""

    def __init__(self, policy: torch.nn.Module, dtype: str | None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        self.policy = policy
        prefix = "model." if isinstance(policy, ScoringPolicy) else ""
        named = [(name.removeprefix(prefix), tensor)
                 for name, tensor in policy.state_dict(keep_vars=True).items()]
        self.layout: WeightLayout = weight_layout(named, dtype, bucket_bytes)
        self._tensors = dict(named)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        entries = self.layout.entries
        gathered = iter_full_tensors((e.name, self._tensors[e.name]) for e in entries)
        for entry, (name, full) in zip(entries, gathered):
            # cast on the device (half the bytes leave it); a CPU tensor is cast by the copy
            # into the host slot that takes it
            yield name, full if full.device.type == "cpu" else full.to(entry.torch_dtype)

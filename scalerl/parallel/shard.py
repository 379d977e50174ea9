"""The trainer's policy as one module: `ScoringPolicy`, FSDP2-sharded over the ranks of a World.

`shard_policy(model, world)` wraps the HF causal LM in `ScoringPolicy` (an `nn.Module` whose
forward is `scalerl.models.logprobs.sequence_logprobs`) and puts it on the world's device. At
one rank that is a move. At several ranks the model stays where it was loaded (the host) and
`fully_shard` (FSDP2) takes it to the device one group at a time: each `fully_shard` call moves
only its own module's parameters to the device and shards them there (FSDP2's
`_move_states_to_device`, torch 2.13), so a rank's device never holds more than its shards plus
one decoder layer (or the root: embeddings, norm, tied head) unsharded, instead of the whole
float32 model (6.4 GiB for Qwen3-1.7B, 32 GiB for 8B) before the first shard. It applies:

- to every decoder layer (`model.base_model.layers`) and then to the wrapper as the root
  (embeddings, final norm and the tied LM head): the sharded parameters, their gradients and
  the AdamW state stay in the parameters' dtype (fp32: the master weights);
- `MixedPrecisionPolicy(param_dtype=None, reduce_dtype=float32)`: the all-gathered parameters
  keep their dtype and gradients are reduce-scattered in fp32. The body's bf16 compute comes
  from the same `torch.autocast` the one-rank step uses (`scalerl.rl.update.step_precision`),
  and the FP32 LM head from the same `fp32_linear`, so one rank and N ranks compute the same
  numbers (a bf16 all-gather would halve the traffic but change the norms' weights; left out);
- gradients are summed over ranks, not averaged (`set_gradient_divide_factor(1.0)` with
  sum-only collectives, which gloo needs): each rank's loss is its share of the batch loss (the
  batch-wide `LossNormalizer`, `scalerl.rl.batch`), so the sum of the ranks' gradients is the
  gradient of the batch loss.

Gradient checkpointing composes: the one-rank path switches transformers' non-reentrant
checkpointing on for the optimizer step (`scalerl.rl.update.training_checkpointing`); under
FSDP2 a checkpointed layer's recomputation runs its all-gather hooks again.

Why a wrapper: the trainer scores tokens with a split body/head forward (`model_body(model)`
then the head's weight, `scalerl.models.logprobs`) that never calls the causal LM's own
`forward`, so FSDP's root hooks on it would never all-gather the embeddings or head. The
wrapper's forward is the root forward: its pre-forward hook unshards the root parameters, its
outputs carry the backward hooks that reduce-scatter their gradients.

Why not meta-device init then a sharded load: every rank already reads the checkpoint into
host memory (R full copies on a node: 8 x 6.9 GB for Qwen3-1.7B, well within an 8-GPU node's
RAM), and loading it through transformers' `from_pretrained` keeps one loading path (tied
weights, non-persistent buffers such as RoPE's `inv_freq` initialised by the model itself).
Meta init would save that host memory and the disk reads, at the cost of a second load path
(re-initialised buffers, re-tied weights, a broadcast from rank 0); the device memory, the
scarce one, is the same either way. A meta-device model shards as is (tests/parallel).

Deliberately left out: CPU offload, tensor/sequence parallelism and generation from the
sharded model (generators get full weights, `scalerl.parallel.checkpoint.gathered_state_dict`).
"""

from __future__ import annotations

import torch
from torch import nn

from scalerl.parallel.world import World

__all__ = ["ScoringPolicy", "decoder_layers", "shard_policy"]


class ScoringPolicy(nn.Module):
    """Token log-probabilities and entropies of a causal LM as one root forward."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                fp32_lm_head: bool, temperature: float, token_mask: torch.Tensor | None,
                chunk_tokens: int, head_operands: str | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        from scalerl.models.logprobs import sequence_logprobs

        return sequence_logprobs(  # [B, T], [B, T]
            self.model, input_ids, attention_mask, fp32_lm_head=fp32_lm_head,
            temperature=temperature, return_entropy=True, token_mask=token_mask,
            chunk_tokens=chunk_tokens, head_operands=head_operands)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of an HF causal LM (`base_model.layers`), else a clear error."""
    layers = getattr(getattr(model, "base_model", None), "layers", None)
    if layers is None or len(layers) == 0:
        raise ValueError(f"{type(model).__name__} has no base_model.layers: trainer_ranks > 1 "
                         "shards decoder-layer transformers (Qwen2/Qwen3/Llama-style) only")
    return list(layers)


def shard_policy(model: nn.Module, world: World) -> ScoringPolicy:
    """`ScoringPolicy(model)` on `world.device`, fully sharded over `world.mesh` when the world
    has several ranks: each group's parameters reach the device in its own `fully_shard`
    (module docstring)."""
    if not world.distributed:
        return ScoringPolicy(model.to(world.device))
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = ScoringPolicy(model)  # left where it is: fully_shard moves it group by group
    keep_dtype = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=world.mesh, mp_policy=keep_dtype)
        _sum_gradients(layer)
    fully_shard(policy, mesh=world.mesh, mp_policy=keep_dtype)
    _sum_gradients(policy)
    return policy


def _sum_gradients(module) -> None:
    """Reduce-scatter gradients as a plain SUM (divide factor 1; gloo has no PREMUL_SUM)."""
    module.set_gradient_divide_factor(1.0)
    module.set_force_sum_reduction_for_comms(True)

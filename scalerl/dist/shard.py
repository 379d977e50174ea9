"""FSDP2 sharding of the policy: each decoder layer and the root, fp32 master weights.

`shard_policy(model, env)` wraps the HF causal LM in `ScoringPolicy` (an `nn.Module` whose
forward is `scalerl.models.logprobs.sequence_logprobs`) and applies `fully_shard`:

- to every decoder layer (`model.base_model.layers`), with
  `MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)` on CUDA: the layer's
  all-gathered parameters and its compute are bf16, gradients are reduce-scattered in fp32 and
  the sharded parameters, gradients and AdamW state stay fp32 (the master weights). On CPU the
  policy is fp32 throughout (`param_dtype=None`), so a CPU run matches the unsharded step;
- to the wrapper as the root: embeddings, final norm and the (tied) LM head, kept in fp32 on
  every device so the FP32 LM head (`fp32_lm_head`) sees fp32 weights.

Why a wrapper: the trainer scores tokens with a split body/head forward (`model_body(model)`
then the head's weight, `scalerl.models.logprobs`) that never calls the causal LM's own
`forward`, so FSDP's root hooks on it would never all-gather the embeddings or head. The
wrapper's forward is the root forward: its pre-forward hook unshards the root parameters, its
outputs carry the backward hooks that reduce-scatter their gradients.

Gradients are *summed* over ranks (`set_gradient_divide_factor(1.0)` with sum-only
collectives, which gloo needs), not averaged: each rank's
loss is its share of the global batch loss (`scalerl.dist.reduce.global_normalizer`), so the
sum of the ranks' gradients is the gradient of the batch loss.

Deliberately left out: CPU offload, activation checkpointing under FSDP (use the unsharded
`StepNumerics.gradient_checkpointing` path) and generation from the sharded model (the
generators get full weights, `scalerl.dist.checkpoint.full_state_dict`).
"""

from __future__ import annotations

import torch
from torch import nn

from scalerl.dist.env import DistEnv

__all__ = ["ScoringPolicy", "decoder_layers", "shard_policy"]


class ScoringPolicy(nn.Module):
    """Token log-probabilities and entropies of a causal LM as one root forward."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, *,
                fp32_lm_head: bool, temperature: float, token_mask: torch.Tensor | None,
                chunk_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        from scalerl.models.logprobs import sequence_logprobs

        return sequence_logprobs(  # [B, T], [B, T]
            self.model, input_ids, attention_mask, fp32_lm_head=fp32_lm_head,
            temperature=temperature, return_entropy=True, token_mask=token_mask,
            chunk_tokens=chunk_tokens)


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of an HF causal LM (`base_model.layers`), else a clear error."""
    layers = getattr(getattr(model, "base_model", None), "layers", None)
    if layers is None or len(layers) == 0:
        raise ValueError(f"{type(model).__name__} has no base_model.layers: scalerl.dist shards "
                         "decoder-layer transformers (Qwen2/Qwen3/Llama-style) only")
    return list(layers)


def shard_policy(model: nn.Module, env: DistEnv) -> ScoringPolicy:
    """`ScoringPolicy(model)`, moved to `env.device` and fully sharded over `env.mesh`.

    The model's parameters must be fp32 (the master weights). A single-rank `env` returns the
    unsharded wrapper."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    found = sorted({str(p.dtype) for p in model.parameters()})
    if found != ["torch.float32"]:
        raise ValueError(f"model parameters are {', '.join(found)}: FSDP keeps fp32 master "
                         "weights; load the model in float32 (bf16 compute comes from the "
                         "mixed-precision policy on CUDA)")
    policy = ScoringPolicy(model.to(env.device))
    if not env.distributed:
        return policy
    on_cuda = env.device.type == "cuda"
    layer_mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if on_cuda else None,
                                    reduce_dtype=torch.float32)
    root_mp = MixedPrecisionPolicy(param_dtype=None, reduce_dtype=torch.float32)
    for layer in decoder_layers(model):
        fully_shard(layer, mesh=env.mesh, mp_policy=layer_mp)
        _sum_gradients(layer)
    fully_shard(policy, mesh=env.mesh, mp_policy=root_mp)
    _sum_gradients(policy)
    return policy


def _sum_gradients(module) -> None:
    """Reduce-scatter gradients as a plain SUM (divide factor 1; gloo has no PREMUL_SUM)."""
    module.set_gradient_divide_factor(1.0)
    module.set_force_sum_reduction_for_comms(True)

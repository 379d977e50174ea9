"""`ScalerlWorker`: methods scalerl adds to vLLM's workers (`worker_extension_cls`).

vLLM mixes this class into every worker of an engine built with
`worker_extension_cls="scalerl.rollout.vllm_worker.ScalerlWorker"`, so the engine can call
them by name through `collective_rpc`, also in the engine-core process of `AsyncLLM` (where
passing a Python function would need vLLM's insecure pickling switch).

`load_packed_weights` exists because vLLM's RPC serializer turns tensors nested in untyped
arguments into plain lists: the engine sends each tensor as (name, dtype, shape, raw bytes)
(`pack_tensors`) and the worker rebuilds it and hands it to vLLM's in-place
`reload_weights`.

Deliberately left out: NCCL/IPC weight transfer (the bytes travel through vLLM's RPC socket).
"""

from __future__ import annotations

import torch


def pack_tensors(items) -> list[tuple[str, str, list[int], bytes]]:
    """(name, dtype, shape, bytes) per (name, tensor): survives vLLM's RPC serializer."""
    out = []
    for name, tensor in items:
        t = tensor.detach().to("cpu").contiguous()
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
        out.append((name, str(t.dtype).removeprefix("torch."), list(t.shape), raw))
    return out


def unpack_tensors(packed) -> list[tuple[str, torch.Tensor]]:
    """The inverse of `pack_tensors`."""
    out = []
    for name, dtype, shape, raw in packed:
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        out.append((name, flat.view(getattr(torch, dtype)).reshape(shape)))
    return out


class ScalerlWorker:
    """Worker mixin (see the module docstring)."""

    def load_packed_weights(self, packed) -> None:
        """vLLM's in-place reload of checkpoint-format weights sent by `pack_tensors`."""
        self.reload_weights(weights_iterator=unpack_tensors(packed), is_checkpoint_format=True)

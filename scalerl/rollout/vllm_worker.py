"""What scalerl adds to vLLM's workers: weight-transfer backends that re-tie tied weights, the
`scalerl_shm` host-slot backend, and probes.

vLLM mixes `ScalerlWorker` into every worker of an engine built with
`worker_extension_cls="scalerl.rollout.vllm_worker.ScalerlWorker"` (importing this module in
the worker, also in `AsyncLLM`'s engine-core process, before the model loads), so the engines
call its methods by name through `collective_rpc`:

- `scalerl_head_dtype()`: the dtype the loaded model's logits processor computes the LM head
  in (`scalerl.rollout.vllm_contract` checks it against the FP32 head asked for);
- `scalerl_head_digest()`: SHA-256 of the LM head's and the input embedding's weights and
  whether they are one tensor (tests of tied weights after a push);
- `scalerl_bytes_received()`: the bytes the `scalerl_shm` backend loaded so far.

Importing this module registers three backends with vLLM's `WeightTransferEngineFactory`
(vLLM's weight-transfer round trip: `init_weight_transfer_engine` / `start_weight_update` /
`update_weights` / `finish_weight_update`, inside vLLM's layerwise reload):

- `scalerl_shm`: the host slots of `scalerl.rollout.weight_transfer`. Init maps the slot files
  by path (`map_slot_files`); an update names a slot and loads its tensors bucket by bucket
  (views of the mapped file: no copy before the model's own) with `model.load_weights`.
- `scalerl_nccl` / `scalerl_ipc`: vLLM's NCCL and IPC engines, unchanged but for re-tying.

Re-tying. A push sends a tied tensor once, under its first name; its other names are the
layout's `aliases`, given to the worker at init. The worker loads each alias from the received
tensor as well (no bytes on the wire). It must: during vLLM's layerwise reload the tied
modules' parameters are separate placeholders, so a module whose name is not loaded gets its
old tensor back without being processed again, and on vLLM's CPU backend the head's GEMM then
keeps a packed copy of the old embedding (measured: log-probabilities off by up to 66 nats
after a push that changed a tied Qwen3's embedding, tests/rollout/test_vllm_weight_transfer.py).

Deliberately left out: transfer between nodes (each node's first rank pushes to its own).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from scalerl.rollout.weight_transfer import WeightLayout, map_slot_files

BACKENDS = {"shm": "scalerl_shm", "nccl": "scalerl_nccl", "ipc": "scalerl_ipc"}


def _digest(tensor: torch.Tensor) -> str:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()


def _model(worker) -> torch.nn.Module:
    return worker.model_runner.get_model()


class ScalerlWorker:
    """Worker mixin (see the module docstring)."""

    def scalerl_head_dtype(self) -> str:
        """The dtype of the loaded model's LM-head projection (its logits processor's
        head_dtype, else the head weight's dtype)."""
        model = _model(self)
        processor = getattr(model, "logits_processor", None)
        dtype = getattr(processor, "head_dtype", None)
        if dtype is None:
            dtype = model.lm_head.weight.dtype
        return str(dtype).removeprefix("torch.")

    def scalerl_head_digest(self) -> dict[str, Any]:
        """SHA-256 of the head's and the input embedding's vocabulary rows (vLLM pads them to a
        multiple of 64), and whether the two share storage."""
        model = _model(self)
        vocab = self.vllm_config.model_config.get_vocab_size()
        head = model.lm_head.weight
        embed = model.model.embed_tokens.weight  # Llama/Qwen-style decoders
        return {"lm_head": _digest(head[:vocab]), "embed_tokens": _digest(embed[:vocab]),
                "tied": head.data_ptr() == embed.data_ptr()}

    def scalerl_bytes_received(self) -> int:
        """Bytes the `scalerl_shm` backend has loaded into this worker's model so far."""
        return int(getattr(self.weight_transfer_engine, "bytes_received", 0))


def with_aliases(weights: Iterable[tuple[str, torch.Tensor]],
                 aliases: Sequence[Sequence[str]]) -> list[tuple[str, torch.Tensor]]:
    """`weights` plus (alias, tensor) for every alias whose tensor is among them."""
    weights = list(weights)
    got = dict(weights)
    return weights + [(alias, got[name]) for alias, name in aliases if name in got]


@contextlib.contextmanager
def _retied(model: torch.nn.Module, aliases: Sequence[Sequence[str]]) -> Iterator[None]:
    """While vLLM's own engines receive: `model.load_weights` also loads the aliases."""
    if not aliases:
        yield
        return
    load = model.load_weights
    model.load_weights = lambda weights: load(with_aliases(weights, aliases))
    try:
        yield
    finally:
        del model.load_weights  # the class's method again


def _register() -> None:
    """The three backends in vLLM's weight-transfer registry (once per process)."""
    from vllm.distributed.weight_transfer.base import (
        WeightTransferEngine,
        WeightTransferInitInfo,
        WeightTransferUpdateInfo,
    )
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    if BACKENDS["shm"] in WeightTransferEngineFactory._registry:
        return

    @dataclasses.dataclass
    class HostSlotInitInfo(WeightTransferInitInfo):
        paths: list
        layout: dict

    @dataclasses.dataclass
    class HostSlotUpdateInfo(WeightTransferUpdateInfo):
        slot: int

    class HostSlotTransferEngine(WeightTransferEngine):
        """vLLM's weight-transfer engine over scalerl's host slots (module docstring)."""

        init_info_cls = HostSlotInitInfo
        update_info_cls = HostSlotUpdateInfo

        def __init__(self, config, vllm_config, device, model) -> None:
            super().__init__(config, vllm_config, device, model)
            self.slots: list[dict[str, torch.Tensor]] = []
            self.layout: WeightLayout | None = None
            self.bytes_received = 0

        def init_transfer_engine(self, init_info: HostSlotInitInfo) -> None:
            self.layout = WeightLayout.from_dict(init_info.layout)
            self.slots = map_slot_files({"paths": init_info.paths, "layout": init_info.layout})

        def start_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

            initialize_layerwise_reload(self.model)

        def update_weights(self, update_info: dict[str, Any]) -> None:
            self.receive_weights(self.parse_update_info(update_info))
            if torch.accelerator.is_available():  # the copies to the device may be async
                torch.accelerator.synchronize()

        def receive_weights(self, update_info: HostSlotUpdateInfo) -> None:
            if self.layout is None:
                raise RuntimeError("scalerl_shm weight transfer not initialised: call "
                                   "init_weight_transfer_engine with the slots first")
            views = self.slots[update_info.slot]
            for bucket in self.layout.buckets():
                pairs = [(e.name, views[e.name]) for e in bucket]
                self.model.load_weights(with_aliases(pairs, self.layout.aliases))
                self.bytes_received += sum(e.nbytes for e in bucket)

        def finish_weight_update(self) -> None:
            from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

            finalize_layerwise_reload(self.model, self.model_config)

        def shutdown(self) -> None:
            self.slots, self.layout = [], None

    WeightTransferEngineFactory.register_engine(BACKENDS["shm"], HostSlotTransferEngine)
    _register_retying(WeightTransferEngineFactory)


def _register_retying(factory) -> None:
    """vLLM's NCCL and IPC engines whose init info also carries the aliases to re-tie."""
    from vllm.distributed.weight_transfer.ipc_engine import (
        IPCWeightTransferEngine,
        IPCWeightTransferInitInfo,
    )
    from vllm.distributed.weight_transfer.nccl_engine import (
        NCCLWeightTransferEngine,
        NCCLWeightTransferInitInfo,
    )

    for key, engine_cls, info_cls in (("nccl", NCCLWeightTransferEngine,
                                       NCCLWeightTransferInitInfo),
                                      ("ipc", IPCWeightTransferEngine,
                                       IPCWeightTransferInitInfo)):
        init_cls = dataclasses.make_dataclass(
            f"Retying{info_cls.__name__}",
            [("aliases", list, dataclasses.field(default_factory=list, kw_only=True))],
            bases=(info_cls,))

        class Retying(engine_cls):
            init_info_cls = init_cls
            aliases: list = []

            def init_transfer_engine(self, init_info) -> None:
                self.aliases = list(init_info.aliases)
                super().init_transfer_engine(init_info)

            def receive_weights(self, update_info) -> None:
                with _retied(self.model, self.aliases):
                    super().receive_weights(update_info)

        Retying.__name__ = f"Retying{engine_cls.__name__}"
        factory.register_engine(BACKENDS[key], Retying)


try:
    _register()
except ImportError:  # no vllm here: the module's pure parts still import
    pass

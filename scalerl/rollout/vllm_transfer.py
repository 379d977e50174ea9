"""Weights to vLLM generators over a GPU transport (`VllmPusher`, trainer side), through
vLLM's own weight-transfer engines: NCCL when the generators have devices of their own, CUDA
IPC when a generator shares the device of the rank that pushes
(`scalerl.rollout.weight_transfer.choose_transport`).

One push is vLLM's update round trip, driven through a client with the four methods of vLLM's
`VLLMWeightSyncClient` protocol (`scalerl.rl.pipeline` implements it by forwarding each call
to every generator process of the node and waiting for all of them; the generator side is
`AsyncVLLMEngine.transfer_rpc`): `start_weight_update` (each engine pauses, keeping its
requests and their KV cache), `update_weights` (the bytes), `finish_weight_update` (vLLM's
layerwise reload finalised, the new weight version set, generation resumed).

- nccl: vLLM's `NCCLTrainerWeightTransferEngine` (packed buffers, double-buffered) in one group
  of this rank (NCCL rank 0) and every worker of the node's K generators (generator k's workers
  from rank 1 + k x tensor_parallel_size: the client rewrites `rank_offset` per generator),
  rendezvous on 127.0.0.1 (the generators are on this node) at a free port. vLLM's packed
  sender reads the weights on side streams of its own: each read first waits for an event
  recorded on this rank's stream when the push began (`_ordered_after`), so it follows the
  optimizer step's writes at one rank as at several.
- ipc: vLLM's packed IPC producer: one reusable buffer on this rank's device, its CUDA IPC
  handle sent per chunk as vLLM's `IPCWeightTransferUpdateInfo`; each chunk is read by the
  generators before the next is packed (the client waits for them). Handles are not gathered
  across trainer ranks (vLLM's IPC trainer engine would all-gather them over the default group,
  which the other ranks do not join here): only this rank's device holds what the generator
  reads. The handle args travel raw through vLLM's msgpack RPC, so the generator's engine
  core starts with VLLM_ALLOW_INSECURE_SERIALIZATION=1 (`VllmSettings.engine_environment`).

The weights come as a `scalerl.rollout.weight_transfer.WeightStream` (the policy's tensors one
at a time, gathered from shards and cast to the generators' dtype on this rank's device),
adapted to vLLM's `WeightSource` (metadata from its layout; one iteration per push), so the
device never holds a full copy of the model: the transfer buffers are max(bucket_bytes,
the largest tensor) each (two for NCCL, one for IPC).

Deliberately left out, and not run in this repository's tests (they need CUDA devices): the
transfer itself; the CPU tests run the same round trip over host slots
(`scalerl.rollout.vllm_worker`, backend `scalerl_shm`).
"""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from typing import Any, Protocol

import torch

from scalerl.rollout.weight_transfer import WeightLayout, WeightStream

__all__ = ["GeneratorClient", "VllmPusher", "free_port", "ipc_update_info"]


class GeneratorClient(Protocol):
    """vLLM's `VLLMWeightSyncClient` protocol plus the version the push carries."""

    version: int

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None: ...

    def start_weight_update(self) -> None: ...

    def update_weights(self, update_info: dict[str, Any]) -> None: ...

    def finish_weight_update(self, weight_version: str | None = None) -> None: ...


def free_port() -> int:
    """A TCP port free on this host now (the NCCL rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ipc_update_info(chunk) -> dict[str, Any]:
    """The `update_weights` payload of one chunk of vLLM's `packed_ipc_producer`: its
    `IPCWeightTransferUpdateInfo` as a dict, the handle args raw (as vLLM's own IPC trainer
    engine sends them). They reach the engine core through vLLM's msgpack RPC, which needs
    `VllmSettings.engine_environment()` (VLLM_ALLOW_INSECURE_SERIALIZATION) on both sides."""
    from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferUpdateInfo

    info = IPCWeightTransferUpdateInfo(
        names=chunk.names, dtype_names=chunk.dtype_names, shapes=chunk.shapes,
        ipc_handles=chunk.ipc_handle, tensor_sizes=chunk.tensor_sizes)
    return dataclasses.asdict(info)


def _stream_source(layout: WeightLayout):
    """vLLM's `WeightSource` over our streams (`stream` set before each push): the 0.32
    contract (`metadata()` a method, weights from `__iter__`); `VllmPusher.start` refuses
    another vLLM before this class is defined (`scalerl.rollout.vllm_contract.VLLM_SPEC`)."""
    from vllm.distributed.weight_transfer.base import ParamMeta, WeightSource

    class StreamSource(WeightSource):
        stream: WeightStream | None = None
        ready = None  # torch.cuda.Event: the pushing rank's stream when the push began

        def metadata(self) -> list:
            return [ParamMeta(e.name, e.torch_dtype, tuple(e.shape)) for e in layout.entries]

        def __iter__(self):
            if self.stream is None:
                raise RuntimeError("VllmPusher: no weights to send")
            return _ordered_after(iter(self.stream), self.ready)

    return StreamSource()


def _ordered_after(pairs: Iterator, ready) -> Iterator:
    """`pairs`, each drawn after the then-current CUDA stream waits for `ready` (none: as
    they come). vLLM's packed NCCL sender (`packed_nccl_broadcast_producer`, 0.32) draws the
    weights inside `torch.cuda.stream(...)` of side streams of its own, which wait for
    nothing: the casts and copies that read the parameters would otherwise race the
    optimizer step's writes still queued on the trainer's stream."""
    while True:
        if ready is not None:
            torch.cuda.current_stream().wait_event(ready)
        try:
            pair = next(pairs)
        except StopIteration:
            return
        yield pair


class VllmPusher:
    """Trainer side of the nccl / ipc transports (module docstring): `start` once, after the
    generators are up, then `push(stream, version)` per version."""

    def __init__(self, kind: str, client: GeneratorClient, layout: WeightLayout,
                 n_workers: int) -> None:
        if kind not in ("nccl", "ipc"):
            raise ValueError(f"VllmPusher transports nccl or ipc, not {kind!r}")
        self.kind, self.client, self.layout, self.n_workers = kind, client, layout, n_workers
        self.buffer_bytes = max([layout.bucket_bytes] + [e.nbytes for e in layout.entries])
        self._source = None
        self._engine = None

    def start(self) -> None:
        """The handshake: the NCCL group (nccl), the packed-IPC setting (ipc). A vLLM outside
        `VLLM_SPEC` is refused first (VllmContractError naming the supported range)."""
        from scalerl.rollout.vllm_contract import check_version, vllm_version

        check_version(vllm_version())
        if self.kind == "ipc":
            self.client.init_weight_transfer_engine({"packed": True})
            return
        from vllm.distributed.weight_transfer.nccl_engine import (
            NCCLTrainerInitInfo,
            NCCLTrainerWeightTransferEngine,
        )

        self._source = _stream_source(self.layout)
        info = NCCLTrainerInitInfo(master_address="127.0.0.1", master_port=free_port(),
                                   world_size=1 + self.n_workers, rank=0, packed=True,
                                   packed_buffer_size_bytes=self.buffer_bytes)
        self._engine = NCCLTrainerWeightTransferEngine.trainer_init(
            info, client=self.client, source=self._source)

    def push(self, stream: WeightStream, version: int) -> int:
        """Send `stream` as `version` to every generator; the payload bytes."""
        self.client.version = version
        if self.kind == "nccl":
            ready = torch.cuda.Event()
            ready.record()  # after the optimizer step's kernels on this rank's stream
            self._source.stream, self._source.ready = stream, ready
            try:
                self._engine.send_weights()
            finally:
                self._source.stream = self._source.ready = None
            return self.layout.payload
        from vllm.distributed.weight_transfer.packed_tensor import packed_ipc_producer

        uuid = str(torch.cuda.get_device_properties(torch.cuda.current_device()).uuid)
        self.client.start_weight_update()
        for chunk in packed_ipc_producer(iterator=iter(stream), gpu_uuid=uuid,
                                         post_iter_func=lambda item: item[1],
                                         buffer_size_bytes=self.buffer_bytes):
            self.client.update_weights(ipc_update_info(chunk))  # read before the next chunk
        self.client.finish_weight_update(str(version))
        torch.cuda.ipc_collect()
        return self.layout.payload

    def close(self) -> None:
        if self._engine is not None:
            self._engine.shutdown()
            self._engine = None

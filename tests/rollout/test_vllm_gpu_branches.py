"""The CUDA-only branches of the vLLM path, run on CPU with vLLM's own objects (issue 35).

Run in `.venv-vllm` (`make test-vllm`). None of them needs a device:

- the CUDA IPC push's `update_weights` payload (`scalerl.rollout.vllm_transfer.ipc_update_info`
  of a chunk of vLLM's packed IPC producer) through vLLM 0.32's own msgpack encoder (the
  generator process) and decoder (the engine core) in the environment the engine core gets
  from `AsyncVLLMEngine`: vLLM refuses the handle args' objects (the tensor class, storage
  types, dtypes) unless VLLM_ALLOW_INSECURE_SERIALIZATION=1 is set there.
"""

import os
import subprocess
import sys

import pytest

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

"""Generators' CUDA_VISIBLE_DEVICES come from the trainer's own visible device list."""

import pytest
import torch

from scalerl.config import ConfigError
from scalerl.rl.run_config import RunConfig
from scalerl.rl.trainer import child_visible_devices, resolve_devices
from scalerl.rollout.vllm_settings import VllmSettings


def test_child_gets_the_parents_ith_visible_device():
    assert child_visible_devices(None, [1]) == "1"  # parent sees all: absolute indices
    assert child_visible_devices(None, [1, 2]) == "1,2"
    assert child_visible_devices("4,5,7", [1]) == "5"  # SLURM gave the job GPUs 4, 5, 7
    assert child_visible_devices("4, 5,7", [1, 2]) == "5,7"
    uuids = "GPU-aaaa,GPU-bbbb"
    assert child_visible_devices(uuids, [1]) == "GPU-bbbb"
    with pytest.raises(ConfigError, match="index 3 is outside the 3 device"):
        child_visible_devices("4,5,7", [2, 3])
    with pytest.raises(ConfigError, match="outside the 0 device"):
        child_visible_devices("", [0])


@pytest.fixture
def three_gpus(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)


def test_resolve_devices_maps_through_the_visible_list(monkeypatch, three_gpus):
    cfg = RunConfig(generators=2, device="auto")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5,6")
    assert resolve_devices(cfg, pipeline=True) == (
        "cuda:0", [{"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "6"}], 3)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_devices(cfg, pipeline=True)[1] == [{"CUDA_VISIBLE_DEVICES": "1"},
                                                      {"CUDA_VISIBLE_DEVICES": "2"}]


def test_tensor_parallel_generators_take_several_devices(monkeypatch, three_gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4,8")
    cfg = RunConfig(generators=1, device="auto", engine="vllm",
                    vllm=VllmSettings(tensor_parallel_size=2))
    assert resolve_devices(cfg, pipeline=True) == (
        "cuda:0", [{"CUDA_VISIBLE_DEVICES": "4,8"}], 3)
    two = cfg.replace(generators=2)  # 1 + 2 x 2 > 3 devices: share cuda:0
    assert resolve_devices(two, pipeline=True) == ("cuda:0", [{}, {}], 1)

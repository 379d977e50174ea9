"""Generators' CUDA_VISIBLE_DEVICES come from the trainer's own visible device list."""

import pytest
import torch

from scalerl.config import ConfigError
from scalerl.parallel.world import World
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


ONE_GPU_RANK = World(device=torch.device("cuda:0"))


def test_resolve_devices_maps_through_the_visible_list(monkeypatch, three_gpus):
    cfg = RunConfig(generators=2, device="auto")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5,6")
    assert resolve_devices(cfg, True, ONE_GPU_RANK) == (
        [{"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "6"}], 3)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert resolve_devices(cfg, True, ONE_GPU_RANK)[0] == [{"CUDA_VISIBLE_DEVICES": "1"},
                                                           {"CUDA_VISIBLE_DEVICES": "2"}]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # not enough: share cuda:0
    assert resolve_devices(cfg, True, ONE_GPU_RANK) == ([{}, {}], 1)
    assert resolve_devices(cfg, False, ONE_GPU_RANK) == ([], 1)


def test_tensor_parallel_generators_take_several_devices(monkeypatch, three_gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4,8")
    cfg = RunConfig(generators=1, device="auto", engine="vllm",
                    vllm=VllmSettings(tensor_parallel_size=2))
    assert resolve_devices(cfg, True, ONE_GPU_RANK) == ([{"CUDA_VISIBLE_DEVICES": "4,8"}], 3)
    two = cfg.replace(generators=2)  # 1 + 2 x 2 > 3 devices: share cuda:0
    assert resolve_devices(two, True, ONE_GPU_RANK) == ([{}, {}], 1)


def test_generators_take_the_devices_after_the_nodes_trainer_ranks(monkeypatch):
    """4 trainer ranks + 4 generators on one 8-GPU node (the shipped one-node layout); on 2
    nodes the generators split evenly, each node's after its own 4 ranks (16 devices held)."""
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    cfg = RunConfig(generators=4, device="cuda")
    node = World(rank=0, size=4, local_size=4, device=torch.device("cuda:0"))
    envs, held = resolve_devices(cfg, True, node)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["4", "5", "6", "7"] and held == 8
    two_nodes = World(rank=4, size=8, local_rank=0, local_size=4,
                      device=torch.device("cuda:0"))
    envs, held = resolve_devices(cfg.replace(generators=8), True, two_nodes)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["4", "5", "6", "7"] and held == 16
    with pytest.raises(ConfigError, match="cannot be split evenly over the 2 nodes"):
        resolve_devices(cfg.replace(generators=3), True, two_nodes)


def test_cpu_ranks_count_one_device_each():
    cfg = RunConfig(generators=1)
    assert resolve_devices(cfg, True, World()) == ([{}], 1)
    assert resolve_devices(cfg, True, World(rank=1, size=2, local_size=2)) == ([{}], 2)


def test_the_weight_transport_follows_the_placement():
    from scalerl.models.config import ModelConfig
    from scalerl.rl.trainer import pipeline_options

    model = ModelConfig(dtype="bfloat16")
    pause = RunConfig(engine="vllm", vllm=VllmSettings(inflight_updates="pause",
                                                       sleep_during_update=True))
    own = pipeline_options(pause, model, colocated=False, cuda=True)
    assert own == {"dtype": "bfloat16", "transport": "nccl", "workers_per_generator": 1,
                   "sleep_during_update": False}  # only a generator sharing a device sleeps
    shared = pipeline_options(pause, model, colocated=True, cuda=True)
    assert (shared["transport"], shared["sleep_during_update"]) == ("ipc", True)
    for cfg in (RunConfig(engine="hf"), pause.replace(pipeline_fixed_lag=0),
                pause.replace(vllm={"inflight_updates": "step"})):
        assert pipeline_options(cfg, model, colocated=True, cuda=True)["transport"] == "shm"
    assert pipeline_options(pause, model, colocated=False, cuda=False)["transport"] == "shm"
    with pytest.raises(ConfigError, match="NCCL refuses two ranks on one GPU"):
        pipeline_options(pause.replace(vllm={"weight_transfer": "nccl"}), model,
                         colocated=True, cuda=True)


def test_one_engine_config_builder_for_trainer_and_eval():
    """`RunConfig.engine_config` is the EngineConfig of the trainer's engines and of `scalerl
    eval`: the run's engine, seed, device, threads, batch and interruption text; evaluation
    changes only the temperature."""
    cfg = RunConfig(engine="hf", seed=7, device="cpu", threads=3, temperature=0.8, gen_batch=0)
    train = cfg.engine_config()
    assert (train.backend, train.seed, train.device, train.threads, train.temperature) == (
        "hf", 7, "cpu", 3, 0.8)
    assert train.max_batch == cfg.recipe.samples_per_step
    assert train.interruption_text == cfg.recipe.interruption_text and train.vllm is None
    assert cfg.replace(gen_batch=12).engine_config().max_batch == 12
    evaluation = cfg.engine_config(temperature=0.6)
    assert evaluation == train.replace(temperature=0.6)

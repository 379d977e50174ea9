"""scalerl.dist without a process group: the group split by hand, the reductions equal the
single-process functions, the torchrun relaunch command and environment detection."""

import sys

import pytest
import torch

from scalerl.dist.batch import assign_groups
from scalerl.dist.env import init_distributed, launched_rank, torchrun_command
from scalerl.dist.reduce import (
    global_advantages,
    global_group_ids,
    global_normalizer,
    global_zero_variance,
)
from scalerl.rl.advantages import compute_advantages
from scalerl.rl.filters import zero_variance_mask
from scalerl.rl.losses import LossNormalizer


def test_assign_groups_by_hand():
    # group tokens: 7 -> 10, 3 -> 9, 5 -> 4, 1 -> 4 (ties: smaller id first)
    groups = [7, 3, 7, 5, 1, 3]
    tokens = [6, 5, 4, 4, 4, 4]
    # order 7 (10), 3 (9), 1 (4), 5 (4): 7 -> r0, 3 -> r1, 1 -> r1 (9 < 10), 5 -> r0 (10 < 13)
    assert assign_groups(groups, tokens, 2) == [[0, 2, 3], [1, 4, 5]]
    assert assign_groups(groups, tokens, 1) == [[0, 1, 2, 3, 4, 5]]
    # more ranks than groups: the last rank gets none
    assert assign_groups([0, 0, 1], [1, 1, 1], 3) == [[0, 1], [2], []]
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        assign_groups(groups, tokens, 0)


def test_reductions_equal_single_process_functions():
    gen = torch.Generator().manual_seed(1)
    group_ids = torch.tensor([4, 4, 4, 9, 9, 2, 2, 2, 2, 6])  # [10], unsorted, unequal sizes
    rewards = torch.tensor([1.0, -1, -1, 1, 1, -1, 1, 1, -0.5, 1])  # 9 and 6 zero-variance
    all_ids = global_group_ids(group_ids)
    assert all_ids.tolist() == [2, 4, 6, 9]
    keep = global_zero_variance(rewards, group_ids, all_ids)
    assert keep.tolist() == zero_variance_mask(rewards, group_ids).tolist()
    assert keep.tolist() == [True] * 3 + [False] * 2 + [True] * 4 + [False]
    for norm in ("batch", "group", "none"):
        torch.testing.assert_close(
            global_advantages(rewards, group_ids, all_ids, norm, keep=keep),
            compute_advantages(rewards, group_ids, norm, keep=keep), atol=1e-7, rtol=0)
    mask = torch.rand(10, 6, generator=gen) > 0.4  # [10, 6]
    mask[3] = False  # a completion without loss tokens
    ref = LossNormalizer.from_batch(mask, group_ids)
    got = global_normalizer(mask, group_ids, all_ids)
    assert got.group_ids.tolist() == ref.group_ids.tolist()
    torch.testing.assert_close(got.group_tokens, ref.group_tokens)
    assert (got.n_sequences, got.n_prompts) == (ref.n_sequences, ref.n_prompts) == (9, 4)
    with pytest.raises(ValueError, match="missing from the global ids"):
        global_normalizer(mask, group_ids, torch.tensor([2, 4, 6]))


def test_env_detection_and_relaunch_command(monkeypatch):
    assert launched_rank({"RANK": "0", "WORLD_SIZE": "2"})
    assert not launched_rank({"WORLD_SIZE": "2"})
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    env = init_distributed("cpu")  # not under torchrun: one rank, no process group
    assert (env.rank, env.world_size, env.distributed, env.is_main) == (0, 1, False, True)
    cmd = torchrun_command(2, ["train", "--config", "run.yaml"])
    assert cmd == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node=2", "-m", "scalerl", "train", "--config", "run.yaml"]


def test_multi_node_slurm_launch_is_srun_torchrun_with_c10d():
    import pytest

    from scalerl.dist.env import launch_command, srun_torchrun_command

    cmd = srun_torchrun_command(16, ["train", "--chunk", "0"], nodes=2, head="gpu-a01",
                                job_id="4242")
    assert cmd[:4] == ["srun", "--nodes=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    joined = " ".join(cmd)
    for part in ("--nnodes=2", "--nproc-per-node=8", "--rdzv-backend=c10d",
                 "--rdzv-endpoint=gpu-a01:29500", "--rdzv-id=4242", "-m scalerl train --chunk 0"):
        assert part in joined
    with pytest.raises(ValueError, match="cannot be split evenly over 3 node"):
        srun_torchrun_command(16, [], nodes=3, head="h", job_id="1")
    # one node (or no SLURM): the standalone torchrun relaunch
    local = launch_command(2, ["train"], environ={"SLURM_JOB_NUM_NODES": "1"})
    assert "--standalone" in local and "--nproc-per-node=2" in local

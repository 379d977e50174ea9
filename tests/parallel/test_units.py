"""scalerl.parallel without a process group: the World at one rank, the group split by hand,
the launch commands, and the device rule of the collectives (an NCCL-only group rejects a
tensor that is not on the world's device)."""

import ast
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from scalerl.parallel import world as world_module
from scalerl.parallel.world import SINGLE, World, init_world, launched_rank, torchrun_command
from scalerl.rl.batch import assign_groups, score_batch, split_shares
from scalerl.rl.losses import LossNormalizer

PACKAGE = Path(__file__).resolve().parents[2] / "scalerl"
COLLECTIVES = {"all_reduce", "broadcast", "broadcast_object_list", "all_gather",
               "all_gather_object", "all_gather_into_tensor", "reduce_scatter",
               "reduce_scatter_tensor", "gather", "gather_object", "scatter",
               "scatter_object_list", "reduce", "barrier", "all_to_all", "send", "recv"}


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


def test_shares_carry_the_whole_batchs_denominators():
    sys.path.insert(0, str(Path(__file__).parent))
    from step_worker import recipe, step_batch

    comps, correct = step_batch()
    scored = score_batch(comps, correct, recipe(), 0)
    one, = split_shares(scored, 1)
    two = split_shares(scored, 2)
    assert sorted(len(s.completions) for s in two) != [0, len(one.completions)]  # both train
    assert sum(len(s.completions) for s in two) == len(one.completions) == len(scored.kept)
    full = one.pad(0)
    ref = LossNormalizer.from_batch(full.loss_mask, full.group_ids)
    for share in (one, *two):
        assert share.normalizer.group_ids.tolist() == ref.group_ids.tolist()
        torch.testing.assert_close(share.normalizer.group_tokens, ref.group_tokens)
        assert share.normalizer.n_sequences == ref.n_sequences
    by_sample = {(c.request.tag, c.request.sample_idx): a
                 for s in two for c, a in zip(s.completions, s.advantages)}
    for c, a in zip(one.completions, one.advantages):
        assert by_sample[(c.request.tag, c.request.sample_idx)] == a


def test_world_of_one_rank_is_the_identity(monkeypatch):
    for var in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    world = init_world("cpu")  # not under torchrun: one rank, no process group
    assert (world.rank, world.size, world.distributed, world.is_main) == (0, 1, False, True)
    t = torch.tensor([1.0, 2.0])
    assert world.all_reduce(t) is t and world.all_reduce(t, "max") is t
    assert world.broadcast_object({"a": 1}) == {"a": 1}
    assert world.scatter_object(["mine"]) == "mine"
    assert world.gather_object(3) == [3]
    assert world.any(True) and not SINGLE.any(False)
    assert launched_rank({"RANK": "0", "WORLD_SIZE": "2"})
    assert not launched_rank({"WORLD_SIZE": "2"})
    cmd = torchrun_command(2, ["train", "--config", "run.yaml"])
    assert cmd == [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node=2", "-m", "scalerl", "train", "--config", "run.yaml"]


def test_multi_node_slurm_launch_is_srun_torchrun_with_c10d():
    from scalerl.parallel.world import launch_command, srun_torchrun_command

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


# -- collectives on the world's device ---------------------------------------------------------
def _collective_calls(path: Path) -> list[str]:
    """`dist.X(...)` / `torch.distributed.X(...)` calls of collectives in one file."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in COLLECTIVES:
            base = ast.unparse(node.func.value)
            if base in ("dist", "torch.distributed"):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {base}."
                             f"{node.func.attr}")
    return found


def test_only_the_world_calls_torch_distributed_collectives():
    """Every collective of the package goes through `World`, which moves tensors to the world's
    device first, so no code path can hand an NCCL group a CPU tensor (FSDP2 and DCP run
    their own collectives on the tensors they own)."""
    calls = [c for path in sorted(PACKAGE.rglob("*.py")) for c in _collective_calls(path)]
    outside = [c for c in calls if not c.startswith("scalerl/parallel/world.py")]
    assert calls and not outside, outside


class _NcclOnly:
    """The collectives of an NCCL-only process group on CUDA: a tensor elsewhere is refused
    with NCCL's own message; a tensor on the device is "reduced" (left as it is)."""

    def __init__(self, device: torch.device):
        self.device, self.seen = device, []

    def all_reduce(self, tensor, op=None, group=None, async_op=False):
        self.seen.append(tensor.device)
        if tensor.device.type != self.device.type:
            raise RuntimeError("No backend type associated with device type "
                               f"{tensor.device.type}")


def test_world_collectives_hand_the_group_tensors_on_its_device(monkeypatch):
    """With a world whose device is not the CPU (meta stands in for cuda:0 here: it has a device
    type other than cpu but no data), the tensors the trainer's reductions pass (CPU metric
    sums, flags) reach the group on the world's device; the same call straight to the group
    fails as NCCL does. The 2-rank runs of tests/parallel check that values come back."""
    fake = _NcclOnly(torch.device("meta"))
    monkeypatch.setattr(world_module.dist, "all_reduce", fake.all_reduce)
    world = World(rank=0, size=2, local_size=2, device=torch.device("meta"))
    stats = torch.zeros(7, dtype=torch.float64)  # the step's metric sums, built on the CPU
    # the metric sums and the non-finite flag of every micro-batch; a meta tensor holds no data
    # to bring back, hence the NotImplementedError after the collective
    for call in (lambda: world.all_reduce(stats), lambda: world.any(True)):
        with pytest.raises(NotImplementedError, match="meta"):
            call()
    assert fake.seen == [torch.device("meta")] * 2
    with pytest.raises(RuntimeError, match="No backend type associated with device type cpu"):
        dist.all_reduce(stats)  # what the data-parallel trainer used to do on CUDA

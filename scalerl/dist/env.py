"""Process-group setup of the trainer ranks: torchrun environment → process group + mesh.

`init_distributed()` reads the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK; MASTER_ADDR /
MASTER_PORT are read by `init_process_group` itself), picks the backend (nccl when CUDA is
available, each rank on cuda:LOCAL_RANK; gloo on CPU), initialises the default process group
and a 1-D `DeviceMesh` over all ranks, and returns a `DistEnv`. A process not started by
torchrun/srun (no WORLD_SIZE) gets a single-rank `DistEnv` without a process group, so the
same code runs unsharded.

`launched_rank()` says whether this process already is a rank of an outside launcher
(RANK and WORLD_SIZE set); `torchrun_command(n, argv)` is the command `scalerl train` re-executes
itself with when `trainer_ranks > 1` and it is not (`scalerl.rl.cli`).

Deliberately left out: multi-node rendezvous (use an outside torchrun/srun; `--standalone` is
single-node) and process groups other than the one data-parallel dimension.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["DistEnv", "init_distributed", "launched_rank", "shutdown", "torchrun_command"]


@dataclasses.dataclass(frozen=True)
class DistEnv:
    """Where this process sits among the trainer ranks."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    mesh: Any = None  # torch.distributed.device_mesh.DeviceMesh, None for a single rank

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.mesh is not None


def launched_rank(environ: dict[str, str] | None = None) -> bool:
    """True when RANK and WORLD_SIZE are set: a rank of torchrun, srun or similar."""
    env = os.environ if environ is None else environ
    return "RANK" in env and "WORLD_SIZE" in env


def init_distributed(device: str = "auto") -> DistEnv:
    """Process group + 1-D device mesh from the torchrun environment (module docstring).

    `device`: auto (CUDA when available), cpu or cuda. Idempotent: a second call returns the
    environment of the existing process group."""
    from torch.distributed.device_mesh import init_device_mesh

    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda was asked for but torch sees no CUDA device; use auto")
    if not launched_rank():
        dev = torch.device("cuda:0" if use_cuda else "cpu")
        return DistEnv(rank=0, world_size=1, local_rank=0, device=dev)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} "
                               "CUDA device(s): start at most one trainer rank per device")
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if use_cuda else "gloo", rank=rank,
                                world_size=world,
                                device_id=dev if use_cuda else None)
    mesh = init_device_mesh(dev.type, (world,), mesh_dim_names=("dp",))
    return DistEnv(rank=rank, world_size=world, local_rank=local_rank, device=dev, mesh=mesh)


def shutdown() -> None:
    """Destroy the default process group if one exists."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def torchrun_command(n_ranks: int, argv: Sequence[str]) -> list[str]:
    """`python -m torch.distributed.run --standalone --nproc-per-node N -m scalerl ARGV...`."""
    if n_ranks < 1:
        raise ValueError(f"n_ranks must be >= 1, got {n_ranks}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={n_ranks}", "-m", "scalerl", *argv]


def slurm_nodes(environ: dict[str, str] | None = None) -> int:
    """Nodes of the SLURM allocation this process runs in (0 outside SLURM)."""
    env = os.environ if environ is None else environ
    return int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or 0)


def head_node(environ: dict[str, str] | None = None) -> str:
    """The first host of the allocation (`scontrol show hostnames $SLURM_JOB_NODELIST`)."""
    import subprocess

    env = os.environ if environ is None else environ
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise RuntimeError("SLURM_JOB_NODELIST is not set: not inside a SLURM allocation")
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                         text=True, check=True)
    return out.stdout.split()[0]


def srun_torchrun_command(n_ranks: int, argv: Sequence[str], *, nodes: int, head: str,
                          job_id: str, port: int = 29500) -> list[str]:
    """Multi-node launch inside a SLURM allocation: one `torchrun` per node started by srun,
    meeting at the head node through the c10d rendezvous; `n_ranks` split evenly over nodes.

    `srun --nodes N --ntasks-per-node 1 python -m torch.distributed.run --nnodes N
    --nproc-per-node n_ranks/N --rdzv-backend c10d --rdzv-endpoint HEAD:PORT --rdzv-id JOB
    -m scalerl ARGV...`"""
    if nodes < 1 or n_ranks % nodes:
        raise ValueError(f"trainer_ranks = {n_ranks} cannot be split evenly over {nodes} "
                         "node(s); make trainer_ranks a multiple of the job's nodes")
    return ["srun", f"--nodes={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            sys.executable, "-m", "torch.distributed.run", f"--nnodes={nodes}",
            f"--nproc-per-node={n_ranks // nodes}", "--rdzv-backend=c10d",
            f"--rdzv-endpoint={head}:{port}", f"--rdzv-id={job_id}", "-m", "scalerl", *argv]


def launch_command(n_ranks: int, argv: Sequence[str],
                   environ: dict[str, str] | None = None) -> list[str]:
    """How `scalerl train` starts its trainer ranks: srun + torchrun (c10d) across the nodes
    of a multi-node SLURM job, else `torchrun --standalone` on this machine."""
    env = os.environ if environ is None else environ
    nodes = slurm_nodes(env)
    if nodes > 1:
        return srun_torchrun_command(n_ranks, argv, nodes=nodes, head=head_node(env),
                                     job_id=env.get("SLURM_JOB_ID", "scalerl"))
    return torchrun_command(n_ranks, argv)

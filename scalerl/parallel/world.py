"""The trainer ranks as one object: `World`, the identity at one rank; process-group setup.

One training loop serves every world size (`scalerl.rl.trainer`, docs/design.md, "Scale-out").
What it needs of the other ranks goes through a `World`:

- where this process sits: `rank`, `size`, `local_rank` / `local_size` (ranks on this node;
  `node`, `nodes`, `is_node_leader`: torchrun numbers ranks node by node, the same count on
  each), `device` (cuda:LOCAL_RANK on CUDA, else cpu) and the 1-D `mesh` FSDP2 shards over;
- collectives: `all_reduce` (sum or max), `any` (a flag raised on any rank), and the object
  collectives `broadcast_object`, `scatter_object`, `gather_object`, `barrier`.

At one rank (`SINGLE`, or a process not started by torchrun/srun) every collective is the
identity and nothing touches `torch.distributed`. At several ranks every tensor handed to a
collective is first moved to the world's device: an NCCL-only process group cannot reduce CPU
tensors ("No backend type associated with device type cpu"), so the batch statistics the
trainer builds on the CPU travel on the GPU and come back. On CUDA the process group is
`cpu:gloo,cuda:nccl`: tensors on NCCL, the pickled objects of the object collectives on gloo
(`_get_object_coll_device` picks cpu when the group has a cpu backend). No other module of the
package calls a `torch.distributed` collective itself (tests/parallel checks the source), so a
tensor on the wrong device cannot reach one.

`init_world(device)` reads the torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE; MASTER_ADDR / MASTER_PORT are read by `init_process_group`), initialises the
default process group and the mesh once, and returns the World. `launched_rank()` says whether
this process already is a rank of an outside launcher; `launch_command(n, argv)` is the command
`scalerl train` re-executes itself with when `trainer_ranks > 1` and it is not: torchrun on this
machine, or srun + torchrun (c10d rendezvous) across the nodes of a multi-node SLURM job.

Deliberately left out: process groups other than the one data-parallel dimension, and
collectives on subgroups.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

__all__ = ["SINGLE", "World", "init_world", "launch_command", "launched_rank", "shutdown",
           "torchrun_command"]


@dataclasses.dataclass(frozen=True)
class World:
    """Where this process sits among the trainer ranks, and their collectives (see above)."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    device: torch.device = torch.device("cpu")
    mesh: Any = None  # torch.distributed.device_mesh.DeviceMesh; None at one rank

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def nodes(self) -> int:
        """Nodes of the world (torchrun starts `local_size` ranks on each)."""
        return max(1, self.size // self.local_size)

    @property
    def node(self) -> int:
        """This rank's node (ranks are numbered node by node)."""
        return self.rank // self.local_size

    @property
    def is_node_leader(self) -> bool:
        """The first rank of its node (it runs the node's generator processes)."""
        return self.local_rank == 0

    def node_leaders(self) -> list[int]:
        """The rank of each node's leader, in node order."""
        return [n * self.local_size for n in range(self.nodes)]

    # -- tensor collectives: the tensor goes to the world's device and comes back -----------
    def all_reduce(self, t: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """A copy of `t` reduced over the ranks (op sum or max), on `t`'s device; `t` itself at
        one rank."""
        if not self.distributed:
            return t
        if op not in ("sum", "max"):
            raise ValueError(f"op must be sum or max, got {op!r}")
        out = t.detach().to(self.device, copy=True)
        dist.all_reduce(out, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return out.to(t.device)

    def any(self, flag: bool) -> bool:
        """True on every rank when `flag` is True on any rank."""
        return bool(self.all_reduce(torch.tensor([float(flag)]), "max").item() > 0)

    # -- object collectives (pickled; on gloo) ------------------------------------------------
    def broadcast_object(self, obj: Any, src: int = 0) -> Any:
        """Rank `src`'s `obj` on every rank."""
        if not self.distributed:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=src)
        return box[0]

    def scatter_object(self, objs: Sequence[Any] | None) -> Any:
        """Rank 0 gives `objs` (one per rank); each rank returns its own."""
        if not self.distributed:
            return objs[0]
        out: list[Any] = [None]
        dist.scatter_object_list(out, list(objs) if self.is_main else None, src=0)
        return out[0]

    def gather_object(self, obj: Any) -> list[Any] | None:
        """Every rank's `obj`, in rank order, on rank 0 (None elsewhere)."""
        if not self.distributed:
            return [obj]
        out = [None] * self.size if self.is_main else None
        dist.gather_object(obj, out, dst=0)
        return out

    def barrier(self) -> None:
        if self.distributed:
            dist.barrier()


SINGLE = World()


def launched_rank(environ: dict[str, str] | None = None) -> bool:
    """True when RANK and WORLD_SIZE are set: a rank of torchrun, srun or similar."""
    env = os.environ if environ is None else environ
    return "RANK" in env and "WORLD_SIZE" in env


def init_world(device: str = "auto") -> World:
    """The World of this process (module docstring); idempotent.

    `device`: auto (CUDA when available), cpu or cuda."""
    from torch.distributed.device_mesh import init_device_mesh

    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda was asked for but torch sees no CUDA device; use auto")
    world = int(os.environ.get("WORLD_SIZE", "1")) if launched_rank() else 1
    if world <= 1:
        return World(device=torch.device("cuda:0" if use_cuda else "cpu"))
    rank = int(os.environ["RANK"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    if use_cuda:
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} "
                               "CUDA device(s) visible: start at most one trainer rank per "
                               "device")
        torch.cuda.set_device(local_rank)
        dev = torch.device("cuda", local_rank)
    else:
        dev = torch.device("cpu")
    if not dist.is_initialized():
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if use_cuda else "gloo",
                                rank=rank, world_size=world, device_id=dev if use_cuda else None)
    mesh = init_device_mesh(dev.type, (world,), mesh_dim_names=("dp",))
    return World(rank=rank, size=world, local_rank=local_rank, local_size=local_size,
                 device=dev, mesh=mesh)


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

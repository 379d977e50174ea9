"""Checkpoints of a sharded trainer: DCP shards + the full HF model directory on rank 0.

Layout (the trainer checkpoint of `scalerl.rl.checkpoint`, plus one folder):

    config.json, model.safetensors, tokenizer   the full policy, gathered on rank 0
                                                (eval, vLLM and generators read it as before)
    dcp/                                        `torch.distributed.checkpoint` of the sharded
                                                model and AdamW state: one file per rank
    trainer_state.pt / .json, ...               written by the caller on rank 0 (`write_main`):
                                                the rest of the trainer state, no "optimizer"

`write_sharded_checkpoint(path, policy, optimizer, tokenizer, world, write_main)` is a
collective. Atomicity as in `scalerl.rl.checkpoint`: every rank writes into one temporary
sibling directory (`.NAME.tmp-ranks`; a rerun removes one a killed save left,
`scalerl.utils.io.remove_stale_temps`), and after a barrier rank 0 swaps it into place, so a
crash (SIGKILL of any rank) leaves the previous directory or the new one. The failpoint
`checkpoint_write` (`scalerl.utils.failpoints`) sits where the one-rank writer has it.

`gathered_state_dict(policy, keep)`: the HF model's full state dict in CPU memory on the ranks
that keep it (the main rank for checkpoints and the in-process engines), gathered one tensor
at a time by `iter_full_tensors` (the generators' weights stream from it too,
`scalerl.rl.weights`), so no full copy of the model ever sits on a GPU. A collective.

`load_sharded_state(path, policy, optimizer)` restores model and optimizer shards in place.
Same world size: exact. A different world size works too: DCP reshards the saved DTensors onto
the current mesh (tests/parallel). A checkpoint without dcp/ (written at one rank) raises a
clear error: load its model directory and start the optimizer over, or resume with the world
size that wrote it.

Deliberately left out: asynchronous saves and keeping several sharded checkpoints.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_state_dict,
    set_state_dict,
)

from scalerl.parallel.world import World
from scalerl.utils.failpoints import failpoint
from scalerl.utils.io import swap_dir_in

__all__ = ["DCP_DIR", "gathered_state_dict", "has_shards", "iter_full_tensors",
           "load_sharded_state", "write_sharded_checkpoint"]

DCP_DIR = "dcp"
_PREFIX = "model."  # ScoringPolicy wraps the HF model as `.model`


def has_shards(path: str | Path) -> bool:
    """True for a checkpoint written by several ranks (it has dcp/)."""
    return (Path(path) / DCP_DIR).is_dir()


def iter_full_tensors(tensors: Iterable[tuple[str, torch.Tensor]]
                      ) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, full tensor on the rank's device) one at a time: a DTensor shard is all-gathered (a collective: every rank iterates the same names in the same
    order), a plain tensor passes as it is. Drop each before taking the next."""
    for name, tensor in tensors:
        with torch.no_grad():
            full = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
        yield name, full.detach()


def gathered_state_dict(policy, keep: bool) -> dict[str, torch.Tensor]:
    """The HF model's full state dict in CPU memory on the ranks that `keep` it, {} on the
    others. Gathered one tensor at a time (`iter_full_tensors`, copied to the CPU and freed),
    so no rank ever holds a full copy of the model on its device. A collective: every rank
    calls it, in the same order."""
    out = {}
    for name, full in iter_full_tensors(policy.state_dict().items()):
        if keep:
            out[name.removeprefix(_PREFIX)] = full.to("cpu", copy=True)
        del full
    return out


def write_sharded_checkpoint(path: str | Path, *, policy, optimizer, tokenizer, world: World,
                             write_main: Callable[[Path], None]) -> Path:
    """Write the checkpoint directory `path` from every rank (module docstring); rank 0 calls
    `write_main(tmp)` for the trainer state and the other files before the swap."""
    from scalerl.models.loading import save_model_dir

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-ranks")
    if world.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    world.barrier()
    model_sd, optim_sd = get_state_dict(policy, optimizer)
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / DCP_DIR))
    full = gathered_state_dict(policy, keep=world.is_main)
    if world.is_main:
        # the sharded module keeps its config and parameter names; the weights written are
        # the gathered full tensors
        save_model_dir(_Gathered(policy.model, full), tokenizer, tmp)
        failpoint("checkpoint_write", path.name)  # a harness may freeze the write here
        write_main(tmp)
        swap_dir_in(tmp, path)
    world.barrier()
    return path


class _Gathered:
    """`save_pretrained` of the (sharded) HF model with the gathered full state dict."""

    def __init__(self, model, state_dict: dict[str, torch.Tensor]):
        self.model, self.state_dict = model, state_dict

    def save_pretrained(self, path: str, **kwargs) -> None:
        first: dict[int, str] = {}
        tied = set()  # later names of a shared parameter (the tied LM head): not written
        for name, p in self.model.named_parameters(remove_duplicate=False):
            if first.setdefault(id(p), name) != name:
                tied.add(name)
        kept = {k: v for k, v in self.state_dict.items() if k not in tied}
        self.model.save_pretrained(path, state_dict=kept, **kwargs)


def load_sharded_state(path: str | Path, policy, optimizer) -> None:
    """Restore the sharded model and AdamW state of `path` into `policy` and `optimizer`."""
    path = Path(path)
    if not has_shards(path):
        raise FileNotFoundError(
            f"{path} has no {DCP_DIR}/ (sharded trainer state): it was written at one trainer "
            "rank (trainer_ranks 1); resume it with trainer_ranks 1, or start a new chunk "
            "from it")
    model_sd, optim_sd = get_state_dict(policy, optimizer)
    target = {"model": model_sd, "optim": optim_sd}
    dcp.load(target, checkpoint_id=str(path / DCP_DIR))
    set_state_dict(policy, optimizer, model_state_dict=target["model"],
                   optim_state_dict=target["optim"])

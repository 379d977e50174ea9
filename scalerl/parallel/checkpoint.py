"""Trainer checkpoints at every world size: DCP shards of the model and AdamW state + the full
HF model directory, and the full weights gathered for the generators.

Layout (the trainer checkpoint of `scalerl.rl.checkpoint`; one format at every world size):

    config.json, model.safetensors, tokenizer   the full policy (on the main rank; gathered
                                                from the shards at several ranks): what eval,
                                                vLLM and the generators read
    dcp/                                        `torch.distributed.checkpoint` of the model
                                                and AdamW state, one file per rank that wrote
                                                it (`__0_0.distcp` at one rank)
    trainer_state.pt / .json, ...               written by the caller on the main rank
                                                (`write_main`): the rest of the trainer state

Why one format (torchtitan's choice, one DCP checkpoint whatever the parallelism): DCP saves
each tensor with its place in the full tensor, so a checkpoint written at any world size loads
at any other (1 -> 2 ranks: each rank reads its rows of the saved full tensors; 2 -> 1: one
process reads every shard; tests/parallel), and the same resume code runs at every size. A
second format for one rank (the optimizer's state dict inside trainer_state.pt, as before)
would need its own reader, could not continue at N ranks without converting, and would make
"resumable" depend on the world size that wrote it. The cost: the model's weights are on
disk twice (dcp/ for resuming exactly, model.safetensors for everything else), +1 x N x
param bytes per checkpoint beside the 3 x N of weights and AdamW state.

`write_checkpoint(path, policy, optimizer, tokenizer, world, write_main)` is a collective.
Atomicity: the main rank creates one temporary sibling directory (`scalerl.utils.io.
atomic_path`, `.NAME.tmp-*`; a rerun removes one a killed save left, `remove_stale_temps`)
and tells the others its name; every rank writes its shard into it, the main rank adds the
model dir and its files and swaps it into place, so a crash (SIGKILL of any rank) leaves the
previous directory or the new one; a write that fails on the main rank removes it (a full
disk is named as such). The failpoint `checkpoint_write` (`scalerl.utils.failpoints`) sits
between the weights and the trainer state.

`gathered_state_dict(policy, keep)`: the HF model's full state dict in CPU memory on the ranks
that keep it (the main rank for the in-process engines at several ranks), gathered one tensor
at a time by `iter_full_tensors` (the generators' weights stream from it too,
`scalerl.rl.weights`), so no full copy of the model ever sits on a GPU. A collective.

`load_checkpoint_state(path, policy, optimizer)` restores the model and AdamW state in place,
resharded onto this world. A trainer checkpoint without dcp/ (a one-rank checkpoint of a
scalerl before this format) raises a clear error.

Deliberately left out: asynchronous saves and keeping several checkpoints.
"""

from __future__ import annotations

import contextlib
import warnings
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
from scalerl.utils.io import atomic_path

__all__ = ["DCP_DIR", "gathered_state_dict", "has_shards", "iter_full_tensors",
           "load_checkpoint_state", "write_checkpoint"]

DCP_DIR = "dcp"
_PREFIX = "model."  # ScoringPolicy wraps the HF model as `.model`


@contextlib.contextmanager
def _one_process_is_meant() -> Iterator[None]:
    """DCP warns at every save and load without a process group that it assumes one process:
    at one trainer rank that is the intent, not news."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is (disabled|unavailable)",
                                category=UserWarning)
        yield


def has_shards(path: str | Path) -> bool:
    """True for a directory with the model and AdamW state in dcp/ (every trainer checkpoint
    of this format)."""
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


def write_checkpoint(path: str | Path, *, policy, optimizer, tokenizer, world: World,
                     write_main: Callable[[Path], None]) -> Path:
    """Write the checkpoint directory `path` from every rank (module docstring); the main rank
    calls `write_main(tmp)` for the trainer state and the other files before the swap."""
    from scalerl.models.loading import save_model_dir

    path = Path(path)
    main = atomic_path(path, directory=True) if world.is_main else contextlib.nullcontext()
    with main as tmp:
        tmp = Path(world.broadcast_object(str(tmp) if world.is_main else None))
        model_sd, optim_sd = get_state_dict(policy, optimizer)
        with _one_process_is_meant():
            dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(tmp / DCP_DIR))
        del model_sd, optim_sd
        model = policy.model
        if world.distributed:  # the sharded module keeps its config and parameter names; the
            # weights written are the gathered full tensors
            model = _Gathered(model, gathered_state_dict(policy, keep=world.is_main))
        if world.is_main:
            save_model_dir(model, tokenizer, tmp)
            failpoint("checkpoint_write", path.name)  # a harness may freeze the write here
            write_main(tmp)
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


def load_checkpoint_state(path: str | Path, policy, optimizer) -> None:
    """Restore the model and AdamW state of checkpoint `path` into `policy` and `optimizer`
    (resharded onto this world; a collective at several ranks)."""
    path = Path(path)
    if not has_shards(path):
        raise FileNotFoundError(
            f"{path} has no {DCP_DIR}/ (the model and AdamW state of a trainer checkpoint): "
            "it was written by a scalerl that kept a one-rank optimizer state in "
            "trainer_state.pt; continue it with that scalerl, or start the chunk over from "
            "the previous chunk's checkpoint")
    model_sd, optim_sd = get_state_dict(policy, optimizer)
    target = {"model": model_sd, "optim": optim_sd}
    with _one_process_is_meant():
        dcp.load(target, checkpoint_id=str(path / DCP_DIR))
    set_state_dict(policy, optimizer, model_state_dict=target["model"],
                   optim_state_dict=target["optim"])

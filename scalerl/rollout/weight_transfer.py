"""Weights from the trainer to the generators: what one push sends (`WeightLayout`), the host
shared-memory ring that carries it within a node (`HostSlots`), and which transport a
placement gets (`choose_transport`).

What one push sends: every parameter once, in the generators' dtype. The trainer's float32
master weights are cast while they are written (one pass over them), and a tied tensor
(Qwen3-0.6B and 1.7B tie the input embedding and the LM head) is sent once, under its first
name; later names of the same tensor are `WeightLayout.aliases`, never sent. The generator
re-ties by construction, because its model shares that tensor too: the HF engine copies into
the shared parameter, and vLLM's `load_weights` skips `lm_head.*` of a tied model whose head
*is* the embedding module. After a push its embedding and its head are both the pushed tensor
(tests/rollout/test_weight_transfer.py, tests/rollout/test_vllm_weight_transfer.py).
Bytes per push = sum over the unique parameters of numel x dtype size (`WeightLayout.payload`):
Qwen3-1.7B in bfloat16 3.44 GB, Qwen3-0.6B 1.19 GB, where float32 masters plus a second copy
of the tied head were 8.13 GB and 3.01 GB. `buckets()` cuts the entries into runs of about
`bucket_bytes` for loaders that load piecewise (vLLM's layerwise reload).

Host slots (`HostSlots`): a ring of `n_slots` buffers, each a file under /dev/shm mapped
shared (`torch.from_file(shared=True)`) by the trainer, by the generator processes and by
vLLM's engine-core process, which maps it by path (`map_slot_files`). The trainer unlinks the
files once every process has mapped them (`unlink`), so nothing is left behind by a crash.
Version v lives in slot v mod n_slots. No lock is held while bytes move: one small lock guards
three counters (each slot's version, each slot's readers, the newest version) for a few
microseconds at a time. A reader (`reading`) registers on the slot of the version it wants
and loads without a lock; the writer (`write`) waits until nobody reads the slot it is about
to overwrite (a generator still loading a version n_slots pushes old), marks it as being
written (no reader enters it), copies and publishes. So K generators load a version at the
same time, and the trainer writes version v + 1 while they still load v.

Transports (`choose_transport`, `VllmSettings.weight_transfer`): `shm`, the host slots: on
CPU, for the HF engine and vLLM's synchronous engine, and for the fixed schedule of
`scalerl.rl.pipeline` (it keeps a ring of past versions); with vLLM's asynchronous engine on
CUDA, `ipc` when the generator shares the device of the rank that pushes (CUDA IPC handles of
packed buffers on that device: no host copy) and `nccl` when the generators have devices of
their own (a broadcast from that rank's device through vLLM's NCCL weight-transfer engine,
`scalerl.rollout.vllm_transfer`).

Deliberately left out: deltas between versions (every push sends the full set) and transfer
between nodes (each node's first rank pushes to its own node's generators).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import torch

from scalerl.config import ConfigError

__all__ = ["DEFAULT_BUCKET_BYTES", "TRANSPORTS", "HostSlots", "MappingStream", "SlotWeights",
           "WeightEntry", "WeightLayout", "WeightStream", "as_stream", "choose_transport",
           "map_slot_files", "unique_named", "weight_layout"]

DEFAULT_BUCKET_BYTES = 256 << 20  # vLLM's packed NCCL/IPC buffers are of this order too
TRANSPORTS = ("auto", "shm", "ipc", "nccl")
_ALIGN = 256  # bytes: every entry starts on a 256-byte boundary of its slot
_WRITING = -2  # a slot's version while the trainer writes it
_POLL_S = 0.001


@dataclasses.dataclass(frozen=True)
class WeightEntry:
    """One tensor of a push: where it sits in a slot and what it is."""

    name: str
    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: tuple[int, ...]
    offset: int  # bytes from the slot's start
    nbytes: int

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


@dataclasses.dataclass(frozen=True)
class WeightLayout:
    """The tensors of one push, in order, and the tied names that are not sent."""

    entries: tuple[WeightEntry, ...]
    aliases: tuple[tuple[str, str], ...] = ()  # (alias, name it shares the tensor with)
    bucket_bytes: int = DEFAULT_BUCKET_BYTES

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    @property
    def payload(self) -> int:
        """Bytes one push sends: the unique tensors in their push dtype."""
        return sum(e.nbytes for e in self.entries)

    @property
    def slot_bytes(self) -> int:
        """Bytes of one host slot (the payload plus alignment padding; at least 1)."""
        last = self.entries[-1] if self.entries else None
        return max(1, last.offset + last.nbytes) if last else 1

    def buckets(self) -> list[tuple[WeightEntry, ...]]:
        """Consecutive runs of entries of at most `bucket_bytes` (a larger tensor alone)."""
        out: list[tuple[WeightEntry, ...]] = []
        run: list[WeightEntry] = []
        size = 0
        for entry in self.entries:
            if run and size + entry.nbytes > self.bucket_bytes:
                out.append(tuple(run))
                run, size = [], 0
            run.append(entry)
            size += entry.nbytes
        if run:
            out.append(tuple(run))
        return out

    def to_dict(self) -> dict[str, Any]:
        """Plain lists and numbers (what vLLM's RPC serializer carries)."""
        return {"entries": [[e.name, e.dtype, list(e.shape), e.offset, e.nbytes]
                            for e in self.entries],
                "aliases": [list(a) for a in self.aliases], "bucket_bytes": self.bucket_bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WeightLayout:
        return cls(tuple(WeightEntry(n, d, tuple(s), o, b) for n, d, s, o, b in data["entries"]),
                   tuple((a, b) for a, b in data["aliases"]), int(data["bucket_bytes"]))


def _identity(tensor: torch.Tensor) -> Any:
    """What makes two named tensors the same tensor: the parameter object for a DTensor (FSDP
    shards), else its memory (a tied state dict entry is another view of the same bytes)."""
    if hasattr(tensor, "full_tensor") or tensor.numel() == 0 or tensor.is_meta:
        return ("object", id(tensor))
    return ("memory", tensor.data_ptr(), tensor.dtype, tuple(tensor.shape), tensor.stride())


def unique_named(named: Iterable[tuple[str, torch.Tensor]]
                 ) -> tuple[list[tuple[str, torch.Tensor]], list[tuple[str, str]]]:
    """(the first name of every distinct tensor with it, (alias, first name) of the others)."""
    first: dict[Any, str] = {}
    unique, aliases = [], []
    for name, tensor in named:
        key = _identity(tensor)
        if key in first:
            aliases.append((name, first[key]))
            continue
        first[key] = name
        unique.append((name, tensor))
    return unique, aliases


def weight_layout(named: Iterable[tuple[str, torch.Tensor]], dtype: str | None = None,
                  bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> WeightLayout:
    """The layout of a push of `named` (tied tensors once) in `dtype` (None: each tensor's own
    dtype; non-floating tensors always keep theirs)."""
    unique, aliases = unique_named(named)
    entries, offset = [], 0
    for name, tensor in unique:
        want = tensor.dtype
        if dtype is not None and tensor.dtype.is_floating_point:
            want = getattr(torch, dtype)
        nbytes = tensor.numel() * want.itemsize
        offset = -(-offset // _ALIGN) * _ALIGN
        entries.append(WeightEntry(name, str(want).removeprefix("torch."), tuple(tensor.shape),
                                   offset, nbytes))
        offset += nbytes
    return WeightLayout(tuple(entries), tuple(aliases), bucket_bytes)


class WeightStream(Protocol):
    """The tensors of one push: `layout`, and iteration yielding (name, tensor) in layout order
    (a collective where the tensors are gathered from shards), in the layout's dtypes on a
    device; CPU tensors may keep theirs (the copy into a host slot casts them, faster than a
    cast to a new tensor)."""

    layout: WeightLayout

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]: ...


class MappingStream:
    """A state dict as a `WeightStream`: its unique tensors, cast to `dtype` (on a device;
    CPU tensors as they are, `WeightStream`)."""

    def __init__(self, weights: Mapping[str, torch.Tensor], dtype: str | None = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> None:
        self.weights = weights
        self.layout = weight_layout(weights.items(), dtype, bucket_bytes)

    def __iter__(self) -> Iterator[tuple[str, torch.Tensor]]:
        for e in self.layout.entries:
            tensor = self.weights[e.name].detach()
            yield e.name, tensor if tensor.device.type == "cpu" else tensor.to(e.torch_dtype)


def as_stream(weights: Mapping[str, torch.Tensor] | WeightStream,
              dtype: str | None = None) -> WeightStream:
    """`weights` as a stream: a stream as it is, a mapping through `MappingStream`."""
    if isinstance(weights, Mapping):
        return MappingStream(weights, dtype)
    return weights


# -- host slots ------------------------------------------------------------------------------
def _shm_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def _map(path: str, nbytes: int) -> torch.Tensor:
    return torch.from_file(path, shared=True, size=nbytes, dtype=torch.uint8)  # [nbytes]


def _views(buffer: torch.Tensor, layout: WeightLayout) -> dict[str, torch.Tensor]:
    """{name: tensor} views into one mapped slot (no copy)."""
    return {e.name: buffer[e.offset:e.offset + e.nbytes].view(e.torch_dtype).view(e.shape)
            for e in layout.entries}


def map_slot_files(info: Mapping[str, Any]) -> list[dict[str, torch.Tensor]]:
    """The views of every slot of `HostSlots.attach_info()`, mapped in this process (vLLM's
    engine core: `scalerl.rollout.vllm_worker`)."""
    layout = WeightLayout.from_dict(info["layout"])
    return [_views(_map(path, layout.slot_bytes), layout) for path in info["paths"]]


class SlotWeights(Mapping):
    """The tensors of one version in one host slot, valid while its reader holds it; a
    `Mapping` name -> tensor for `Engine.update_weights` (views: no copy)."""

    def __init__(self, slots: HostSlots, slot: int, version: int) -> None:
        self.slots, self.slot, self.version = slots, slot, version
        self._views = slots.views(slot)

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._views[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._views)

    def __len__(self) -> int:
        return len(self._views)

    @property
    def nbytes(self) -> int:
        return self.slots.layout.payload


class HostSlots:
    """A ring of shared-memory weight slots on one node (module docstring). Created by the
    trainer (`create`), handed to generator processes as a start argument (they map the files
    when unpickled, before `unlink`)."""

    def __init__(self, layout: WeightLayout, paths: list[str], shared: tuple) -> None:
        self.layout, self.paths = layout, paths
        self._versions, self._readers, self._newest, self._lock = shared
        self._buffers = [_map(p, layout.slot_bytes) for p in paths]
        self._views: dict[int, dict[str, torch.Tensor]] = {}

    @classmethod
    def create(cls, layout: WeightLayout, n_slots: int, ctx: Any) -> HostSlots:
        """New slot files (sized, zero) and the shared counters of `ctx` (a multiprocessing
        context)."""
        if n_slots < 1:
            raise ValueError(f"n_slots must be >= 1, got {n_slots}")
        stem = _shm_dir() / f"scalerl-weights-{os.getpid()}-{secrets.token_hex(4)}"
        paths = []
        for i in range(n_slots):
            path = f"{stem}-{i}"
            with open(path, "wb") as f:
                f.truncate(layout.slot_bytes)
            paths.append(path)
        shared = (ctx.Array("q", [-1] * n_slots, lock=False),
                  ctx.Array("i", [0] * n_slots, lock=False),
                  ctx.Value("q", -1, lock=False), ctx.Lock())
        return cls(layout, paths, shared)

    def __getstate__(self) -> dict[str, Any]:
        return {"layout": self.layout, "paths": self.paths,
                "shared": (self._versions, self._readers, self._newest, self._lock)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["layout"], state["paths"], state["shared"])

    @property
    def n_slots(self) -> int:
        return len(self.paths)

    @property
    def newest(self) -> int:
        """The newest version written (-1: none yet)."""
        with self._lock:
            return int(self._newest.value)

    def slot_version(self, slot: int) -> int:
        with self._lock:
            return int(self._versions[slot])

    def views(self, slot: int) -> dict[str, torch.Tensor]:
        if slot not in self._views:
            self._views[slot] = _views(self._buffers[slot], self.layout)
        return self._views[slot]

    def attach_info(self) -> dict[str, Any]:
        """What another process on the node needs to map the slots (`map_slot_files`)."""
        return {"paths": list(self.paths), "layout": self.layout.to_dict()}

    def write(self, version: int, tensors: Iterable[tuple[str, torch.Tensor]],
              wait: Callable[[], None] | None = None) -> int:
        """Write `version` into slot version mod n_slots and publish it; the bytes written.
        Blocks while a reader is still on that slot, calling `wait()` between polls (a
        liveness check that may raise). Names must be the layout's (aliases are skipped)."""
        slot = version % self.n_slots
        while True:
            with self._lock:
                if self._readers[slot] == 0:
                    self._versions[slot] = _WRITING
                    break
            if wait is not None:
                wait()
            time.sleep(_POLL_S)
        views, aliases = self.views(slot), dict(self.layout.aliases)
        written, nbytes = set(), 0
        with torch.no_grad():
            for name, tensor in tensors:
                if name in aliases:
                    continue
                if name not in views:
                    raise ValueError(f"weights push: {name!r} is not a tensor of this "
                                     f"pipeline's layout ({len(views)} tensors)")
                views[name].copy_(tensor.detach())
                written.add(name)
                nbytes += views[name].nbytes
        missing = [n for n in views if n not in written]
        if missing:
            raise ValueError(f"weights push of version {version} lacks {missing[:5]}")
        with self._lock:
            self._versions[slot] = version
            self._newest.value = max(int(self._newest.value), version)
        return nbytes

    @contextlib.contextmanager
    def reading(self, version: int | None = None) -> Iterator[SlotWeights | None]:
        """Hold the slot of `version` (None: the newest) while the block loads it; None when
        nothing was written yet. A slot that does not hold `version` is an error (the ring's
        invariant, `scalerl.rl.pipeline`, was broken)."""
        with self._lock:
            want = int(self._newest.value) if version is None else version
            if want < 0:
                slot = None
            else:
                slot = want % self.n_slots
                held = int(self._versions[slot])
                if held != want:
                    raise RuntimeError(f"weights slot {slot} holds version {held}, not the "
                                       f"version {want} this generator needs")
                self._readers[slot] += 1
        if slot is None:
            yield None
            return
        try:
            yield SlotWeights(self, slot, want)
        finally:
            with self._lock:
                self._readers[slot] -= 1

    def unlink(self) -> None:
        """Remove the files (mapped processes keep their mappings)."""
        for path in self.paths:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


# -- transports ------------------------------------------------------------------------------
def choose_transport(setting: str, *, engine: str, async_engine: bool, cuda: bool,
                     fixed_lag: int | None, colocated: bool) -> str:
    """The concrete transport (shm, ipc or nccl) for `setting` (auto or one of them) and a
    placement (module docstring); ConfigError naming the reason for one that cannot work."""
    if setting not in TRANSPORTS:
        raise ConfigError(f"weight_transfer {setting!r}: choose one of {', '.join(TRANSPORTS)}")
    gpu_ok = cuda and engine == "vllm" and async_engine and fixed_lag is None
    if setting == "auto":
        return ("ipc" if colocated else "nccl") if gpu_ok else "shm"
    if setting == "shm" or (gpu_ok and colocated == (setting == "ipc")):
        return setting
    if not cuda:
        why = "it needs CUDA"
    elif engine != "vllm" or not async_engine:
        why = ("it needs vLLM's asynchronous engine (engine: vllm, vllm.inflight_updates: "
               "pause or auto)")
    elif fixed_lag is not None:
        why = "the fixed schedule (pipeline_fixed_lag) keeps past versions in host slots"
    elif setting == "ipc":
        why = "the generators have devices of their own (CUDA IPC shares one device)"
    else:
        why = "the generators share the trainer's device (NCCL refuses two ranks on one GPU)"
    raise ConfigError(f"vllm.weight_transfer: {setting} cannot be used here: {why}; set it to "
                      "auto or shm")

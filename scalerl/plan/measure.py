"""Peak live tensor bytes of a block of torch code, on any device (used to check the planner).

`LiveBytes(exclude)` is a `TorchDispatchMode`: every storage an aten op returns is counted once
(views share their storage) until the storage is freed; storages in `exclude` (weights,
gradient buffers that exist before) are never counted. `.live` is the current total, `.peak`
the largest seen. It sees what autograd saves and what backward allocates, like
`torch.cuda.max_memory_allocated` minus what existed before, without the allocator's caching.

Deliberately left out: memory of non-aten allocations (library workspaces, CUDA context).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

__all__ = ["LiveBytes"]


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of live storages created inside the `with` block."""

    def __init__(self, exclude: Iterable[torch.UntypedStorage] = ()) -> None:
        super().__init__()
        self.live, self.peak = 0, 0
        self._seen = {id(s) for s in exclude}

    def _freed(self, key: int, nbytes: int) -> None:
        self._seen.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_leaves(out):
            if not isinstance(tensor, torch.Tensor):
                continue
            storage = tensor.untyped_storage()
            key = id(storage)  # one Python object per storage (PyObject preservation)
            if key in self._seen or storage.nbytes() == 0:
                continue
            self._seen.add(key)
            self.live += storage.nbytes()
            weakref.finalize(storage, self._freed, key, storage.nbytes())
        self.peak = max(self.peak, self.live)
        return out

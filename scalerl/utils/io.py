"""Atomic output: write to a temporary sibling, then rename, so readers never see half a file.

`atomic_path(path)` yields a temporary path in the same directory; on success it is renamed
over `path` (files) or swapped in (directories); on error it is removed and `path` is left as
it was. Use it for every artifact a later stage reads.

`remove_stale_temps(path)` deletes the temporary siblings a killed writer of `path` left behind
(`.NAME.tmp-*`, `.NAME.old-*`); the single writer of `path` calls it before writing again.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def swap_dir_in(tmp: Path, path: Path) -> None:
    """Put the finished directory `tmp` at `path`: an existing `path` is moved aside first and
    removed only after the rename, so `path` is always either the old or the new directory."""
    old = None
    if path.exists():
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        os.replace(path, old)
    os.replace(tmp, path)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def atomic_path(path: str | Path, *, directory: bool = False) -> Iterator[Path]:
    """Yield a temp path next to `path`; rename it into place when the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{path.name}.tmp-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=path.parent))
    else:
        fd, name = tempfile.mkstemp(prefix=prefix, dir=path.parent, suffix=path.suffix)
        os.close(fd)
        tmp = Path(name)
    try:
        yield tmp
        if directory:
            swap_dir_in(tmp, path)
        else:
            os.replace(tmp, path)
    except BaseException as err:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        if isinstance(err, OSError) and err.errno == errno.ENOSPC:
            raise OSError(errno.ENOSPC, f"disk full while writing {path}: no free space left in "
                          f"{path.parent}; free space there (or point the output elsewhere) "
                          "and re-run") from err
        raise


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the `.NAME.tmp-*` / `.NAME.old-*` siblings of `path` (left by a killed writer:
    `atomic_path`, `swap_dir_in`); returns what was removed. Only the one writer of `path` may
    call it (another writer's temp directory would go too)."""
    path = Path(path)
    removed = []
    for pattern in (f".{path.name}.tmp-*", f".{path.name}.old-*"):
        for stale in path.parent.glob(pattern):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)
            removed.append(stale)
    return removed


def write_text_atomic(path: str | Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_json_atomic(path: str | Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    import numpy as np

    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"cannot serialise {type(obj).__name__}")

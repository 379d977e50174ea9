"""Model sizes (and generation lengths) of runs, for the forecast across scale.

`scalerl.fit.forecast.across.predict_across` needs each run's position on its axis: the model's
parameter count, or the generation length in tokens. They come from:

- `parse_size(text)`: a number with an optional decimal suffix, k = 1e3, M = 1e6, B or G =
  1e9, T = 1e12, any case: `0.6B`, `1.7b`, `600M`, `8k`, `14336`, `1.5e9`;
- `size_in_name(name)`: the whole name parsed as a size, else the one size token in it
  (`Qwen3-0.6B-Base`, `qwen3-1.7b`: a number with a suffix, between non-alphanumerics); None
  when there is none or several (`llama-8b-1m` is ambiguous);
- `model_parameters(path)`: a model directory (or a file in it): the `parameters` that
  scalerl's `base_info.json` records (tiny models), else the sum of the tensor shapes in the
  headers of its `*.safetensors` files (Hugging Face models: each file's first 8 bytes give
  the JSON header's length; no weights are read, tied embeddings are stored once);
- `size_of(value)`: a size text, else a path (`model_parameters`);
- `sizes_from_specs(["NAME=SIZE_OR_DIR", ...])`: the `--size` options of `scalerl across` and
  `scalerl report` as {name: size}; `size_of_run(names, sizes)`: a run's size from them (by
  its name, its part before the first `/` (a `NAME=INPUT` run with sub-runs), or its model),
  else from a name.

Deliberately left out: sizes from a hub id (nothing is downloaded), counting parameters by
loading a model (torch), and PyTorch `.bin` checkpoints (pickles; give the size as a number).
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path

from scalerl.fit.readers.tables import InputError

__all__ = ["parse_size", "size_in_name", "model_parameters", "size_of", "sizes_from_specs",
           "size_of_run", "format_size"]

SUFFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12}
_NUMBER = r"([0-9]+(?:\.[0-9]+)?(?:e[+-]?[0-9]+)?)"
_SIZE = re.compile(_NUMBER + r"\s*([kmbgt]?)", re.IGNORECASE)
_TOKEN = re.compile(r"(?<![0-9a-z.])([0-9]+(?:\.[0-9]+)?)([kmbgt])(?![0-9a-z])", re.IGNORECASE)
_MAX_HEADER = 100_000_000  # bytes: safetensors refuses larger headers too


def parse_size(text: str) -> float | None:
    """The size `text` states (see the module docstring), or None when it is not one."""
    match = _SIZE.fullmatch(str(text).strip())
    if not match:
        return None
    value = float(match.group(1)) * SUFFIXES[match.group(2).lower()]
    return value if value > 0 else None


def size_in_name(name: str) -> float | None:
    """The size a run or model name states, or None (see the module docstring)."""
    whole = parse_size(name)
    if whole is not None:
        return whole
    tokens = {parse_size(a + b) for a, b in _TOKEN.findall(str(name))}
    return tokens.pop() if len(tokens) == 1 else None


def _safetensors_parameters(path: Path) -> int:
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise InputError(f"{path}: not a safetensors file (shorter than its header length)")
        (length,) = struct.unpack("<Q", head)
        if length > _MAX_HEADER:
            raise InputError(f"{path}: not a safetensors file (header length {length})")
        try:
            header = json.loads(f.read(length))
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: not a safetensors file ({err})") from None
    total = 0
    for name, tensor in header.items():
        if name == "__metadata__":
            continue
        count = 1
        for dim in tensor["shape"]:
            count *= int(dim)
        total += count
    return total


def model_parameters(path: str | Path) -> int:
    """Parameters of the model directory `path` (or of the directory of the file `path`)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: give a model directory or a size "
                                "such as 0.6B")
    folder = path if path.is_dir() else path.parent
    info = folder / "base_info.json"
    if info.is_file():
        try:
            params = json.loads(info.read_text()).get("parameters")
        except json.JSONDecodeError as err:
            raise InputError(f"{info}: not valid JSON ({err})") from None
        if params:
            return int(params)
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise InputError(f"{folder}: no parameter count found (neither base_info.json with "
                         "'parameters' nor *.safetensors files): give the size as a number, "
                         "e.g. NAME=0.6B")
    return sum(_safetensors_parameters(f) for f in files)


def size_of(value: str) -> float:
    """A size text, else the parameters of the model directory `value`."""
    size = parse_size(value)
    return float(size) if size is not None else float(model_parameters(value))


def sizes_from_specs(specs: Sequence[str]) -> dict[str, float]:
    """{NAME: size} of 'NAME=SIZE_OR_DIR' specs; a name given twice is an error."""
    sizes: dict[str, float] = {}
    for spec in specs:
        name, sep, value = str(spec).partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise InputError(f"--size {spec!r}: expected NAME=SIZE or NAME=MODEL_DIR (e.g. "
                             "qwen3-0.6b=0.6B or tiny-s=results/models/tiny-s/base)")
        if name in sizes:
            raise InputError(f"--size gives {name!r} twice")
        sizes[name] = size_of(value)
    return sizes


def size_of_run(names: Sequence[str], sizes: Mapping[str, float]) -> float | None:
    """The size of a run known by `names` (its name, then e.g. its `model` column): the first
    name (or its part before the first '/') in `sizes`, else the first size a name states;
    None when none says."""
    keys = [k for n in names if n for k in dict.fromkeys((str(n), str(n).split("/", 1)[0]))]
    for key in keys:
        if key in sizes:
            return float(sizes[key])
    for key in keys:
        size = size_in_name(key)
        if size is not None:
            return size
    return None


def format_size(value: float) -> str:
    """1.06e6 -> '1.06M', 8192 -> '8.19k', 14e9 -> '14B'."""
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"

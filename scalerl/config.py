"""Typed, frozen configuration objects with documented fields, bounds and strict loading.

Every config in scalerl is a frozen dataclass deriving from `Config`. Fields are declared
with `field_(default, doc, ...)`, which records the documentation string and the bounds or
choices that `validate()` enforces. `Config.from_dict` builds a config (nested configs too)
from plain dicts such as parsed YAML and rejects unknown keys with a message that lists the
valid ones, so a typo never silently falls back to a default.

Deliberately left out: environment-variable overrides and CLI flag generation; configs are
files (YAML/JSON) plus explicit overrides, one way to do it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import types
import typing
from pathlib import Path
from typing import Any, Self

__all__ = ["Config", "ConfigError", "field_", "key_value", "load_mapping", "config_hash"]


class ConfigError(ValueError):
    """A config value or key is wrong; the message names the key and how to fix it."""


def key_value(item: str, option: str, form: str = "KEY=VALUE", *,
              need_value: bool = False) -> tuple[str, str]:
    """One `KEY=VALUE` item of a repeatable CLI option (`--set`, `--meta`, `--label`,
    `--order`), split at the first '=' and returned unstripped; ConfigError naming the option
    and the expected `form` when the '=' or the key (or, with need_value, the value) is
    missing."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip() or (need_value and not value.strip()):
        raise ConfigError(f"{option} {item!r}: expected {form}")
    return key, value


def field_(
    default: Any = dataclasses.MISSING,
    doc: str = "",
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    choices: tuple | None = None,
    default_factory: Any = dataclasses.MISSING,
) -> Any:
    """A dataclass field carrying its documentation and validation bounds."""
    meta = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "choices": choices}
    if default_factory is not dataclasses.MISSING:
        return dataclasses.field(default_factory=default_factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _is_config_type(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, Config)


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def _coerce(value: Any, tp: Any, key: str) -> Any:
    """Convert a plain value (from YAML/JSON) to the declared field type, or raise."""
    tp, optional = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{key}: null is not allowed; give a value of type {tp}")
    if _is_config_type(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping for {tp.__name__}, got {value!r}")
        return tp.from_dict(value, _prefix=f"{key}.")
    origin = typing.get_origin(tp)
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if len(args) != len(value):
            raise ConfigError(f"{key}: expected {len(args)} values, got {len(value)}")
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        kt, vt = typing.get_args(tp)
        return {_coerce(k, kt, key): _coerce(v, vt, f"{key}.{k}") for k, v in value.items()}
    if origin is typing.Literal:
        if value not in typing.get_args(tp):
            raise ConfigError(f"{key}: {value!r} is not one of {list(typing.get_args(tp))}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer():
                return int(value)
            raise ConfigError(f"{key}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{key}: expected a string, got {value!r}")
        return value
    return value


@dataclasses.dataclass(frozen=True)
class Config:
    """Base class: frozen dataclass + strict `from_dict` + bound checks in `validate`."""

    def __post_init__(self) -> None:
        self.validate()

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any] | None = None, *, _prefix: str = "") -> Self:
        data = dict(data or {})
        hints = typing.get_type_hints(cls)
        fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(data) - set(fields))
        if unknown:
            raise ConfigError(
                f"unknown key(s) {', '.join(_prefix + k for k in unknown)} in {cls.__name__}; "
                f"valid keys: {', '.join(sorted(fields))}"
            )
        kwargs = {k: _coerce(v, hints[k], _prefix + k) for k, v in data.items()}
        try:
            return cls(**kwargs)
        except ConfigError as err:
            raise ConfigError(f"{_prefix}{err}" if _prefix and not str(err).startswith(_prefix)
                              else str(err)) from None
        except TypeError as err:  # a required field is missing
            raise ConfigError(f"{cls.__name__}: {err}") from None

    def to_dict(self) -> dict[str, Any]:
        def plain(v: Any) -> Any:
            if isinstance(v, Config):
                return v.to_dict()
            if isinstance(v, tuple):
                return [plain(x) for x in v]
            if isinstance(v, dict):
                return {k: plain(x) for k, x in v.items()}
            return v

        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def replace(self, **changes: Any) -> Self:
        """A copy with `changes` applied; nested dicts merge into nested configs."""
        merged = self.to_dict()
        deep_merge(merged, changes)
        return type(self).from_dict(merged)

    # -- validation -----------------------------------------------------------------------
    def validate(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            meta = f.metadata
            if value is None or isinstance(value, bool) or not meta:
                if meta.get("choices") and value not in meta["choices"]:
                    raise ConfigError(f"{f.name}: {value!r} is not one of {list(meta['choices'])}")
                continue
            if meta.get("choices") is not None and value not in meta["choices"]:
                raise ConfigError(f"{f.name}: {value!r} is not one of {list(meta['choices'])}")
            if isinstance(value, int | float):
                for bound, ok, word in (
                    ("ge", lambda v, b: v >= b, ">="),
                    ("gt", lambda v, b: v > b, ">"),
                    ("le", lambda v, b: v <= b, "<="),
                    ("lt", lambda v, b: v < b, "<"),
                ):
                    b = meta.get(bound)
                    if b is not None and not ok(value, b):
                        raise ConfigError(f"{f.name} = {value!r} must be {word} {b}")

    @classmethod
    def describe(cls) -> list[tuple[str, str, Any, str]]:
        """(name, type, default, doc) for every field: used to document configs."""
        hints = typing.get_type_hints(cls)
        rows = []
        for f in dataclasses.fields(cls):
            default = f.default
            if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
                default = f.default_factory()  # type: ignore[misc]
            rows.append((f.name, str(hints[f.name]), default, f.metadata.get("doc", "")))
        return rows


def deep_merge(base: dict, changes: dict) -> dict:
    """`changes` merged into `base` in place (nested mappings merge, anything else replaces);
    returns `base`. The one merge of the package: recipe overrides, sweep layers, and the
    config files `scalerl plan` reads one over another (as snakemake merges --configfile)."""
    for k, v in changes.items():
        if isinstance(v, dict) and isinstance(base.get(k), dict):
            deep_merge(base[k], v)
        else:
            base[k] = v
    return base


def load_mapping(path: str | Path) -> dict[str, Any]:
    """Read a YAML or JSON file into a dict, with a clear error for anything else."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise ConfigError(f"config file {path} does not exist")
    text = path.read_text()
    try:
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as err:
        raise ConfigError(f"{path}: cannot parse: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def config_hash(data: dict[str, Any] | Config) -> str:
    """A short stable hash of a config (sorted-key JSON), stored in output metadata."""
    if isinstance(data, Config):
        data = data.to_dict()
    blob = json.dumps(data, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]

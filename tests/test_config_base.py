"""The Config base: strict loading, nested configs, bounds, replace, hashing."""

from __future__ import annotations

import dataclasses
import re

import pytest

from scalerl.config import Config, ConfigError, config_hash, field_, key_value, load_mapping


@dataclasses.dataclass(frozen=True)
class Inner(Config):
    lr: float = field_(1e-3, "learning rate", gt=0)
    kind: str = field_("a", "kind", choices=("a", "b"))


@dataclasses.dataclass(frozen=True)
class Outer(Config):
    steps: int = field_(10, "optimizer steps", ge=1)
    budget: tuple[int, int] | None = field_(None, "think budget range")
    inner: Inner = field_(default_factory=Inner, doc="nested")


def test_defaults_and_nested_from_dict():
    cfg = Outer.from_dict({"steps": 3, "inner": {"lr": 0.5}, "budget": [4, 8]})
    assert cfg.steps == 3 and cfg.inner.lr == 0.5 and cfg.inner.kind == "a"
    assert cfg.budget == (4, 8)
    assert Outer.from_dict(cfg.to_dict()) == cfg


def test_unknown_key_lists_valid_keys():
    with pytest.raises(ConfigError, match=r"unknown key\(s\) inner\.lrr .*valid keys: kind, lr"):
        Outer.from_dict({"inner": {"lrr": 1.0}})


def test_bounds_choices_and_types():
    with pytest.raises(ConfigError, match="steps = 0 must be >= 1"):
        Outer.from_dict({"steps": 0})
    with pytest.raises(ConfigError, match="'c' is not one of"):
        Inner.from_dict({"kind": "c"})
    with pytest.raises(ConfigError, match="expected an integer"):
        Outer.from_dict({"steps": "ten"})
    with pytest.raises(ConfigError, match="expected a number"):
        Inner.from_dict({"lr": True})


def test_replace_merges_nested_and_revalidates():
    cfg = Outer().replace(inner={"kind": "b"})
    assert cfg.inner.kind == "b" and cfg.inner.lr == 1e-3
    with pytest.raises(ConfigError):
        Outer().replace(inner={"lr": -1.0})


def test_hash_stable_and_sensitive():
    assert config_hash(Outer()) == config_hash(Outer.from_dict({}))
    assert config_hash(Outer()) != config_hash(Outer(steps=11))


def test_load_mapping_errors(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_mapping(tmp_path / "nope.yaml")
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_mapping(bad)
    good = tmp_path / "ok.yaml"
    good.write_text("steps: 4\n")
    assert Outer.from_dict(load_mapping(good)).steps == 4


def test_key_value_splits_at_the_first_equals_and_names_the_option_on_bad_items():
    assert key_value("recipe.lr=a=b", "--set") == ("recipe.lr", "a=b")
    assert key_value("run= x", "--label") == ("run", " x")  # unstripped: the caller decides
    assert key_value("note=", "--meta") == ("note", "")
    for bad in ("lr", "=1", " =1"):
        with pytest.raises(ConfigError, match=f"--set '{re.escape(bad)}': expected KEY=VALUE"):
            key_value(bad, "--set")
    with pytest.raises(ConfigError, match="--order 'model= ': expected AXIS=V1"):
        key_value("model= ", "--order", "AXIS=V1,V2", need_value=True)

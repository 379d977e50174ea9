"""benchmarks/probe_default.py's argument handling and benchmarks/probe_configs/d2.yaml, the
candidate design it probes (the probe itself takes minutes: BENCHMARKS.md, issue 37)."""

import sys
from pathlib import Path

import pytest
import yaml

from scalerl.basemodel.cli import BaseConfig
from scalerl.data.config import DataConfig
from scalerl.sweep import load_sweep
from scalerl.sweep.runs import expand, run_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import probe_default  # noqa: E402


def test_set_overrides_nested_keys_list_items_and_parses_yaml_values():
    data = {"data": {"config": {"sources": [{"n": 1}, {"n": 2}]}}, "train": {"chunks": 5}}
    probe_default.apply_set(data, "data.config.sources.1.n=3000")
    probe_default.apply_set(data, "train.steps_per_chunk=[4, 4, 8]")
    probe_default.apply_set(data, "models.tiny-s.config.sft.lr=1.5e-3")
    assert data["data"]["config"]["sources"] == [{"n": 1}, {"n": 3000}]
    assert data["train"] == {"chunks": 5, "steps_per_chunk": [4, 4, 8]}
    assert data["models"]["tiny-s"]["config"]["sft"]["lr"] == 1.5e-3


def test_a_run_the_config_lacks_is_named(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["probe_default.py", "--model", "tiny-xl", "--gen-len",
                                      "80", "--out", "/nonexistent/probe"])
    with pytest.raises(SystemExit, match="no run of .*config.yaml has model tiny-xl and "
                       "gen_len 80"):
        probe_default.main()


def test_d2_rates_are_one_constant_over_width_and_runs_differ_only_on_their_axis():
    sweep = load_sweep(yaml.safe_load((ROOT / "benchmarks/probe_configs/d2.yaml").read_text()))
    hidden = {"tiny-s": 64, "tiny-m": 128}
    runs = list(expand(sweep).values())
    assert sorted((r.model, r.gen_len) for r in runs) == [
        ("tiny-m", 50), ("tiny-m", 72), ("tiny-s", 50), ("tiny-s", 72)]
    for run in runs:
        rl = run_config(sweep, run, base="b", prompts="p").recipe.optimizer.lr
        sft = BaseConfig.from_dict(sweep.models[run.model].config).sft
        assert rl * hidden[run.model] == pytest.approx(0.0256)
        assert sft.lr * hidden[run.model] == pytest.approx(0.192)
        assert (sft.stop, sft.max_steps, sft.batch_size, sft.code_variant) == (
            "budget", 1600, 32, "binary")
    bases = [BaseConfig.from_dict(sweep.models[m].config).sft for m in hidden]
    assert bases[0].replace(lr=1.0) == bases[1].replace(lr=1.0)  # the same SFT but the lr
    sources = DataConfig.from_dict(sweep.data_config).sources
    assert [s.code_variant for s in sources if s.kind == "synthetic_code"] == ["binary"]

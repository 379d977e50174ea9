"""`scalerl train` checks the memory plan before any work, and the run config carries the
trainer numerics: a run that cannot fit the device given by --gpu-mem exits 2 with the
planner's problem naming the knob and writes nothing; the longest prompt is measured in the
trainer's own formatting; on CPU without --gpu-mem the check is skipped."""

import subprocess
import sys

import pandas as pd
import pytest
import torch
import yaml
from test_trainer_helpers import cache_dir, micro_base, run_config_dict

from scalerl.config import ConfigError
from scalerl.models.loading import load_tokenizer
from scalerl.plan.adapters import PlanError
from scalerl.rl.numerics import StepNumerics
from scalerl.rl.run_config import RunConfig
from scalerl.rl.steps import read_steps
from scalerl.rl.trainer import train_chunk
from scalerl.train import check_plan, estimate_longest_prompt_tokens


@pytest.fixture(scope="module")
def micro(request, tmp_path_factory):
    return micro_base(cache_dir(request, tmp_path_factory))


def test_run_config_numerics_fields():
    cfg = RunConfig.from_dict({"numerics": {
        "param_dtype": "float32", "compute_dtype": "bfloat16", "logprob_chunk_tokens": 2048,
        "micro_batch_tokens": 32768, "gradient_checkpointing": True}})
    assert cfg.numerics == StepNumerics(param_dtype="float32", compute_dtype="bfloat16",
                                          logprob_chunk_tokens=2048, micro_batch_tokens=32768,
                                          gradient_checkpointing=True)
    assert RunConfig().numerics == StepNumerics()  # defaults: fp32, auto, unchunked
    with pytest.raises(ConfigError, match="compute_dtype = float32 with param_dtype = bfloat16"):
        RunConfig.from_dict({"numerics": {"param_dtype": "bfloat16", "compute_dtype": "float32"}})
    with pytest.raises(ConfigError, match="logprob_chunk_tokens"):
        RunConfig.from_dict({"numerics": {"logprob_chunk_tokens": -1}})


def test_longest_prompt_is_measured_as_the_trainer_formats_it(micro):
    frame = pd.read_parquet(micro / "prompts.parquet")
    longest = max(len(p) for p in frame.loc[frame["split"] == "train", "prompt"])
    # the micro base has the character tokenizer and no chat template: bos + one id per char
    assert load_tokenizer(micro / "base").chat_template is None
    assert estimate_longest_prompt_tokens(str(micro / "prompts.parquet"), str(micro / "base")) == \
        longest + 1
    assert estimate_longest_prompt_tokens(str(micro / "missing.parquet"), str(micro / "base")) is None


def test_plan_check_skipped_on_cpu_and_run_with_gpu_mem(micro):
    cfg = RunConfig.from_dict({**run_config_dict(), "device": "cpu"})
    assert check_plan(cfg, str(micro / "base"), str(micro / "prompts.parquet"), None,
                      None) is None  # CPU, no --gpu-mem: no device memory to plan for
    report = check_plan(cfg, str(micro / "base"), str(micro / "prompts.parquet"), None, "80GB")
    assert report.fits
    with pytest.raises(PlanError, match="does not fit"):
        check_plan(cfg, str(micro / "base"), str(micro / "prompts.parquet"), None, "1MB")


def test_train_fails_before_any_work_when_the_plan_does_not_fit(micro, tmp_path):
    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text(yaml.safe_dump({**run_config_dict(), "device": "cpu"}))
    out = tmp_path / "chunk0"
    proc = subprocess.run(
        [sys.executable, "-m", "scalerl", "train", "--config", str(run_yaml), "--chunk", "1",
         "--init", str(micro / "base"), "--prompts", str(micro / "prompts.parquet"),
         "--out", str(out), "--gpu-mem", "2MB"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert "does not fit its devices" in proc.stderr and "fix:" in proc.stderr
    assert not out.exists() and not (tmp_path / "chunk0.partial").exists()


def test_trainer_uses_the_run_numerics(micro, tmp_path):
    """param_dtype float32 loads the fp32 base in fp32, a token budget of one 23-token row
    per micro-batch and a 4-position head chunk still train, and padding is reported."""
    cfg = RunConfig.from_dict({**run_config_dict(), "device": "cpu", "steps_per_chunk": 1,
                               "numerics": {"micro_batch_tokens": 24, "logprob_chunk_tokens": 4,
                                            "gradient_checkpointing": True}})
    train_chunk(cfg, chunk=1, init=micro / "base", prompts=micro / "prompts.parquet",
                out=tmp_path / "out")
    frame = read_steps(tmp_path / "out" / "steps.parquet")
    assert frame["step"].tolist() == [1]
    assert 0.0 <= frame["padding_fraction"].iloc[0] < 1.0
    from safetensors.torch import load_file

    weights = load_file(tmp_path / "out" / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.float32}

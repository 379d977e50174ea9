"""`scalerl plan` on a run.yaml and on a sweep config: table on stdout, errors, exit codes."""

from pathlib import Path

import pytest

from scalerl.cli import main
from scalerl.config import ConfigError
from scalerl.plan.cli import parse_size

FIXTURES = Path(__file__).parent.parent / "fixtures" / "plan"


def test_run_yaml_that_fits(capsys):
    code = main(["plan", "--config", str(FIXTURES / "run_tiny.yaml"), "--gpu-mem", "80GB",
                 "--prompt-tokens", "64"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "train + generate       cuda:0" in out.out and "1 of 1 run(s) fit" in out.out
    assert "activations kept: 1,920 tokens" in out.out  # 16 rows x (64 + 56) tokens
    assert out.err == ""


def test_run_yaml_that_does_not_fit_names_the_knobs(capsys):
    code = main(["plan", "--config", str(FIXTURES / "run_qwen_whole_batch.yaml"),
                 "--gpu-mem", "80GB", "--devices", "2", "--dtype", "bfloat16", "--brief"])
    out = capsys.readouterr()
    assert code == 2
    assert "DOES NOT FIT" in out.out
    errors = out.err.strip().splitlines()
    assert all(line.startswith("scalerl plan: qwen3-1.7b_L8192_scalerl_b48x16_s0: error: ")
               for line in errors)
    assert any("train cuda:0" in e and "gradient_checkpointing: true" in e for e in errors)
    # 8,192 MiB of bfloat16 KV: 74,880 tokens, 8 sequences of 1024 + 8192 + 81 tokens at once
    assert "holds 8 of the 768 sequences" in out.out


def test_sweep_config(capsys):
    code = main(["plan", "--config", str(FIXTURES / "sweep.yaml"), "--gpu-mem", "80GB"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert out.out.count("plan qwen3-0.6b_L") == 2 and "2 of 2 run(s) fit" in out.out
    assert "generate               cuda:1" in out.out  # resources.train.gpu: 2 -> own device
    code = main(["plan", "--config", str(FIXTURES / "sweep.yaml"), "--gpu-mem", "8GB",
                 "--run", "qwen3-0.6b_L4096_scalerl_b4x4_s0", "--brief"])
    out = capsys.readouterr()
    assert code == 2 and "0 of 1 run(s) fit" in out.out
    assert "vllm.kv_cache_mb: lower to" in out.err  # an 8 GiB cache cannot fit 8 GiB


def test_unknown_run_and_missing_memory(capsys):
    assert main(["plan", "--config", str(FIXTURES / "sweep.yaml"), "--gpu-mem", "80GB",
                 "--run", "nope"]) == 2
    assert "not a run of this sweep" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert main(["plan", "--config", str(FIXTURES / "run_tiny.yaml")]) == 2
        assert "--gpu-mem" in capsys.readouterr().err


def test_parse_size():
    assert parse_size("80GB") == parse_size("80GiB") == 80 * 2**30
    assert parse_size("81920MB") == 80 * 2**30
    assert parse_size("1024") == 1024
    assert parse_size("0.5 tb") == 2**39
    with pytest.raises(ConfigError, match="--gpu-mem"):
        parse_size("eighty")

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


REPO_CONFIG = Path(__file__).resolve().parents[2] / "config"


@pytest.mark.parametrize("layout, nodes", [("layout-1node-8gpu.yaml", 1),
                                           ("layout-2node-16gpu.yaml", 2)])
def test_shipped_multi_gpu_layouts_print_per_rank_figures(capsys, layout, nodes):
    """The shipped layouts over config/gpu.yaml fit 80 GB GPUs, use every GPU they ask for
    (nodes x GPUs = trainer ranks + generators), and the plan says which device does what."""
    import yaml

    code = main(["plan", "--config", str(REPO_CONFIG / "gpu.yaml"), "--config",
                 str(REPO_CONFIG / layout), "--gpu-mem", "80GB"])
    out = capsys.readouterr()
    assert code == 0, out.err
    spec = yaml.safe_load((REPO_CONFIG / layout).read_text())
    train, res = spec["train"], spec["resources"]["train"]
    assert res["nodes"] == nodes and res["nodes"] * res["gpu"] == (
        train["trainer_ranks"] + train["generators"])
    assert out.out.count("plan qwen3-") == 4 and "4 of 4 run(s) fit" in out.out
    assert f"trainer ranks: {train['trainer_ranks']} (FSDP2 over {nodes} node(s)" in out.out
    for node in range(nodes):
        assert f"node {node}: cuda:0-3 trainer ranks {4 * node}-{4 * node + 3}, cuda:4-7 " \
               f"generators {4 * node}-{4 * node + 3} (1 device(s) each)" in out.out
    assert "unused" not in out.out and "share cuda:0" not in out.out
    assert "train (each rank)      cuda:0-3" in out.out
    assert f"x 4 / {train['trainer_ranks']} ranks" in out.out  # sharded AdamW state


def test_ranks_over_the_devices_and_the_trainer_ranks_knob():
    from scalerl.plan.arch import resolve_arch
    from scalerl.plan.check import check_fits, trainer_fixes
    from scalerl.plan.memory import GiB, PlanInputs

    inp = PlanInputs(arch=resolve_arch("Qwen/Qwen3-1.7B"), prompt_tokens=1024,
                     generation_tokens=8192, param_dtype="float32", compute_dtype="bfloat16",
                     gradient_checkpointing=True, logprob_chunk_tokens=2048,
                     micro_batch_tokens=16384, devices=8, generators=4, trainer_ranks=4,
                     generator_dtype="bfloat16", vllm_gpu_memory_utilization=0.9,
                     device_memory_bytes=80 * GiB)
    six = inp.replace(trainer_ranks=6)  # 6 ranks fit 8 devices; 6 + 4 generators do not
    assert not any("ranks on each" in p for p in check_fits(six).problems)
    assert six.placement() == ["node 0: cuda:0-5 trainer ranks 0-5, generators 0-3 share "
                               "cuda:0, cuda:6-7 unused"]
    crowded = check_fits(inp.replace(trainer_ranks=16))
    assert any("trainer_ranks = 16 puts 16 ranks on each of 1 node(s), which have 8 device(s)"
               in p for p in crowded.problems)
    # a trainer that fits only sharded over more ranks: the knob names trainer_ranks
    need_one = inp.replace(trainer_ranks=1, generators=4, devices=8)
    options, _ = trainer_fixes(need_one, 22 * GiB)
    assert any(o.startswith("trainer_ranks: raise to") for o in options), options
